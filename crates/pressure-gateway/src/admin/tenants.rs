//! `/admin/pressure/tenants/{id}/limits`: a tenant's limits, live
//! (`crate::plan::overrides` for the precedence, the store and the propagation
//! bound).
//!
//! * `GET` → `{"tenant","resource","limits","source","enforced","usage"}`:
//!   the limits the tenant gets now (`null` when none), where they come
//!   from (`live` | `config` | `default`), whether tenants are limited at
//!   all (`perTenant.enabled`), and per limited dimension `{"dimension",
//!   "used","limit"}` (a calendar budget adds `resetsAt`, Unix ms) as the
//!   backend counts it (fleet-wide on Redis; also
//!   for a tenant not registered here yet). A tenant's usage counts its
//!   whole subtree: every descendant's requests are charged to it too.
//!   Beside: `parent` (or `null`), `ancestors` (innermost first) and
//!   `children` (direct), from the config and the live parents
//!   (`admin/parents.rs`).
//! * `PUT` with a `Limits` object → stored as the tenant's live override
//!   for every gateway on the same backend, applied here before the answer
//!   (the `GET` document). A body that does not parse or whose limits do
//!   not compile: `400` naming the field (`path`, e.g.
//!   `requestsPerMinute`). A tenant never seen yet may be given one; it
//!   applies from its first request.
//! * `DELETE` → the live override removed fleet-wide: back to the config
//!   override or the template (the `GET` document).
//!
//! The id is a tenant as a JWT names it (non-empty, at most 256 bytes;
//! percent-encode `/` and other reserved characters in the path). The
//! store unreachable: `503` (`limiter_unavailable`), nothing changed here.

use super::{AdminError, AdminState, Control};
use crate::backend::Broker;
use crate::plan::overrides::{check_tenant, compile, Source};
use crate::resources;
use crate::settings::ConfigError;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use pressure_core::{Backend, LimitSpec, Limits, Usage};
use serde_json::{json, Value};
use std::sync::Arc;

/// `GET`: the tenant's limits, their source and usage.
pub(super) async fn get(
    State(state): State<AdminState>,
    Path(tenant): Path<String>,
) -> Result<Response, AdminError> {
    let gateway = checked(&state, &tenant)?;
    Ok(describe(&*gateway, &state.broker, &tenant).await.into_response())
}

/// `PUT`: a live override for the fleet.
pub(super) async fn put(
    State(state): State<AdminState>,
    Path(tenant): Path<String>,
    body: Bytes,
) -> Result<Response, AdminError> {
    let gateway = checked(&state, &tenant)?;
    let limits = parse(&body).map_err(AdminError::InvalidConfig)?;
    let template = compile(&limits, "")
        .and_then(|t| holdable(&state.broker, &tenant, t))
        .map_err(AdminError::InvalidConfig)?;
    write(&*gateway, &state.broker, tenant, Some((limits, template))).await
}

/// `DELETE`: back to the config override or the template, fleet-wide.
pub(super) async fn delete(
    State(state): State<AdminState>,
    Path(tenant): Path<String>,
) -> Result<Response, AdminError> {
    let gateway = checked(&state, &tenant)?;
    write(&*gateway, &state.broker, tenant, None).await
}

/// The gateway behind the listener, once `tenant` is a valid id.
pub(super) fn checked(state: &AdminState, tenant: &str) -> Result<Arc<dyn Control>, AdminError> {
    check_tenant(tenant, "tenant").map_err(|e| AdminError::BadRequest(e.to_string().into()))?;
    state
        .control
        .clone()
        .ok_or(AdminError::NotFound("this admin listener has no gateway"))
}

/// `template` if the gateway's backend can hold it (Redis refuses a `gcra`
/// rate finer than its clock), so that no stored override makes its
/// tenant unregistrable.
fn holdable(
    broker: &Broker,
    tenant: &str,
    template: pressure_core::LimitTemplate,
) -> Result<pressure_core::LimitTemplate, ConfigError> {
    let spec = template
        .limits()
        .compile()
        .map_err(|e| ConfigError::new(e.field, e.problem))?;
    broker
        .backend()
        .attach(&resources::tenant(tenant), Arc::new(spec))
        .map(|_| template)
        .map_err(|e| ConfigError::new("(body)", e.to_string()))
}

/// The body as `Limits`, or the problem at its path.
fn parse(body: &[u8]) -> Result<Limits, ConfigError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { "(body)".to_owned() } else { path };
        ConfigError::new(path, e.into_inner().to_string())
    })
}

async fn write(
    gateway: &dyn Control,
    broker: &Broker,
    tenant: String,
    limits: Option<(Limits, pressure_core::LimitTemplate)>,
) -> Result<Response, AdminError> {
    let set = limits.is_some();
    if gateway.write_override(tenant.clone(), limits).await.is_err() {
        return Err(AdminError::StoreUnavailable {
            resource: resources::tenant(&tenant),
        });
    }
    tracing::info!(
        tenant = tenant.as_str(),
        action = if set { "set" } else { "removed" },
        "live tenant limit override"
    );
    Ok(describe(gateway, broker, &tenant).await.into_response())
}

