//! The decision listener (`gateway.decisions`, docs/architecture.md#the-decision-service): new doors into
//! the gateway's one broker for callers whose traffic does not pass through
//! its proxy. Same config, same backend, same stats, same denial log.
//!
//! * **Decision API** (`acquire.rs`, `permit.rs`): `POST /v1/acquire` asks
//!   for capacity on a configured resource (a `pressure.resources` entry,
//!   a route, a service, a tenant `gateway:tenant:<id>` registered lazily
//!   with the `perTenant` limits, or an LLM resource) and answers `200`
//!   with an optional permit id or `429` with the wait; `waitMs > 0` waits
//!   for capacity first (the core's `acquire_within`). Permits live in a
//!   bounded permit store (`permits.rs`) and expire their lease TTL after the
//!   last acquire or renew; `POST /v1/permits/{id}/release|renew|reconcile`
//!   act on them. With `tokenEnv` set every call carries
//!   `Authorization: Bearer <token>` (compared in constant time).
//! * **Forward auth** (`forward_auth.rs`): `/v1/forward-auth`, any method,
//!   for nginx `auth_request`, Caddy `forward_auth` and Traefik
//!   `ForwardAuth`: the original request's method and URI come in
//!   `X-Forwarded-Method`/`X-Forwarded-Uri` or
//!   `X-Original-Method`/`X-Original-URI`, and the decision is the proxy's
//!   own — the same route layer, pre-auth and tenant layers — except that
//!   concurrency limits are not charged (an auth subrequest cannot give a
//!   slot back). The proxy in front proves itself with `X-Pressure-Token`.
//!
//! Every handler returns its refusals as [`Rejection`]s; one place,
//! [`DecisionState::answer`], counts, logs and renders them (in the
//! [`Dialect::Decision`] for `/v1/acquire` and the permits, the gateway's
//! elsewhere). Forward auth's own decision is the proxy's route layer's,
//! which renders its refusals itself, as it does for the proxy.

mod acquire;
mod forward_auth;
mod permit;
pub(crate) mod permits;

use crate::auth::token;
use crate::backend::{AnyBackend, Broker};
use crate::layers::pre_auth::PreAuthLayer;
use crate::layers::route::RouteLayer;
use crate::layers::tenant::TenantLayer;
use crate::metrics::GatewayMetrics;
use crate::plan::Plan;
use crate::plan::PlanCell;
use crate::rejection::{Dialect, Rejection};
use crate::resources;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{any, post};
use http::Request as HttpRequest;
use permits::PermitStore;
use pressure_core::ResourceHandle;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tower::util::BoxCloneSyncService;

/// The header a proxy in front sends the service token in on
/// `/v1/forward-auth` (its `Authorization` is the end user's).
pub(crate) const TOKEN_HEADER: &str = "x-pressure-token";

/// The header that asks `/v1/forward-auth` to answer a rate-limited
/// request with another status (only `403` is accepted): nginx's
/// `auth_request` turns a `429` into a `500`, but passes a `403` to its
/// `error_page`, which can answer `429` with the `Retry-After` it kept.
pub(crate) const DENY_STATUS_HEADER: &str = "x-pressure-deny-status";

/// The service that decides a forward-auth request: the proxy's route,
/// pre-auth and tenant layers over an answer of `204`.
pub(crate) type DecideService = BoxCloneSyncService<HttpRequest<Body>, Response, Infallible>;

/// What the decision listener's handlers share.
#[derive(Clone)]
pub(crate) struct DecisionState {
    pub(crate) plan: PlanCell,
    pub(crate) broker: Broker,
    pub(crate) metrics: Arc<GatewayMetrics>,
    pub(crate) permits: Arc<PermitStore>,
    pub(crate) token: Option<Arc<str>>,
    pub(crate) decide: DecideService,
    /// The tracer, when traces are exported: a server span per decision
    /// API call (forward auth gets its own from the route layer).
    pub(crate) tracer: Option<pressure_core::trace::Tracer>,
}

impl std::fmt::Debug for DecisionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionState")
            .field("permits", &self.permits)
            .field("token", &self.token.is_some())
            .finish_non_exhaustive()
    }
}

impl DecisionState {
    /// The state of a decision listener on the gateway's `plan` and
    /// `broker`: forward auth runs the proxy's route, pre-auth and tenant
    /// layers (writing the access log when the proxy does or when
    /// `force_access_log`); `token` is the service token, if any.
    pub(crate) fn new(
        plan: PlanCell,
        broker: Broker,
        metrics: Arc<GatewayMetrics>,
        permits: Arc<PermitStore>,
        token: Option<Arc<str>>,
        force_access_log: bool,
        tracer: Option<pressure_core::trace::Tracer>,
    ) -> Self {
        let decide = BoxCloneSyncService::new(
            tower::ServiceBuilder::new()
                .layer(
                    RouteLayer::new(Arc::clone(&plan), Arc::clone(&metrics))
                        .force_access_log(force_access_log)
                        .force_rate_limit_headers(true)
                        .without_leases()
                        .tracer(tracer.clone()),
                )
                .layer(PreAuthLayer::new(Arc::clone(&metrics)))
                .layer(TenantLayer::new(broker.clone(), Arc::clone(&metrics)))
                .service(tower::service_fn(forward_auth::allowed)),
        );
        Self {
            plan,
            broker,
            metrics,
            permits,
            token,
            decide,
            tracer,
        }
    }

