//! `GET /admin/pressure/summary?top=N`: everything the dashboard draws, in
//! one small JSON document whatever the number of tenants.
//!
//! `/admin/pressure/stats` lists every resource, so with 100 000 tenants it
//! is a document of about 20 MB; a page polling it once a second would be
//! unusable. The summary instead
//!
//! * lists the configured resources (routes, services, LLM models: a number
//!   bounded by the config) with their usage read from the store;
//! * folds the per-tenant resources into totals (`count`, `allowed`,
//!   `denied`, `backendErrors`, `denying`) and lists only the `top` N
//!   tenants by denials (then by admissions, then by id), with their usage;
//! * embeds the `/admin/pressure/llm` page (breakers, transitions, answers by
//!   degradation level, money spent on failed attempts) and the store's
//!   health.
//!
//! The tenant totals and the ranking use this process's counters only (no
//! store round trip per tenant); usage is read for the listed resources
//! only, so one summary costs `resources + top` store reads.
//!
//! ```json
//! {"top":20,
//!  "resources":[{"resource":"gateway:route:x","kind":"limit","limits":{..},"usage":{..},
//!                "active":0,"allowed":10,"denied":2,"backendErrors":0,"queued":null}],
//!  "tenants":{"count":100000,"allowed":..,"denied":..,"backendErrors":..,"denying":12,
//!             "top":[{"tenant":"acme","resource":"gateway:tenant:acme",..,
//!                     "budgets":[{"dimension":"costMicroUsdPerDay","spent":250,"budget":900,"resetsAt":..}]}]},
//!  "llm":{..} | null,
//!  "health":{"status":"ok","ready":true,"backend":"memory","redis":null}}
//! ```

use super::store_reads::with_usage;
use super::AdminError;
use super::{llm, AdminState};
use crate::backend::AnyBackend;
use crate::resources;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use pressure_core::ResourceStats;
use serde::Deserialize;
use serde_json::{json, Value};
use std::cmp::Ordering;

/// Tenants listed when the query names no `top`.
pub(super) const DEFAULT_TOP: usize = 20;

/// Most tenants one summary lists.
pub(super) const MAX_TOP: usize = 200;

/// The query of the summary and the event stream.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SummaryQuery {
    /// Tenants to list (`0..=200`, default 20).
    pub(super) top: Option<String>,
}

impl SummaryQuery {
    /// The number of tenants to list, or the problem (for a `400`).
    pub(super) fn top(&self) -> Result<usize, String> {
        let Some(raw) = &self.top else {
            return Ok(DEFAULT_TOP);
        };
        match raw.parse::<usize>() {
            Ok(n) if n <= MAX_TOP => Ok(n),
            _ => Err(format!("top: must be an integer from 0 to {MAX_TOP}")),
        }
    }
}

/// The `400` of an admin page whose query string does not parse.
pub(super) fn malformed_query(_: QueryRejection) -> Response {
    AdminError::BadRequest("malformed query string".into()).into_response()
}

pub(super) async fn summary(
    State(state): State<AdminState>,
    query: Result<Query<SummaryQuery>, QueryRejection>,
) -> Response {
    let query = match query {
        Ok(Query(q)) => q,
        Err(e) => return malformed_query(e),
    };
    let top = match query.top() {
        Ok(n) => n,
        Err(problem) => return AdminError::BadRequest(problem.into()).into_response(),
    };
    (
        [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))],
        Json(build(&state, top).await),
    )
        .into_response()
}

/// The summary with the `top` most-denied tenants.
pub(super) async fn build(state: &AdminState, top: usize) -> Value {
    let (configured, tenants): (Vec<ResourceStats>, Vec<ResourceStats>) = state
        .broker
        .local_stats()
        .into_iter()
        .partition(|s| !resources::is_tenant(&s.resource));
    let totals = TenantTotals::of(&tenants);
    let ranked = most_denied(tenants, top);

    let resources = with_usage(state, configured).await;
    let top_tenants: Vec<Value> = with_usage(state, ranked)
        .await
        .into_iter()
        .map(|s| {
            let tenant = s
                .resource
                .strip_prefix(resources::TENANT_PREFIX)
                .unwrap_or(&s.resource)
                .to_owned();
            json!({
                "tenant": tenant,
                "resource": s.resource,
                "limits": s.limits,
                "usage": s.usage,
                "budgets": super::budgets::rows(&s),
                "allowed": s.allowed,
                "denied": s.denied,
                "shadowDenied": s.shadow_denied,
                "backendErrors": s.backend_errors,
            })
        })
        .collect();
    let resources: Vec<Value> = resources
        .into_iter()
        .map(|s| {
            json!({
                "resource": s.resource,
                "kind": s.kind,
                "limits": s.limits,
                "usage": s.usage,
                "active": s.active,
                "allowed": s.allowed,
                "denied": s.denied,
                "shadowDenied": s.shadow_denied,
                "backendErrors": s.backend_errors,
                "queued": s.queued,
            })
        })
        .collect();
    json!({
        "top": top,
        "resources": resources,
        "tenants": {
            "count": totals.count,
            "allowed": totals.allowed,
            "denied": totals.denied,
            "shadowDenied": totals.shadow_denied,
            "backendErrors": totals.backend_errors,
            "denying": totals.denying,
            "top": top_tenants,
        },
        "hierarchy": super::hierarchy::summary(state).await,
        "llm": state.llm.as_ref().map(llm::page),
        "health": health(state),
    })
}