/// The `GET` document of `tenant`.
pub(super) async fn describe(gateway: &dyn Control, broker: &Broker, tenant: &str) -> Json<Value> {
    let plan = gateway.plan();
    let (limits, source, enforced) = match plan.tenant_limits(tenant) {
        Some((t, s)) => (Some(t), s, true),
        None => match plan.live_overrides().get(tenant) {
            Some(t) => (Some(t), Source::Live, false),
            None => (None, Source::Default, false),
        },
    };
    let resource = resources::tenant(tenant);
    let lineage = plan.lineage(tenant);
    // A tenant below a root lives in its root's group (one hash slot).
    let group = lineage
        .last()
        .filter(|_| lineage.len() > 1)
        .map(|r| resources::tenant(r));
    let usage = match limits.as_ref().filter(|_| enforced) {
        Some(t) => usage(broker, &resource, group.as_deref(), t.limits()).await,
        None => Value::Array(Vec::new()),
    };
    let mut children: Vec<String> = plan
        .parent_links()
        .into_iter()
        .filter(|(_, p)| p == tenant)
        .map(|(c, _)| c)
        .collect();
    children.sort_unstable();
    Json(json!({
        "tenant": tenant,
        "resource": resource,
        "limits": limits.as_ref().map(|t| t.limits()),
        "source": source,
        "enforced": enforced,
        "parent": plan.parent(tenant),
        "ancestors": lineage.get(1..).unwrap_or_default(),
        "children": children,
        "usage": usage,
    }))
}

/// Per limited dimension, what the backend counts for `resource` now: the
/// registered resource's, or (not registered here yet) the store's under
/// `limits`. `null` with a message when the store does not answer.
pub(super) async fn usage(broker: &Broker, resource: &str, group: Option<&str>, limits: &Limits) -> Value {
    let read = match broker.resource(resource) {
        Some(h) => h
            .usage()
            .await
            .map(|u| (Arc::new(h.spec().clone()), u))
            .map_err(|e| e.to_string()),
        None => match limits.compile() {
            Ok(spec) => {
                let spec = Arc::new(spec);
                let backend = broker.backend();
                let attached = match group {
                    Some(g) => backend.attach_grouped(resource, g, Arc::clone(&spec)),
                    None => backend.attach(resource, Arc::clone(&spec)),
                };
                match attached {
                    Ok(h) => backend
                        .usage(&h)
                        .await
                        .map(|u| (spec, u))
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                }
            }
            Err(e) => Err(e.to_string()),
        },
    };
    match read {
        Ok((spec, u)) => Value::Array(rows(&spec, &u)),
        Err(e) => json!({ "error": e }),
    }
}

/// One row per dimension the usage reports (whatever dimensions the core
/// counts), then the concurrency leases; a calendar budget's row says when
/// it resets (`resetsAt`, Unix milliseconds, by the backend's clock).
fn rows(spec: &LimitSpec, usage: &Usage) -> Vec<Value> {
    let mut out: Vec<Value> = usage
        .dimensions
        .iter()
        .map(|(dim, used)| {
            let limit = spec.limits.get(*dim);
            let mut row = json!({ "dimension": dim.as_str(), "used": used, "limit": limit });
            if let Some((_, at)) = usage.resets.iter().find(|(d, _)| d == dim) {
                row["resetsAt"] = json!(at);
            }
            row
        })
        .collect();
    if let Some(limit) = spec.concurrency {
        out.push(json!({ "dimension": "maxConcurrentRequests", "used": usage.leases, "limit": limit }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_body_names_its_field() {
        let e = parse(br#"{"requestsPerMinute": "ten"}"#).unwrap_err();
        assert_eq!(e.path, "requestsPerMinute");
        let e = parse(br#"{"requestsPerMinut": 10}"#).unwrap_err();
        assert!(e.problem.contains("unknown field"), "{e}");
        assert_eq!(parse(b"[").unwrap_err().path, "(body)");
        let ok = parse(br#"{"requestsPerMinute": 10}"#).unwrap();
        assert_eq!(ok.requests_per_minute, Some(10));
        assert_eq!(compile(&ok, "").unwrap().limits(), &ok);
    }

    #[test]
    fn rows_follow_the_usage() {
        let limits = Limits {
            requests_per_minute: Some(5),
            cost_micro_usd_per_day: Some(900),
            max_concurrent_requests: Some(2),
            ..Limits::default()
        };
        let spec = limits.compile().unwrap();
        // Field by field: `Usage` may gain fields (calendar dimensions).
        #[allow(clippy::field_reassign_with_default)]
        let usage = {
            let mut usage = Usage::default();
            usage.dimensions = vec![
                (pressure_core::Dimension::RequestsPerMinute, 3),
                (pressure_core::Dimension::CostMicroUsdPerDay, 250),
            ];
            usage.resets = vec![(pressure_core::Dimension::CostMicroUsdPerDay, 1_764_720_000_000)];
            usage.leases = 1;
            usage
        };
        assert_eq!(
            Value::Array(rows(&spec, &usage)),
            json!([
                {"dimension": "requestsPerMinute", "used": 3, "limit": 5},
                {"dimension": "costMicroUsdPerDay", "used": 250, "limit": 900, "resetsAt": 1_764_720_000_000_u64},
                {"dimension": "maxConcurrentRequests", "used": 1, "limit": 2},
            ])
        );
    }
}