    /// The listener's one render point: the handler's response, or its
    /// refusal counted and logged like the proxy's and rendered in
    /// `dialect`.
    pub(crate) fn answer(&self, dialect: Dialect, outcome: Result<Response, Rejection>) -> Response {
        outcome.unwrap_or_else(|rejection| {
            rejection.record(&self.metrics, self.plan.load().denial_lines());
            rejection.render(dialect)
        })
    }

    /// Whether `given` is the service token (always, when none is set).
    pub(crate) fn token_ok(&self, given: Option<&[u8]>) -> Result<(), Rejection> {
        token::check(self.token.as_deref(), given).map_err(|w| Rejection::ServiceToken { given: w.given })
    }
}

/// The decision listener's router (module docs).
pub(crate) fn router(state: DecisionState) -> axum::Router {
    let mut api = axum::Router::new()
        .route("/v1/acquire", post(acquire::acquire))
        .route("/v1/permits/{id}/release", post(permit::release))
        .route("/v1/permits/{id}/renew", post(permit::renew))
        .route("/v1/permits/{id}/reconcile", post(permit::reconcile))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), require_token));
    // Tracing off: no layer at all on the decision path.
    if state.tracer.is_some() {
        api = api.route_layer(axum::middleware::from_fn_with_state(state.clone(), traced));
    }
    axum::Router::new()
        .merge(api)
        .route("/v1/forward-auth", any(forward_auth::forward_auth))
        .fallback(not_found)
        .with_state(state)
}

/// A server span around a decision API call (tracing on, sampled): the
/// route's template as its name, the status, and whether the call was
/// granted.
async fn traced(State(state): State<DecisionState>, request: Request, next: Next) -> Response {
    let Some(tracer) = &state.tracer else {
        return next.run(request).await;
    };
    let template = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let Some(mut span) =
        crate::layers::route::server_span(tracer, &request, crate::metrics::traffic::NONE, None)
    else {
        return next.run(request).await;
    };
    if let Some(t) = template {
        span.rename(format!("{} {t}", request.method()));
        span.set("http.route", t);
    }
    let response = next.run(request).await;
    let status = response.status().as_u16();
    span.set("http.response.status_code", status);
    let result = match status {
        200..=299 => "granted",
        429 => "refused",
        _ => "error",
    };
    span.event(
        "pressure.admission",
        vec![
            ("pressure.layer".into(), "decision".into()),
            ("pressure.result".into(), result.into()),
        ],
    );
    if status >= 500 {
        span.fail("server error");
    }
    response
}

/// The bearer token of the decision API (forward auth checks its own
/// header).
async fn require_token(State(state): State<DecisionState>, request: Request, next: Next) -> Response {
    let outcome = match state.token_ok(token::bearer(request.headers())) {
        Ok(()) => Ok(next.run(request).await),
        Err(r) => Err(r),
    };
    state.answer(Dialect::Decision, outcome)
}

async fn not_found(State(state): State<DecisionState>, request: Request) -> Response {
    let refused = Rejection::NotFound(request.uri().path().to_owned());
    state.answer(Dialect::Gateway, Err(refused))
}

/// The handle of the configured resource `id` in `plan`: a route, service
/// or `pressure.resources` entry, an LLM resource, or a tenant (registered
/// lazily with its limits, as the tenant layer does).
pub(crate) fn resolve(
    plan: &Plan,
    broker: &Broker,
    id: &str,
) -> Result<ResourceHandle<AnyBackend>, Rejection> {
    let unknown = || Rejection::UnknownResource(id.to_owned());
    if resources::is_tenant(id) {
        let tenant = &id[resources::TENANT_PREFIX.len()..];
        if tenant.is_empty() || tenant.len() > MAX_TENANT_BYTES {
            return Err(unknown());
        }
        return plan
            .tenant_handle(broker, tenant)
            .ok_or_else(unknown)?
            .map_err(|e| Rejection::LimiterUnavailable {
                resource: id.to_owned(),
                layer: crate::metrics::Layer::Decision,
                retry_after: Duration::from_secs(1),
                reason: format!("tenant registration failed: {e}"),
            });
    }
    let configured = plan.resource_ids().contains(id)
        || (plan.llm().is_some() && id.starts_with(pressure_llm::reservation::RESOURCE_PREFIX));
    if !configured {
        return Err(unknown());
    }
    broker.resource(id).ok_or_else(unknown)
}

/// Longest tenant id the tenant layer accepts from a token (its claim
/// bound), so the decision API cannot register tenants no token can name.
const MAX_TENANT_BYTES: usize = 256;
