//! The admin listener: the broker's stats, Prometheus metrics and a health
//! check, on their own address (loopback by default), apart from the traffic.
//!
//! | route | answer |
//! |---|---|
//! | `GET /admin/pressure/stats` | `{"resources":[...]}` ([`BrokerStats`]), `application/json` |
//! | `GET /admin/pressure/llm` | breakers, their recent transitions, provider pools, answers by level (404 without `gateway.llm`) |
//! | `GET /admin/pressure/queue?count=N` | `{"items":[...]}`: the oldest parked manual-queue requests, left in place (either backend; 404 without `gateway.llm`) |
//! | `POST /admin/pressure/queue/drain?count=N` | `{"drained":n,"items":[...]}`: removes and returns them |
//! | `GET /metrics` | Prometheus text 0.0.4 ([`GatewayMetrics::encode`]) |
//! | `GET /healthz` | `{"status":"ok"}`, or `{"status":"degraded","redis":"unavailable","url":..,"error":..}` (the store's address and the real cause) |
//! | `GET /readyz` | `{"status":"ready"}`, or `503 {"status":"draining"}` once the gateway stops |
//! | `POST /admin/pressure/reload` | re-reads the config file: `200` with what changed, or `400` naming the JSON path (the old config serves on) |
//! | `GET /admin/pressure/summary?top=N` | what the dashboard draws, small whatever the number of tenants (`admin/summary.rs`) |
//! | `GET /admin/pressure/events?top=N&everyMs=M` | the summary as Server-Sent Events, one `summary` event per second (`admin/events.rs`) |
//! | `GET /admin/pressure/tenants/{id}/limits` | a tenant's limits now, their `source` (`live` \| `config` \| `default`) and usage per dimension (`admin/tenants.rs`) |
//! | `PUT /admin/pressure/tenants/{id}/limits` | a `Limits` body becomes the tenant's live override on every gateway of the backend; `400` naming the field |
//! | `DELETE /admin/pressure/tenants/{id}/limits` | removes it fleet-wide: back to `perTenant.overrides.<id>` or `perTenant.limits` |
//! | `PUT /admin/pressure/tenants/{id}/parent` | `{"parent": "<tenant>" \| null}`: the tenant's live parent (nested budgets) on every gateway of the backend; a cycle or a chain over `perTenant.maxDepth` is a `400` (`admin/parents.rs`) |
//! | `DELETE /admin/pressure/tenants/{id}/parent` | removes it fleet-wide: back to `perTenant.overrides.<id>.parent` |
//! | `POST /admin/pressure/keys` | issues an API key (`gateway.auth.runtimeKeys`): `201` with the key, shown only here (`admin/keys.rs`) |
//! | `GET /admin/pressure/keys[?tenant=&after=&limit=]` | the live runtime keys, a page at a time, never a key or its digest |
//! | `GET /admin/pressure/keys/{id}` | one key, with the usage of its own limits |
//! | `PATCH /admin/pressure/keys/{id}` | changes its `limits`, `useCases`, `expiresAt`, `metadata` on every gateway of the backend |
//! | `DELETE /admin/pressure/keys/{id}` | `204`: revoked on every gateway of the backend |
//! | `GET /dashboard` (and `GET /` → 303) | the live operator dashboard, embedded in the binary (`admin/dashboard.rs`) |
//!
//! `/healthz` (liveness) always answers 200 while the process serves: when Redis is
//! unavailable the gateway is still up and the configured failure mode
//! decides, so a load balancer must not take the instance out; the body says
//! it is degraded. With a token configured every other route (but `/`,
//! `/readyz` and the dashboard's page and assets, which hold no data)
//! requires `Authorization: Bearer <token>` (compared in constant time) and
//! answers 401 with `WWW-Authenticate: Bearer` otherwise. Unknown routes answer 404,
//! wrong methods 405, all errors in the gateway's one error shape
//! `{"error":{"type":"<code>","message":"..."}}`.

mod auth;
mod budgets;
mod control;
mod dashboard;
mod error;
mod events;
mod hierarchy;
mod keys;
mod llm;
mod parents;
mod queue;
mod store_reads;
mod summary;
mod tenants;

use crate::backend::{AnyBackend, Broker};
use crate::metrics::{GatewayMetrics, CONTENT_TYPE};
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use pressure_core::BrokerStats;
use pressure_redis::{RedisBackend, RedisStatus};
use std::sync::Arc;

pub use control::Control;
pub(crate) use error::AdminError;

/// What the admin routes read.
#[derive(Clone)]
pub struct AdminState {
    /// The gateway's broker (stats).
    pub broker: Broker,
    /// The gateway's counters.
    pub metrics: Arc<GatewayMetrics>,
    /// Bearer token required by every route but `/healthz`; `None` leaves
    /// them open (bind the listener to loopback then).
    pub token: Option<String>,
    /// The Redis backend whose health `/metrics` and `/healthz` report; when
    /// `None`, the broker's own backend is used if it is Redis.
    pub redis: Option<RedisBackend>,
    /// The LLM client behind `/v1/chat/completions`, when `gateway.llm` is set.
    pub llm: Option<crate::openai::Llm>,
    /// The gateway the listener belongs to, for `/readyz`, reloads and
    /// tenants' live limits; `None` (an admin router on its own) answers
    /// ready and 404 to the others.
    pub control: Option<Arc<dyn Control>>,
}

