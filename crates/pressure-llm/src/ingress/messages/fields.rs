//! Typed reads of a Messages body's fields, failing as Anthropic's
//! validation does: the dotted path of the field, then what it should be.

use serde_json::{Map, Value};

use crate::ingress::IngressError;

/// An error at `param`, its message led by the path as Anthropic's are.
pub(super) fn err(param: &str, what: impl std::fmt::Display) -> IngressError {
    IngressError::new(param, format!("{param}: {what}"))
}

/// `v` absent or `null`: an optional field not given.
pub(super) fn given(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

/// A string field that must be present.
pub(super) fn req_str<'a>(o: &'a Map<String, Value>, key: &str, at: &str) -> Result<&'a str, IngressError> {
    match o.get(key) {
        None | Some(Value::Null) => Err(err(&format!("{at}.{key}"), "Field required")),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(err(&format!("{at}.{key}"), "Input should be a valid string")),
    }
}

/// An object field that must be present.
pub(super) fn req_obj<'a>(
    o: &'a Map<String, Value>,
    key: &str,
    at: &str,
) -> Result<&'a Map<String, Value>, IngressError> {
    match o.get(key) {
        None | Some(Value::Null) => Err(err(&format!("{at}.{key}"), "Field required")),
        Some(Value::Object(m)) => Ok(m),
        Some(_) => Err(err(&format!("{at}.{key}"), "Input should be a valid dictionary")),
    }
}

/// `v` as an object, or the error naming `at`.
pub(super) fn as_obj<'a>(v: &'a Value, at: &str) -> Result<&'a Map<String, Value>, IngressError> {
    v.as_object()
        .ok_or_else(|| err(at, "Input should be a valid dictionary"))
}

/// `v` as an array, or the error naming `at`.
pub(super) fn as_arr<'a>(v: &'a Value, at: &str) -> Result<&'a Vec<Value>, IngressError> {
    v.as_array()
        .ok_or_else(|| err(at, "Input should be a valid list"))
}

/// `v` as a number in 0–1, or the error naming `at`.
pub(super) fn unit_number(v: &Value, at: &str) -> Result<(), IngressError> {
    match v.as_f64() {
        Some(x) if (0.0..=1.0).contains(&x) => Ok(()),
        Some(_) => Err(err(at, "Input should be between 0 and 1")),
        None => Err(err(at, "Input should be a valid number")),
    }
}
