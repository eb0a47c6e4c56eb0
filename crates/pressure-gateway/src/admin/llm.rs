//! `GET /admin/pressure/llm`: the LLM path at a glance for the person on
//! call — each breaker's state and counts, its recent transitions (when it
//! opened, probed and closed), each provider's connection pool, and the
//! answers by degradation level. `404` when the gateway has no `gateway.llm`.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use pressure_core::clock::duration_to_millis;
use serde_json::{json, Value};

use super::AdminError;
use super::AdminState;
use crate::openai::Llm;

pub(super) async fn llm(State(state): State<AdminState>) -> Response {
    let Some(llm) = &state.llm else {
        return AdminError::NoLlm("this gateway has no gateway.llm section").into_response();
    };
    Json(page(llm)).into_response()
}

/// The page's JSON, also embedded in the dashboard's summary
/// (`/admin/pressure/summary`), so both show the same numbers.
pub(super) fn page(llm: &Llm) -> Value {
    let registry = llm.breakers();
    let now = registry.clock().now_nanos();
    let breakers: Vec<Value> = registry
        .snapshot()
        .into_iter()
        .map(|b| {
            let s = b.snapshot;
            json!({
                "provider": b.provider,
                "model": b.model,
                "state": s.state.as_str(),
                "calls": s.calls,
                "failures": s.failures,
                "slowCalls": s.slow_calls,
                "failureRate": s.failure_rate,
                "slowCallRate": s.slow_call_rate,
                "retryInMs": duration_to_millis(s.retry_in),
                "timesOpened": s.times_opened,
                "rejected": s.rejected,
            })
        })
        .collect();
    let transitions: Vec<Value> = registry
        .recent_transitions()
        .into_iter()
        .rev()
        .map(|t| {
            json!({
                "breaker": &*t.name,
                "from": t.from.as_str(),
                "to": t.to.as_str(),
                "reason": t.reason.as_str(),
                "failureRate": t.failure_rate,
                "calls": t.calls,
                "msAgo": now.saturating_sub(t.at_nanos) / 1_000_000,
            })
        })
        .collect();
    let pools: serde_json::Map<String, Value> = llm
        .provider_pools()
        .into_iter()
        .map(|(name, p)| {
            (
                name,
                json!({ "inUse": p.in_use, "peak": p.peak, "max": p.max, "waitTimeouts": p.wait_timeouts }),
            )
        })
        .collect();
    let snapshot = llm.snapshot();
    // `fleet`: shared through the backend's Redis (docs/architecture.md#what-openai-and-anthropic-clients-expect).
    let scope = match registry.fleet_status() {
        Some(f) => json!({ "scope": "fleet", "storeHealthy": f.healthy, "storeErrors": f.errors }),
        None => json!({ "scope": "process" }),
    };
    json!({
        "breakerScope": scope,
        "breakers": breakers,
        "transitions": transitions,
        "pools": pools,
        "answers": snapshot.served,
        "errors": snapshot.errors,
        "attemptErrors": snapshot.attempt_errors,
        "failedSpentMicroUsd": snapshot.failed_spent_micro_usd,
    })
}
