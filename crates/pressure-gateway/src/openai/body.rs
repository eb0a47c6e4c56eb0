//! Reading an OpenAI request body: the bytes within the body limit, then a
//! JSON object; the 400/413 refusals in the shape every endpoint shares.

use crate::http::proxy::is_too_large;
use crate::rejection::Rejection;
use axum::body::Body;
use http::Request;
use serde_json::{Map, Value};

/// A `400` with OpenAI's `param` and `code`.
pub(super) fn invalid(message: impl Into<String>, param: Option<&str>, code: &'static str) -> Rejection {
    Rejection::InvalidRequest {
        message: message.into(),
        param: param.map(str::to_owned),
        code,
    }
}

/// The `400` for the first of `fields` that `object` lacks (or has as
/// `null`), naming it as OpenAI does.
pub(super) fn require(object: &Map<String, Value>, fields: [&str; 2]) -> Result<(), Rejection> {
    match fields
        .into_iter()
        .find(|f| object.get(*f).is_none_or(Value::is_null))
    {
        Some(field) => Err(invalid(
            format!("missing required parameter: '{field}'"),
            Some(field),
            "missing_required_parameter",
        )),
        None => Ok(()),
    }
}

/// The body of `req` as a JSON object, or the 400/413 to answer. The
/// body-limit layer bounds the body (413 on a declared length above the
/// limit, a cut stream otherwise): both answer the same 413.
pub(crate) async fn read_object(req: Request<Body>) -> Result<Map<String, Value>, Rejection> {
    let max = crate::layers::context(&req).map_or(u64::MAX, |r| r.plan.max_body_bytes());
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
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(invalid(
            "the request body must be a JSON object",
            None,
            "invalid_json",
        )),
        Err(e) => Err(invalid(
            format!("the request body is not valid JSON: {e}"),
            None,
            "invalid_json",
        )),
    }
}
