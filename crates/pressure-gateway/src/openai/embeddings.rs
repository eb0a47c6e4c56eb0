//! `POST /v1/embeddings`: read and check the body, run the pipeline
//! ([`LlmClient::embed_as`]), answer in OpenAI's shape; one JSON log line
//! per event (target `pressure::llm`).
//!
//! * Checked before any provider call, each a `400` naming OpenAI's
//!   `param`: a missing `model` or `input`; an `input` that is not one of
//!   OpenAI's four forms (a string, an array of strings, an array of token
//!   ids, an array of arrays of token ids), empty, or longer than 2048
//!   items; an `encoding_format` other than `float`/`base64`; `dimensions`
//!   that is not an integer ≥ 1; a `user` that is not a string. A use case
//!   whose chain holds chat models is a `400` (`param: "model"`), an unknown
//!   one a `404`.
//! * The answer: `200` with the provider's `{"object": "list", "data":
//!   [{"object": "embedding", "index", "embedding"}], "model", "usage"}`
//!   (a base64 `embedding` passed through unchanged) plus the top-level
//!   `"pressure": {"degradation", "level", "attempts"}` and the header
//!   `x-pressure-degradation: primary|backup`.
//! * A refusal after the limiter, the breaker or the provider said when to
//!   come back carries `Retry-After` (e.g. `429` when the input tokens per
//!   minute are spent).

use super::body::{invalid, read_object, require};
use super::handler::{respond, Event};
use super::json_answer;
use crate::backend::AnyBackend;
use crate::layers::Outcome;
use crate::rejection::Rejection;
use axum::body::Body;
use http::Request;
use pressure_core::clock::duration_to_millis;
use pressure_llm::pipeline::{EmbeddingAnswer, EmbeddingError, LlmClient};
use pressure_llm::provider::EmbeddingRequest;
use serde_json::{json, Map, Value};

/// Handles one call of the endpoint ([`respond`]).
pub(crate) async fn embeddings(llm: &LlmClient<AnyBackend>, req: Request<Body>) -> Outcome {
    respond(llm, req, |req, event| handle(llm, req, event)).await
}

async fn handle(llm: &LlmClient<AnyBackend>, req: Request<Body>, event: Event) -> Outcome {
    let request_id = event.request_id.as_str();
    let request = parse(read_object(req).await?)?;
    let use_case = request.model.clone();
    event.allow(llm, &use_case)?;
    let result = llm.embed_as(&use_case, request, event.caller).await;
    let elapsed_ms = duration_to_millis(event.started.elapsed());
    match result {
        Ok(answer) => {
            tracing::info!(
                target: "pressure::llm",
                request_id,
                use_case,
                endpoint = "embeddings",
                degradation = answer.degradation.as_str(),
                level = answer.level,
                model = answer.model.as_str(),
                attempts = answer.attempts,
                status = 200,
                elapsed_ms,
                "llm answer"
            );
            answer_response(&answer)
        }
        Err(EmbeddingError { error, retry_after }) => {
            tracing::warn!(
                target: "pressure::llm",
                request_id,
                use_case,
                endpoint = "embeddings",
                degradation = "none",
                error = error.label(),
                status = error.describe().status,
                elapsed_ms,
                "llm request failed: {error}"
            );
            // The 429/503 says when to ask again (Rejection::Llm).
            Err(Rejection::Llm(error.with_retry_after(retry_after)))
        }
    }
}

/// The answer with the `pressure` field and the degradation header.
fn answer_response(answer: &EmbeddingAnswer) -> Outcome {
    let Ok(Value::Object(mut body)) = serde_json::to_value(&answer.response) else {
        return Err(Rejection::Internal("the embeddings could not be encoded".into()));
    };
    body.insert(
        "pressure".into(),
        json!({
            "degradation": answer.degradation.as_str(),
            "level": answer.level,
            "attempts": answer.attempts,
        }),
    );
    Ok(json_answer(
        Value::Object(body).to_string(),
        answer.degradation.as_str(),
        Some(&answer.model),
    ))
}

/// Whether `v` is a token id (an integer that fits `u32`).
fn is_token(v: &Value) -> bool {
    v.as_u64().is_some_and(|n| u32::try_from(n).is_ok())
}

