//! The agents' endpoints (docs/architecture.md#agents-at-the-door-messages-and-responses): `POST /v1/messages` and
//! `POST /v1/messages/count_tokens` (Anthropic's Messages API: Claude Code,
//! the anthropic SDK) and `POST /v1/responses` (OpenAI's Responses API:
//! Codex CLI, the openai SDK's `responses`), answered through the same LLM
//! pipeline as `POST /v1/chat/completions` — tenant, budgets, limiter,
//! retries with their money budget, breakers, fallback chain, manual queue.
//!
//! * The body is checked as its vendor checks it and translated to a chat
//!   request ([`pressure_llm::ingress`]); its `model` (a provider model id
//!   such as `claude-sonnet-4-5-20250929`) names a use case through
//!   `useCases.<name>.aliases`; an unknown one is the dialect's 404.
//! * A level whose provider speaks the agent's own wire gets the agent's
//!   body as it came and its answer goes back as it came (events included).
//!   Any other level gets the chat translation, and its answer is rendered
//!   in the agent's dialect; the hints that translation left out are named
//!   in `x-pressure-dropped` (and the log).
//! * Refusals speak the dialect: Anthropic's error shape (529 for an
//!   overload), or OpenAI's with `insufficient_quota` for a spent budget on
//!   `/v1/responses`; a failure after a stream started is the dialect's
//!   error event ([`stream`]).
//!
//! [`dialect`] holds what differs between the two APIs; [`answer`] the
//! whole answer, [`stream`] the streamed one, [`count`] `count_tokens`.

mod answer;
mod count;
mod dialect;
mod stream;

pub(crate) use count::count_tokens;
pub(crate) use dialect::{Messages, Responses};

use crate::backend::AnyBackend;
use crate::layers::Outcome;
use crate::openai::{respond, Event};
use crate::rejection::Rejection;
use axum::body::Body;
use dialect::Dialect;
use http::{HeaderValue, Request};
use pressure_llm::ingress::IngressError;
use pressure_llm::pipeline::{LlmClient, LlmError};

/// The header naming what the chat translation left out of the request
/// (when a level of another wire answered): comma-separated JSON paths.
pub(crate) const DROPPED_HEADER: &str = "x-pressure-dropped";

/// The most names `x-pressure-dropped` lists (the rest are counted), and
/// the most bytes of each: a body of a thousand unknown fields makes a
/// header of bounded size.
const DROPPED_NAMES: usize = 32;
const DROPPED_NAME_BYTES: usize = 64;

/// Answers one call of `D`'s endpoint; a refusal goes back to the route
/// layer, which renders it in `D`'s dialect (the route's).
pub(crate) async fn serve<D: Dialect>(llm: &LlmClient<AnyBackend>, req: Request<Body>) -> Outcome {
    respond(llm, req, |req, event| handle::<D>(llm, req, event)).await
}

/// `400` naming the field, as the dialect's SDKs show it.
fn invalid_at(e: IngressError) -> Rejection {
    Rejection::InvalidRequest {
        message: e.message,
        param: Some(e.param),
        code: "invalid_request_error",
    }
}

async fn handle<D: Dialect>(llm: &LlmClient<AnyBackend>, req: Request<Body>, event: Event) -> Outcome {
    let Event {
        request_id,
        caller,
        scope,
        ..
    } = event;
    let headers = D::passed_headers(req.headers());
    let object = crate::openai::read_object(req).await?;
    let parsed = D::parse(object, headers).map_err(invalid_at)?;
    let Some(use_case) = llm.config().resolve_use_case(&parsed.model).map(str::to_owned) else {
        return Err(Rejection::Llm(LlmError::UnknownUseCase(parsed.model)));
    };
    crate::openai::allow(scope.as_ref(), llm, &use_case)?;
    let native = parsed.chat.native.clone();
    let model = parsed.model.clone();
    let dropped = parsed.dropped;
    if parsed.stream {
        return match llm.stream_as(&use_case, parsed.chat, caller).await {
            Ok(s) => {
                tracing::info!(
                    target: "pressure::llm",
                    request_id = request_id.as_str(),
                    use_case,
                    dialect = D::NAME,
                    degradation = s.degradation().as_str(),
                    "llm stream started"
                );
                Ok(stream::respond::<D>(s, &model, native, &dropped, &request_id).await)
            }
            Err(e) => {
                log_failure::<D>(&request_id, &use_case, &e);
                Err(Rejection::Llm(e))
            }
        };
    }
    let result = llm.complete_as(&use_case, parsed.chat, caller).await;
    match result {
        Ok(a) => {
            tracing::info!(
                target: "pressure::llm",
                request_id = request_id.as_str(),
                use_case,
                dialect = D::NAME,
                degradation = a.degradation.as_str(),
                level = a.level,
                model = a.model.as_deref().unwrap_or("-"),
                attempts = a.attempts,
                "llm answer"
            );
            answer::respond::<D>(&a, &model, native.as_deref(), &dropped, &request_id)
        }
        Err(e) => {
            log_failure::<D>(&request_id, &use_case, &e);
            Err(Rejection::Llm(e))
        }
    }
}

fn log_failure<D: Dialect>(request_id: &str, use_case: &str, e: &LlmError) {
    tracing::warn!(
        target: "pressure::llm",
        request_id,
        use_case,
        dialect = D::NAME,
        error = e.label(),
        status = e.describe().status,
        "llm request failed: {e}"
    );
}

/// `x-pressure-dropped` for `dropped` (logged in full, bounded, once per
/// event): at most [`DROPPED_NAMES`] names of at most
/// [`DROPPED_NAME_BYTES`] visible ASCII bytes, then `+N` for the rest.
fn dropped_header(dropped: &[String], request_id: &str) -> Option<HeaderValue> {
    if dropped.is_empty() {
        return None;
    }
    tracing::info!(
        target: "pressure::llm",
        request_id,
        dropped = dropped.len(),
        names = %dropped.iter().take(DROPPED_NAMES).map(String::as_str).collect::<Vec<_>>().join(","),
        "hints the other wire cannot carry were dropped"
    );
    let mut text = String::new();
    for name in dropped.iter().take(DROPPED_NAMES) {
        if !text.is_empty() {
            text.push(',');
        }
        text.extend(name.chars().take(DROPPED_NAME_BYTES).map(|c| {
            if c.is_ascii_graphic() && c != ',' {
                c
            } else {
                '?'
            }
        }));
    }
    if let Some(rest) = dropped.len().checked_sub(DROPPED_NAMES).filter(|n| *n > 0) {
        text.push_str(&format!(",+{rest}"));
    }
    HeaderValue::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dropped_header_is_bounded_and_plain_ascii() {
        assert_eq!(dropped_header(&[], "r"), None);
        let two = ["thinking".to_owned(), "system.0.cache_control".to_owned()];
        assert_eq!(
            dropped_header(&two, "r").expect("a header"),
            "thinking,system.0.cache_control"
        );
        let hostile: Vec<String> = (0..1_000)
            .map(|i| format!("é,{}{i}", "x".repeat(10_000)))
            .collect();
        let h = dropped_header(&hostile, "r").expect("a header");
        let text = h.to_str().expect("ascii");
        assert!(
            text.len() <= DROPPED_NAMES * (DROPPED_NAME_BYTES + 1) + 8,
            "{}",
            text.len()
        );
        assert!(text.ends_with(",+968"), "{}", &text[text.len() - 10..]);
        assert!(text.starts_with("??xxx"));
    }
}
