//! `GET /v1/models` and `GET /v1/models/{id}`: the use cases of
//! `gateway.llm`, in OpenAI's shape, answered by the gateway itself.
//!
//! Each use case is one model: `{"id": name, "object": "model", "created":
//! 0, "owned_by": "pressure", "pressure": {"kind": "chat"|"embedding"}}`.
//! `created` is always `0`: a use case has no creation time of its own,
//! and a fixed number is the same on every instance of a fleet and across
//! reloads (the SDKs only need an integer). An unknown id is `404`
//! `{"error": {"type": "invalid_request_error", "param": "model", "code":
//! "model_not_found"}}`. A request whose runtime API key is limited to some
//! use cases sees only those (`403` for another's id).

use crate::auth::runtime_keys::KeyScope;
use crate::backend::AnyBackend;
use crate::layers::Outcome;
use crate::rejection::Rejection;
use axum::body::Body;
use http::{HeaderValue, Response};
use pressure_llm::pipeline::{LlmClient, LlmError};
use serde_json::{json, Value};

/// Who owns every listed model.
pub(super) const OWNED_BY: &str = "pressure";

/// One use case as an OpenAI model object.
fn model_object(llm: &LlmClient<AnyBackend>, id: &str) -> Option<Value> {
    let kind = llm.config().use_case_kind(id)?;
    Some(json!({
        "id": id,
        "object": "model",
        "created": 0,
        "owned_by": OWNED_BY,
        "pressure": { "kind": kind.as_str() },
    }))
}

fn json_response(body: &Value) -> Response<Body> {
    let mut resp = Response::new(Body::from(body.to_string()));
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// `GET /v1/models`: every use case, sorted by name (those the request's
/// API key may call, when its list is limited: `scope`).
pub(crate) fn list(llm: &LlmClient<AnyBackend>, scope: Option<&KeyScope>) -> Outcome {
    let data: Vec<Value> = llm
        .config()
        .use_cases
        .keys()
        .filter(|id| scope.is_none_or(|s| s.allows(id)))
        .filter_map(|id| model_object(llm, id))
        .collect();
    Ok(json_response(&json!({ "object": "list", "data": data })))
}

/// `GET /v1/models/{id}`: one use case, or `404 model_not_found` (`403`
/// for one the request's API key may not call: `scope`).
pub(crate) fn retrieve(llm: &LlmClient<AnyBackend>, path: &str, scope: Option<&KeyScope>) -> Outcome {
    let id = crate::plan::model_id(path).unwrap_or_default();
    super::allow(scope, llm, id)?;
    match model_object(llm, id) {
        Some(model) => Ok(json_response(&model)),
        None => Err(Rejection::Llm(LlmError::UnknownUseCase(id.to_owned()))),
    }
}
