//! The manual queue for the person on call, on either backend:
//! `GET /admin/pressure/queue?count=N` lists the oldest parked requests and
//! leaves them; `POST /admin/pressure/queue/drain?count=N` removes and
//! returns them (someone took them). `count` defaults to 100, at most
//! 10 000. `404` when the gateway has no `gateway.llm`.

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::AdminError;
use super::AdminState;

/// Largest `count` of one call.
const MAX_COUNT: usize = 10_000;

#[derive(Debug, Deserialize)]
pub(super) struct CountParam {
    count: Option<usize>,
}

fn count(p: &CountParam) -> usize {
    p.count.unwrap_or(100).clamp(1, MAX_COUNT)
}

const NO_LLM: AdminError =
    AdminError::NoLlm("this gateway has no gateway.llm section, hence no manual queue");

pub(super) async fn list(
    State(state): State<AdminState>,
    Query(p): Query<CountParam>,
) -> Result<Response, AdminError> {
    let llm = state.llm.as_ref().ok_or(NO_LLM)?;
    let items = llm.manual_queue().peek(count(&p)).await.map_err(unavailable)?;
    Ok(Json(json!({ "items": items })).into_response())
}

/// The `503` of a store that failed.
fn unavailable(e: impl std::fmt::Display) -> AdminError {
    AdminError::QueueUnavailable(e.to_string())
}

pub(super) async fn drain(
    State(state): State<AdminState>,
    Query(p): Query<CountParam>,
) -> Result<Response, AdminError> {
    let llm = state.llm.as_ref().ok_or(NO_LLM)?;
    let items = llm.manual_queue().take(count(&p)).await.map_err(unavailable)?;
    tracing::info!(
        drained = items.len(),
        "manual queue drained through the admin API"
    );
    Ok(Json(json!({ "drained": items.len(), "items": items })).into_response())
}