/// The store's health and the listener's readiness, for the page's badge.
fn health(state: &AdminState) -> Value {
    let ready = !state.control.as_ref().is_some_and(|c| c.is_draining());
    let backend = match state.broker.backend() {
        AnyBackend::Memory(_) => "memory",
        AnyBackend::Redis(_) => "redis",
    };
    let redis = state.redis_status();
    let status = match &redis {
        Some(s) if !s.healthy => "degraded",
        _ => "ok",
    };
    json!({
        "status": status,
        "ready": ready,
        "backend": backend,
        "redis": redis.map(|s| json!({
            "url": s.url,
            "healthy": s.healthy,
            "error": s.last_error,
            "failures": s.failures,
            "fallbacks": s.fallbacks,
        })),
    })
}

/// The per-tenant counters summed over every tenant.
#[derive(Debug, Default, PartialEq, Eq)]
struct TenantTotals {
    count: usize,
    allowed: u64,
    denied: u64,
    /// Of `denied`, the would-be refusals of shadow limits (admitted).
    shadow_denied: u64,
    backend_errors: u64,
    /// Tenants refused at least once.
    denying: usize,
}

impl TenantTotals {
    fn of(tenants: &[ResourceStats]) -> Self {
        tenants.iter().fold(Self::default(), |mut t, s| {
            t.count += 1;
            t.allowed = t.allowed.saturating_add(s.allowed);
            t.denied = t.denied.saturating_add(s.denied);
            t.shadow_denied = t.shadow_denied.saturating_add(s.shadow_denied);
            t.backend_errors = t.backend_errors.saturating_add(s.backend_errors);
            t.denying += usize::from(s.denied > 0);
            t
        })
    }
}

/// Most denials first, then most admissions, then by id: a total order, so
/// the list does not shuffle between two summaries of the same counts.
fn rank(a: &ResourceStats, b: &ResourceStats) -> Ordering {
    b.denied
        .cmp(&a.denied)
        .then(b.allowed.cmp(&a.allowed))
        .then_with(|| a.resource.cmp(&b.resource))
}

/// The `top` first of `tenants` by [`rank`], in that order, in
/// O(n + top log top).
pub(super) fn most_denied(mut tenants: Vec<ResourceStats>, top: usize) -> Vec<ResourceStats> {
    if top == 0 {
        return Vec::new();
    }
    if tenants.len() > top {
        tenants.select_nth_unstable_by(top - 1, rank);
        tenants.truncate(top);
    }
    tenants.sort_unstable_by(rank);
    tenants
}

#[cfg(test)]
mod tests {
    use super::*;
    use pressure_core::{Limits, ResourceKind};

    fn tenant(id: &str, allowed: u64, denied: u64) -> ResourceStats {
        ResourceStats {
            resource: resources::tenant(id),
            kind: ResourceKind::Limit,
            limits: Limits::default(),
            usage: Default::default(),
            resets_at: Default::default(),
            active: None,
            allowed,
            denied,
            backend_errors: 0,
            shadow_denied: 0,
            queued: None,
            wait_time_ms: None,
            lazy: true,
        }
    }

    fn ids(list: &[ResourceStats]) -> Vec<&str> {
        list.iter().map(|s| s.resource.as_str()).collect()
    }

    #[test]
    fn ranks_by_denials_then_admissions_then_id() {
        let all = vec![
            tenant("a", 5, 0),
            tenant("b", 1, 3),
            tenant("c", 9, 3),
            tenant("d", 0, 7),
            tenant("e", 5, 0),
        ];
        assert_eq!(
            ids(&most_denied(all.clone(), 3)),
            ["gateway:tenant:d", "gateway:tenant:c", "gateway:tenant:b"]
        );
        assert_eq!(
            ids(&most_denied(all.clone(), 10)),
            [
                "gateway:tenant:d",
                "gateway:tenant:c",
                "gateway:tenant:b",
                "gateway:tenant:a",
                "gateway:tenant:e"
            ]
        );
        assert!(most_denied(all, 0).is_empty());
    }

    #[test]
    fn totals_count_every_tenant() {
        let all = [tenant("a", 5, 0), tenant("b", 1, 3), tenant("c", 2, 4)];
        assert_eq!(
            TenantTotals::of(&all),
            TenantTotals {
                count: 3,
                allowed: 8,
                denied: 7,
                shadow_denied: 0,
                backend_errors: 0,
                denying: 2
            }
        );
    }

    #[test]
    fn top_is_bounded() {
        let q = |top: &str| SummaryQuery {
            top: Some(top.to_owned()),
        };
        assert_eq!(SummaryQuery::default().top().ok(), Some(DEFAULT_TOP));
        assert_eq!(q("0").top().ok(), Some(0));
        assert_eq!(q("200").top().ok(), Some(200));
        assert!(q("201").top().is_err());
        assert!(q("-1").top().is_err());
        assert!(q("x").top().is_err());
    }
}
