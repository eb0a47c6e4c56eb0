//! `POST /v1/messages/count_tokens`: `{"input_tokens": N}` for a Messages
//! request — counted by the use case's first model's provider when it is
//! an Anthropic one (its own `count_tokens`, which is free), else (or when
//! that call fails) by the gateway's tokenizer; no reservation, no charge.
//! Its refusals speak Anthropic's dialect.

use super::dialect::{Dialect, Messages};
use super::invalid_at;
use crate::backend::AnyBackend;
use crate::layers::Outcome;
use crate::openai::respond;
use crate::rejection::Rejection;
use axum::body::Body;
use http::{HeaderValue, Request, Response};
use pressure_llm::pipeline::{LlmClient, LlmError};
use serde_json::{json, Value};

/// Answers one call ([`respond`]; its refusals rendered by the route
/// layer in Anthropic's dialect).
pub(crate) async fn count_tokens(llm: &LlmClient<AnyBackend>, req: Request<Body>) -> Outcome {
    respond(llm, req, |req, event| count(llm, req, event)).await
}

async fn count(llm: &LlmClient<AnyBackend>, req: Request<Body>, event: crate::openai::Event) -> Outcome {
    let headers = Messages::passed_headers(req.headers());
    let mut object = crate::openai::read_object(req).await?;
    // A count has no output: Anthropic takes it without `max_tokens`.
    object.entry("max_tokens").or_insert(Value::from(1));
    let parsed = Messages::parse(object, headers).map_err(invalid_at)?;
    let Some(use_case) = llm.config().resolve_use_case(&parsed.model) else {
        return Err(Rejection::Llm(LlmError::UnknownUseCase(parsed.model)));
    };
    event.allow(llm, use_case)?;
    let n = llm
        .count_tokens(use_case, &parsed.chat)
        .await
        .map_err(Rejection::Llm)?;
    let mut resp = Response::new(Body::from(json!({ "input_tokens": n }).to_string()));
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}