/// Whether `input` has one of OpenAI's four forms (emptiness is checked later).
fn input_form_ok(input: &Value) -> bool {
    match input {
        Value::String(_) => true,
        Value::Array(items) => {
            items.iter().all(Value::is_string)
                || items.iter().all(is_token)
                || items
                    .iter()
                    .all(|i| i.as_array().is_some_and(|ids| ids.iter().all(is_token)))
        }
        _ => false,
    }
}

/// The request of a body, or the `400` naming the parameter.
fn parse(body: Map<String, Value>) -> Result<EmbeddingRequest, Rejection> {
    require(&body, ["model", "input"])?;
    let wrong_type =
        |field: &str, what: &str| invalid(format!("'{field}' must be {what}"), Some(field), "invalid_type");
    if !body["model"].is_string() {
        return Err(wrong_type("model", "a string"));
    }
    if !input_form_ok(&body["input"]) {
        return Err(wrong_type(
            "input",
            "a string, an array of strings, an array of token ids or an array of arrays of token ids",
        ));
    }
    for field in ["encoding_format", "user"] {
        if body.get(field).is_some_and(|v| !v.is_null() && !v.is_string()) {
            return Err(wrong_type(field, "a string"));
        }
    }
    if let Some(d) = body.get("dimensions").filter(|v| !v.is_null()) {
        match d.as_i64() {
            Some(n) if n < 1 => {
                return Err(invalid(
                    format!("'dimensions' must be at least 1, not {n}"),
                    Some("dimensions"),
                    "invalid_value",
                ))
            }
            Some(n) if u32::try_from(n).is_ok() => {}
            _ => return Err(wrong_type("dimensions", "an integer of at least 1")),
        }
    }
    let request: EmbeddingRequest = serde_json::from_value(Value::Object(body))
        .map_err(|e| invalid(format!("invalid request: {e}"), None, "invalid_value"))?;
    request
        .validate()
        .map_err(|e| invalid(e.message, Some(e.param), e.code))?;
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(body: Value) -> Option<String> {
        let Value::Object(map) = body else {
            return Some("<not an object>".into());
        };
        match parse(map) {
            Ok(_) => None,
            Err(Rejection::InvalidRequest { param, .. }) => param.or(Some("<none>".into())),
            Err(other) => Some(format!("<{other:?}>")),
        }
    }

    #[test]
    fn every_bad_field_is_named() {
        assert_eq!(param(json!({"model": "e", "input": "hi"})), None);
        assert_eq!(param(json!({"model": "e", "input": [[1, 2], [3]]})), None);
        assert_eq!(param(json!({"input": "hi"})).as_deref(), Some("model"));
        assert_eq!(
            param(json!({"model": 3, "input": "hi"})).as_deref(),
            Some("model")
        );
        assert_eq!(param(json!({"model": "e"})).as_deref(), Some("input"));
        assert_eq!(
            param(json!({"model": "e", "input": null})).as_deref(),
            Some("input")
        );
        assert_eq!(param(json!({"model": "e", "input": 5})).as_deref(), Some("input"));
        assert_eq!(
            param(json!({"model": "e", "input": ["a", 1]})).as_deref(),
            Some("input")
        );
        assert_eq!(
            param(json!({"model": "e", "input": [-1]})).as_deref(),
            Some("input")
        );
        assert_eq!(
            param(json!({"model": "e", "input": []})).as_deref(),
            Some("input")
        );
        assert_eq!(
            param(json!({"model": "e", "input": ""})).as_deref(),
            Some("input")
        );
        for d in [json!(0), json!(-3), json!(1.5), json!("8")] {
            assert_eq!(
                param(json!({"model": "e", "input": "x", "dimensions": d})).as_deref(),
                Some("dimensions"),
                "{d}"
            );
        }
        assert_eq!(
            param(json!({"model": "e", "input": "x", "encoding_format": 1})).as_deref(),
            Some("encoding_format")
        );
        assert_eq!(
            param(json!({"model": "e", "input": "x", "encoding_format": "hex"})).as_deref(),
            Some("encoding_format")
        );
        assert_eq!(
            param(json!({"model": "e", "input": "x", "user": 1})).as_deref(),
            Some("user")
        );
    }
}