impl std::fmt::Debug for AdminState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminState")
            .field("broker", &self.broker)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("redis", &self.redis)
            .finish_non_exhaustive()
    }
}

impl AdminState {
    /// The health of the Redis backend in use, if any.
    fn redis_status(&self) -> Option<RedisStatus> {
        match (&self.redis, self.broker.backend()) {
            (Some(r), _) | (None, AnyBackend::Redis(r)) => Some(r.status()),
            (None, AnyBackend::Memory(_)) => None,
        }
    }
}

/// The admin routes over `state`.
pub fn router(state: AdminState) -> Router {
    let protected = Router::new()
        .route("/admin/pressure/stats", get(stats))
        .route("/admin/pressure/llm", get(llm::llm))
        .route("/admin/pressure/queue", get(queue::list))
        .route("/admin/pressure/queue/drain", axum::routing::post(queue::drain))
        .route("/admin/pressure/reload", axum::routing::post(reload))
        .route("/admin/pressure/summary", get(summary::summary))
        .route("/admin/pressure/events", get(events::events))
        .route(
            "/admin/pressure/tenants/{id}/limits",
            get(tenants::get).put(tenants::put).delete(tenants::delete),
        )
        .route(
            "/admin/pressure/tenants/{id}/parent",
            axum::routing::put(parents::put).delete(parents::delete),
        )
        .route("/admin/pressure/keys", get(keys::list).post(keys::create))
        .route(
            "/admin/pressure/keys/{id}",
            get(keys::get).patch(keys::patch).delete(keys::delete),
        )
        .route("/metrics", get(metrics))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::require_token));
    Router::new()
        .merge(protected)
        .route("/", get(dashboard::home))
        .route("/dashboard", get(dashboard::page))
        .route("/dashboard/app.js", get(dashboard::script))
        .route("/dashboard/style.css", get(dashboard::style))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
        .with_state(state)
}

async fn readyz(State(state): State<AdminState>) -> Response {
    let draining = state.control.as_ref().is_some_and(|c| c.is_draining());
    let (status, body) = if draining {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({ "status": "draining" }),
        )
    } else {
        (StatusCode::OK, serde_json::json!({ "status": "ready" }))
    };
    (
        status,
        [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))],
        Json(body),
    )
        .into_response()
}

async fn reload(State(state): State<AdminState>) -> Result<Response, AdminError> {
    let gateway = state.control.ok_or(AdminError::NotFound(
        "this admin listener has no gateway to reload",
    ))?;
    let outcome = gateway.reload().map_err(AdminError::InvalidConfig)?;
    Ok(Json(serde_json::json!({ "status": "reloaded", "resources": outcome })).into_response())
}

async fn stats(State(state): State<AdminState>) -> Json<BrokerStats> {
    Json(BrokerStats {
        resources: state.broker.stats().await,
    })
}

async fn metrics(State(state): State<AdminState>) -> Response {
    // This process's counters, and the spend of at most
    // `budgets::METRICS_TOP` tenants from the store: a scrape costs that
    // many store reads, however many tenants are registered.
    let stats = state.broker.local_stats();
    let mut body = state.metrics.encode(&stats, state.redis_status());
    // The one part read from the store: the spend of a few top tenants.
    // The levels above others (nested budgets) come too, each counting
    // its whole subtree: at most as many again.
    let parents: Vec<String> = hierarchy::parents(&state, budgets::METRICS_TOP)
        .iter()
        .map(|t| crate::resources::tenant(t))
        .collect();
    let paying = budgets::money_tenants(stats);
    if !paying.is_empty() {
        let (levels, others): (Vec<_>, Vec<_>) =
            paying.into_iter().partition(|s| parents.contains(&s.resource));
        let mut top = summary::most_denied(others, budgets::METRICS_TOP);
        top.extend(levels);
        budgets::write_metrics(&store_reads::with_usage(&state, top).await, &mut body);
    }
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE)),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        body,
    )
        .into_response()
}

async fn healthz(State(state): State<AdminState>) -> Response {
    let body = match state.redis_status() {
        Some(s) if !s.healthy => serde_json::json!({
            "status": "degraded",
            "redis": "unavailable",
            "url": s.url,
            "error": s.last_error,
            "unavailableShards": s.unhealthy_shards,
        }),
        _ => serde_json::json!({ "status": "ok" }),
    };
    (
        [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))],
        Json(body),
    )
        .into_response()
}

async fn not_found() -> AdminError {
    AdminError::NotFound("no such admin route")
}

async fn method_not_allowed() -> AdminError {
    AdminError::MethodNotAllowed
}
