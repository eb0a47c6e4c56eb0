//! `POST /v1/permits/{id}/release|renew|reconcile`: what a decision API
//! client does with the permit `POST /v1/acquire` gave it.
//!
//! * `release`: gives the capacity back; `204` also for an unknown, expired
//!   or already released id (idempotent, as `Permit::release` is).
//! * `renew`: keeps the permit for another lease TTL (`200 {"leaseTtlMs"}`);
//!   `410` once it expired or was released, or when the store reclaimed its
//!   lease.
//! * `reconcile`: corrects the permit's token reservation to the actual
//!   usage (`{"inputTokens","outputTokens"}`), `204`; `410` when gone.

use super::acquire::{core_error, count, parse};
use super::DecisionState;
use crate::rejection::{Dialect, Rejection};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use http::StatusCode;
use pressure_core::ActualUsage;
use serde::{Deserialize, Serialize};

/// `200` of `renew`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Renewed {
    lease_ttl_ms: u64,
}

/// The body of `reconcile`: the actual usage (a JSON object; each count a
/// whole number from 0 to 2^53 − 1).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Usage {
    #[serde(default, deserialize_with = "count")]
    input_tokens: u64,
    #[serde(default, deserialize_with = "count")]
    output_tokens: u64,
}

pub(super) async fn release(State(state): State<DecisionState>, Path(id): Path<String>) -> Response {
    if let Some(shared) = state.permits.remove(&id) {
        // A failed release still ends the permit (it is no longer live):
        // the store settles or expires the lease on its own.
        if let Err(e) = shared.lock().await.release().await {
            tracing::warn!(target: "pressure::decisions", error = %e, "permit release failed");
        }
    }
    StatusCode::NO_CONTENT.into_response()
}

pub(super) async fn renew(State(state): State<DecisionState>, Path(id): Path<String>) -> Response {
    let outcome = renewed(&state, &id).await;
    state.answer(Dialect::Decision, outcome)
}

async fn renewed(state: &DecisionState, id: &str) -> Result<Response, Rejection> {
    let shared = state.permits.get(id).ok_or(Rejection::PermitGone)?;
    {
        let mut permit = shared.lock().await;
        // A lease the store no longer holds (reclaimed after an outage) is
        // gone for the client too; an error leaves it to the renewal task.
        if permit.grant().lease.is_some() && matches!(permit.renew().await, Ok(false)) {
            drop(permit);
            state.permits.remove(id);
            return Err(Rejection::PermitGone);
        }
    }
    let ttl = state.permits.renew(id).ok_or(Rejection::PermitGone)?;
    Ok(Json(Renewed {
        lease_ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
    })
    .into_response())
}

pub(super) async fn reconcile(
    State(state): State<DecisionState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let outcome = reconciled(&state, &id, &body).await;
    state.answer(Dialect::Decision, outcome)
}

async fn reconciled(state: &DecisionState, id: &str, body: &[u8]) -> Result<Response, Rejection> {
    let usage: Usage = parse(body)?;
    let shared = state.permits.get(id).ok_or(Rejection::PermitGone)?;
    let mut permit = shared.lock().await;
    let actual = ActualUsage {
        requests: permit.grant().reserved.requests,
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
        // The decision API reports no cost: the reserved cost stands.
        cost_micro_usd: permit.grant().reserved.cost_micro_usd,
    };
    match permit.reconcile(actual).await {
        Ok(()) => Ok(StatusCode::NO_CONTENT.into_response()),
        Err(e) => Err(core_error(permit.resource().unwrap_or_default(), e)),
    }
}
