//! A whole answer in the agent's dialect: the provider's own body when a
//! level of the agent's wire answered, else the chat answer rendered
//! (a manual-queue ticket too, as a message / response saying so), with
//! the degradation, deployment, ticket and dropped headers.

use super::dialect::Dialect;
use super::dropped_header;
use crate::layers::Outcome;
use crate::openai::{set_deployment, DEGRADATION_HEADER, TICKET_HEADER};
use crate::rejection::Rejection;
use axum::body::Body;
use http::{HeaderValue, Response, StatusCode};
use pressure_llm::pipeline::{queued_response, Answer, LlmReply, QUEUED_MODEL};
use pressure_llm::provider::NativeRequest;
use serde_json::Map;

/// The response to `answer` of a request for `model`.
pub(super) fn respond<D: Dialect>(
    answer: &Answer,
    model: &str,
    native: Option<&NativeRequest>,
    dropped: &[String],
    request_id: &str,
) -> Outcome {
    let empty = Map::new();
    let request = native.map_or(&empty, |n| &n.body);
    let queued;
    let resp = match &answer.reply {
        LlmReply::Completion(resp) => resp,
        LlmReply::Queued { ticket } => {
            queued = queued_response(QUEUED_MODEL, ticket);
            &queued
        }
    };
    let (body, translated) = match &resp.native {
        Some((wire, raw)) if *wire == D::WIRE => (serde_json::to_vec(raw.as_ref()), false),
        _ => (serde_json::to_vec(&D::render(resp, model, request)), true),
    };
    let body = body.map_err(|_| Rejection::Internal("the answer could not be encoded".into()))?;
    let mut out = Response::new(Body::from(body));
    *out.status_mut() = StatusCode::from_u16(answer.http_status()).unwrap_or(StatusCode::OK);
    let h = out.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        DEGRADATION_HEADER,
        HeaderValue::from_static(answer.degradation.as_str()),
    );
    set_deployment(h, answer.model.as_deref());
    if let Some(v) = answer.ticket().and_then(|t| HeaderValue::from_str(t).ok()) {
        h.insert(TICKET_HEADER, v);
    }
    if translated {
        if let Some(v) = dropped_header(dropped, request_id) {
            h.insert(super::DROPPED_HEADER, v);
        }
    }
    Ok(out)
}
