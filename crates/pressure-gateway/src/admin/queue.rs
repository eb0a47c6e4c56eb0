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

use super::AdminState;
use crate::rejection::Rejection;

/// Largest `count` of one call.
const MAX_COUNT: usize = 10_000;

#[derive(Debug, Deserialize)]
pub(super) struct CountParam {
    count: Option<usize>,
}

fn count(p: &CountParam) -> usize {
    p.count.unwrap_or(100).clamp(1, MAX_COUNT)
}

fn no_llm() -> Response {
    Rejection::NoLlm("this gateway has no gateway.llm section, hence no manual queue").into_response()
}

pub(super) async fn list(State(state): State<AdminState>, Query(p): Query<CountParam>) -> Response {
    let Some(llm) = &state.llm else { return no_llm() };
    match llm.manual_queue().peek(count(&p)).await {
        Ok(items) => Json(json!({ "items": items })).into_response(),
        Err(e) => Rejection::QueueUnavailable(e.to_string()).into_response(),
    }
}

pub(super) async fn drain(State(state): State<AdminState>, Query(p): Query<CountParam>) -> Response {
    let Some(llm) = &state.llm else { return no_llm() };
    match llm.manual_queue().take(count(&p)).await {
        Ok(items) => {
            tracing::info!(
                drained = items.len(),
                "manual queue drained through the admin API"
            );
            Json(json!({ "drained": items.len(), "items": items })).into_response()
        }
        Err(e) => Rejection::QueueUnavailable(e.to_string()).into_response(),
    }
}
