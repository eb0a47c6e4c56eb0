//! `POST /v1/chat/completions`: read and check the body, run the pipeline,
//! answer with the completion, the stream or a refusal in OpenAI's shape;
//! one JSON log line per event (target `pressure::llm`) with its id, use
//! case, the level that answered, the attempts and the time taken.

use super::sse::sse_response;
use super::{DEGRADATION_HEADER, TICKET_HEADER};
use crate::backend::AnyBackend;
use crate::layers::Reply;
use crate::proxy::is_too_large;
use crate::rejection::{Dialect, Rejection};
use axum::body::Body;
use http::{HeaderValue, Request, Response, StatusCode};
use pressure_core::clock::duration_to_millis;
use pressure_llm::pipeline::{queued_response, Answer, LlmClient, LlmError, Reply as LlmReply, QUEUED_MODEL};
use pressure_llm::provider::ChatRequest;
use serde_json::{json, Value};

/// The request header whose value (when it is 1–128 characters of
/// `[A-Za-z0-9._:-]`) becomes the event's id; otherwise one is generated.
/// Echoed on the response and sent to the provider as `x-pressure-request-id`.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The caller's `x-request-id`, when it is a safe id.
pub(super) fn caller_request_id<B>(req: &Request<B>) -> Option<String> {
    let v = req.headers().get(REQUEST_ID_HEADER)?.to_str().ok()?;
    let ok = (1..=128).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    ok.then(|| v.to_owned())
}

/// Handles one call of the endpoint; the response (answer or refusal)
/// carries `x-request-id`.
pub async fn chat_completions(llm: &LlmClient<AnyBackend>, req: Request<Body>) -> Response<Body> {
    let request_id = caller_request_id(&req).unwrap_or_else(|| llm.new_request_id());
    let started = tokio::time::Instant::now();
    let mut resp = handle(llm, req, &request_id, started)
        .await
        .unwrap_or_else(|r| r.render(Dialect::OpenAi));
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        resp.headers_mut().insert(REQUEST_ID_HEADER, v);
    }
    resp
}

/// Logs the outcome of one event.
fn log_event(
    request_id: &str,
    use_case: &str,
    started: tokio::time::Instant,
    outcome: Result<&Answer, &LlmError>,
) {
    let elapsed_ms = duration_to_millis(started.elapsed());
    match outcome {
        Ok(a) => tracing::info!(
            target: "pressure::llm",
            request_id,
            use_case,
            degradation = a.degradation.as_str(),
            level = a.level,
            model = a.model.as_deref().unwrap_or("-"),
            attempts = a.attempts,
            status = a.http_status(),
            elapsed_ms,
            "llm answer"
        ),
        Err(e) => tracing::warn!(
            target: "pressure::llm",
            request_id,
            use_case,
            degradation = "none",
            error = e.label(),
            status = e.openai_error().0,
            elapsed_ms,
            "llm request failed: {e}"
        ),
    }
}

fn invalid(message: String, param: Option<&str>, code: &'static str) -> Rejection {
    Rejection::InvalidRequest {
        message,
        param: param.map(str::to_owned),
        code,
    }
}

/// The chat request in `req`'s body, or the 400/413 to answer.
async fn read_request(req: Request<Body>) -> Result<ChatRequest, Rejection> {
    // The body-limit layer bounds the body (413 on a declared length above
    // the limit, a cut stream otherwise): both answer the same 413.
    let max = crate::layers::routed(&req).map_or(u64::MAX, |r| r.plan.max_body_bytes());
    let bytes = match axum::body::to_bytes(req.into_body(), usize::MAX).await {
        Ok(b) => b,
        Err(e) if is_too_large(&e) => return Err(Rejection::PayloadTooLarge { max }),
        Err(e) => {
            return Err(invalid(
                format!("could not read the request body: {e}"),
                None,
                "invalid_body",
            ))
        }
    };
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
        invalid(
            format!("the request body is not valid JSON: {e}"),
            None,
            "invalid_json",
        )
    })?;
    let Some(object) = value.as_object() else {
        return Err(invalid(
            "the request body must be a JSON object".into(),
            None,
            "invalid_json",
        ));
    };
    for field in ["model", "messages"] {
        if object.get(field).is_none_or(Value::is_null) {
            return Err(invalid(
                format!("missing required parameter: '{field}'"),
                Some(field),
                "missing_required_parameter",
            ));
        }
    }
    if let Err(e) = super::validate::chat_request(object) {
        return Err(Rejection::InvalidRequest {
            message: e.message,
            param: Some(e.param),
            code: e.code,
        });
    }
    serde_json::from_value(value).map_err(|e| invalid(format!("invalid request: {e}"), None, "invalid_value"))
}

async fn handle(
    llm: &LlmClient<AnyBackend>,
    req: Request<Body>,
    request_id: &str,
    started: tokio::time::Instant,
) -> Reply {
    let chat = read_request(req).await?;
    let use_case = chat.model.clone();
    if chat.stream == Some(true) {
        return match llm.stream_as(&use_case, chat, request_id.to_owned()).await {
            Ok(stream) => {
                tracing::info!(
                    target: "pressure::llm",
                    request_id,
                    use_case,
                    degradation = stream.degradation().as_str(),
                    status = stream.http_status(),
                    elapsed_ms = duration_to_millis(started.elapsed()),
                    "llm stream started"
                );
                Ok(sse_response(stream))
            }
            Err(e) => {
                log_event(request_id, &use_case, started, Err(&e));
                Err(Rejection::Llm(e))
            }
        };
    }
    let result = llm.complete_as(&use_case, chat, request_id.to_owned()).await;
    log_event(request_id, &use_case, started, result.as_ref());
    match result {
        Ok(answer) => answer_response(&answer),
        Err(e) => Err(Rejection::Llm(e)),
    }
}

/// The response of an answer: the completion (200), or for a queued
/// request (202) a chat completion that says so ([`queued_response`]), with
/// the `pressure` field (plus `pressure.ticket` when queued) and the
/// degradation header (plus `x-pressure-ticket`).
pub fn answer_response(answer: &Answer) -> Reply {
    let mut pressure = json!({
        "degradation": answer.degradation.as_str(),
        "level": answer.level,
        "attempts": answer.attempts,
    });
    let queued;
    let resp = match &answer.reply {
        LlmReply::Completion(resp) => resp,
        LlmReply::Queued { ticket } => {
            pressure["ticket"] = Value::from(ticket.as_str());
            queued = queued_response(QUEUED_MODEL, ticket);
            &queued
        }
    };
    let body = match serde_json::to_value(resp) {
        Ok(Value::Object(mut map)) => {
            map.insert("pressure".into(), pressure);
            Value::Object(map)
        }
        _ => return Err(Rejection::Internal("the completion could not be encoded".into())),
    };
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = StatusCode::from_u16(answer.http_status()).unwrap_or(StatusCode::OK);
    let h = resp.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        DEGRADATION_HEADER,
        HeaderValue::from_static(answer.degradation.as_str()),
    );
    if let Some(v) = answer.ticket().and_then(|t| HeaderValue::from_str(t).ok()) {
        h.insert(TICKET_HEADER, v);
    }
    Ok(resp)
}
