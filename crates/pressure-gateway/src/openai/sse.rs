//! A streamed answer as server-sent events (`text/event-stream`):
//! `data: {chunk}` per chunk and `data: [DONE]` at the end. The chain may
//! fall back only before the first chunk; a failure after it ends the
//! stream with one `data: {"error": {...}}` event (no `[DONE]`). The
//! degradation and deployment headers are sent with the head. (SSE responses release their
//! pressure permits at the response head, docs/architecture.md#the-gateway.)

use super::{set_deployment, DEGRADATION_HEADER};
use crate::backend::AnyBackend;
use crate::rejection::{Dialect, Rejection};
use axum::body::Body;
use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderValue, Response, StatusCode};
use pressure_llm::pipeline::AnswerStream;
use std::convert::Infallible;
/// A streamed answer as server-sent events: `data: {chunk}` per chunk, then
/// `data: [DONE]`; a mid-stream failure ends it with `data: {"error": ...}`
/// (no `[DONE]`). The degradation header is set before the first byte.
pub(super) fn sse_response(stream: AnswerStream<AnyBackend>) -> Response<Body> {
    let status = stream.http_status();
    let degradation = stream.degradation().as_str();
    let deployment = stream.model().map(str::to_owned);
    let events = futures::stream::unfold(Some(stream), |state| async move {
        let mut stream = state?;
        let event = match stream.next().await {
            Some(Ok(chunk)) => match serde_json::to_string(&chunk) {
                Ok(json) => return Some((Ok::<_, Infallible>(sse_event(&json)), Some(stream))),
                Err(e) => error_event(Rejection::Internal(format!("a chunk could not be encoded: {e}"))),
            },
            Some(Err(e)) => error_event(Rejection::Llm(e)),
            None => Bytes::from_static(b"data: [DONE]\n\n"),
        };
        Some((Ok(event), None))
    });
    let mut resp = Response::new(Body::from_stream(events));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let headers = resp.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(DEGRADATION_HEADER, HeaderValue::from_static(degradation));
    set_deployment(headers, deployment.as_deref());
    resp
}

/// The last event of a stream that failed after its head: the error in
/// OpenAI's shape, from the one renderer.
fn error_event(rejection: Rejection) -> Bytes {
    sse_event(&rejection.body(Dialect::OpenAi))
}

fn sse_event(json: &str) -> Bytes {
    Bytes::from(format!("data: {json}\n\n"))
}
