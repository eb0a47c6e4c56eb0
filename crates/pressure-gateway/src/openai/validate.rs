//! The checks OpenAI itself makes on a chat request before any model runs:
//! a request it would refuse is refused here with the same `400` shape
//! (`param` names the field, `code` says what is wrong), so it costs no
//! provider call and no quota.
//!
//! Only fields whose meaning is fixed by OpenAI's API are checked; unknown
//! fields pass through untouched (providers add their own).

use serde_json::{Map, Value};

/// A field OpenAI would refuse: the message, the `param` and the `code`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Invalid {
    /// What is wrong, in OpenAI's words where it has them.
    pub message: String,
    /// The offending field, e.g. `messages[1].role`.
    pub param: String,
    /// OpenAI's code: `invalid_type`, `empty_array`, `integer_below_min_value`, ...
    pub code: &'static str,
}

fn invalid(param: impl Into<String>, code: &'static str, message: String) -> Invalid {
    let param = param.into();
    Invalid {
        message: format!("Invalid '{param}': {message}"),
        param,
        code,
    }
}

/// The JSON type name OpenAI's messages use.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn wrong_type(param: &str, expected: &str, got: &Value) -> Invalid {
    invalid(
        param,
        "invalid_type",
        format!("expected {expected}, but got {} instead.", type_name(got)),
    )
}

/// The roles a message may have.
const ROLES: [&str; 6] = ["system", "developer", "user", "assistant", "tool", "function"];

/// Checks `body` (a JSON object whose `model` and `messages` are present)
/// against OpenAI's rules for `POST /v1/chat/completions`.
pub(super) fn chat_request(body: &Map<String, Value>) -> Result<(), Invalid> {
    if let Some(v) = body.get("model") {
        if !v.is_string() {
            return Err(wrong_type("model", "a string", v));
        }
    }
    messages(body.get("messages").unwrap_or(&Value::Null))?;
    for (field, min) in [("max_tokens", 1), ("max_completion_tokens", 1), ("n", 1)] {
        integer_at_least(body, field, min)?;
    }
    if let Some(v) = present(body, "top_logprobs") {
        match v.as_i64() {
            Some(n) if (0..=20).contains(&n) => {}
            Some(n) => return Err(out_of_range("top_logprobs", n as f64, 0.0, 20.0)),
            None => return Err(wrong_type("top_logprobs", "an integer", v)),
        }
    }
    if let Some(v) = present(body, "seed") {
        if !(v.is_i64() || v.is_u64()) {
            return Err(wrong_type("seed", "an integer", v));
        }
    }
    for (field, min, max) in [
        ("temperature", 0.0, 2.0),
        ("top_p", 0.0, 1.0),
        ("presence_penalty", -2.0, 2.0),
        ("frequency_penalty", -2.0, 2.0),
    ] {
        number_between(body, field, min, max)?;
    }
    for field in ["stream", "logprobs", "parallel_tool_calls", "store"] {
        if let Some(v) = present(body, field) {
            if !v.is_boolean() {
                return Err(wrong_type(field, "a boolean", v));
            }
        }
    }
    for field in ["user", "reasoning_effort", "service_tier"] {
        if let Some(v) = present(body, field) {
            if !v.is_string() {
                return Err(wrong_type(field, "a string", v));
            }
        }
    }
    for field in ["logit_bias", "metadata", "response_format"] {
        if let Some(v) = present(body, field) {
            if !v.is_object() {
                return Err(wrong_type(field, "an object", v));
            }
        }
    }
    stream_options(body)?;
    stop(body)?;
    tools(body)?;
    tool_choice(body)?;
    response_format(body)?;
    Ok(())
}

/// The field's value unless absent or `null` (OpenAI treats `null` as unset).
fn present<'a>(body: &'a Map<String, Value>, field: &str) -> Option<&'a Value> {
    body.get(field).filter(|v| !v.is_null())
}

fn messages(v: &Value) -> Result<(), Invalid> {
    let Some(list) = v.as_array() else {
        return Err(wrong_type("messages", "an array", v));
    };
    if list.is_empty() {
        return Err(invalid(
            "messages",
            "empty_array",
            "empty array. Expected an array with minimum length 1, but got an empty array instead.".into(),
        ));
    }
    for (i, m) in list.iter().enumerate() {
        let at = |field: &str| format!("messages[{i}].{field}");
        let Some(m) = m.as_object() else {
            return Err(wrong_type(&format!("messages[{i}]"), "an object", m));
        };
        let role = m.get("role").unwrap_or(&Value::Null);
        let Some(role) = role.as_str() else {
            return Err(match role {
                Value::Null => invalid(
                    at("role"),
                    "missing_required_parameter",
                    "missing required parameter.".into(),
                ),
                other => wrong_type(&at("role"), "a string", other),
            });
        };
        if !ROLES.contains(&role) {
            return Err(invalid(
                at("role"),
                "invalid_value",
                format!("'{role}' is not one of {ROLES:?}."),
            ));
        }
        match m.get("content") {
            None | Some(Value::Null) => {
                // Only an assistant message may omit its content (tool calls).
                if role != "assistant" {
                    return Err(invalid(
                        at("content"),
                        "missing_required_parameter",
                        "missing required parameter.".into(),
                    ));
                }
            }
            Some(Value::String(_)) => {}
            Some(Value::Array(parts)) => {
                for (j, p) in parts.iter().enumerate() {
                    if !p.get("type").is_some_and(Value::is_string) {
                        return Err(invalid(
                            format!("messages[{i}].content[{j}].type"),
                            "missing_required_parameter",
                            "missing required parameter.".into(),
                        ));
                    }
                }
            }
            Some(other) => return Err(wrong_type(&at("content"), "a string or an array", other)),
        }
        if role == "tool" && !m.get("tool_call_id").is_some_and(Value::is_string) {
            return Err(invalid(
                at("tool_call_id"),
                "missing_required_parameter",
                "missing required parameter.".into(),
            ));
        }
    }
    Ok(())
}

fn integer_at_least(body: &Map<String, Value>, field: &str, min: i64) -> Result<(), Invalid> {
    let Some(v) = present(body, field) else {
        return Ok(());
    };
    match v.as_i64() {
        Some(n) if n >= min => Ok(()),
        Some(n) => Err(invalid(
            field,
            "integer_below_min_value",
            format!("integer below minimum value. Expected a value >= {min}, but got {n} instead."),
        )),
        // Too large for i64 is still an integer above the minimum.
        None if v.is_u64() => Ok(()),
        None => Err(wrong_type(field, "an integer", v)),
    }
}

fn out_of_range(field: &str, got: f64, min: f64, max: f64) -> Invalid {
    if got < min {
        invalid(
            field,
            "decimal_below_min_value",
            format!("decimal below minimum value. Expected a value >= {min}, but got {got} instead."),
        )
    } else {
        invalid(
            field,
            "decimal_above_max_value",
            format!("decimal above maximum value. Expected a value <= {max}, but got {got} instead."),
        )
    }
}

fn number_between(body: &Map<String, Value>, field: &str, min: f64, max: f64) -> Result<(), Invalid> {
    let Some(v) = present(body, field) else {
        return Ok(());
    };
    let Some(n) = v.as_f64() else {
        return Err(wrong_type(field, "a number", v));
    };
    if (min..=max).contains(&n) {
        Ok(())
    } else {
        Err(out_of_range(field, n, min, max))
    }
}

fn stream_options(body: &Map<String, Value>) -> Result<(), Invalid> {
    let Some(v) = present(body, "stream_options") else {
        return Ok(());
    };
    let Some(o) = v.as_object() else {
        return Err(wrong_type("stream_options", "an object", v));
    };
    if let Some(u) = o.get("include_usage").filter(|u| !u.is_null()) {
        if !u.is_boolean() {
            return Err(wrong_type("stream_options.include_usage", "a boolean", u));
        }
    }
    if present(body, "stream") != Some(&Value::Bool(true)) {
        return Err(Invalid {
            message: "The 'stream_options' parameter is only allowed when 'stream' is enabled.".into(),
            param: "stream_options".into(),
            code: "invalid_value",
        });
    }
    Ok(())
}

fn stop(body: &Map<String, Value>) -> Result<(), Invalid> {
    match present(body, "stop") {
        None | Some(Value::String(_)) => Ok(()),
        Some(Value::Array(list)) => {
            if list.len() > 4 {
                return Err(invalid(
                    "stop",
                    "array_above_max_length",
                    format!("array too long. Expected an array with maximum length 4, but got an array with length {} instead.", list.len()),
                ));
            }
            match list.iter().position(|s| !s.is_string()) {
                Some(i) => Err(wrong_type(&format!("stop[{i}]"), "a string", &list[i])),
                None => Ok(()),
            }
        }
        Some(other) => Err(wrong_type("stop", "a string or an array", other)),
    }
}

fn tools(body: &Map<String, Value>) -> Result<(), Invalid> {
    let Some(v) = present(body, "tools") else {
        return Ok(());
    };
    let Some(list) = v.as_array() else {
        return Err(wrong_type("tools", "an array", v));
    };
    for (i, t) in list.iter().enumerate() {
        let Some(t) = t.as_object() else {
            return Err(wrong_type(&format!("tools[{i}]"), "an object", t));
        };
        if !t.get("type").is_some_and(Value::is_string) {
            return Err(invalid(
                format!("tools[{i}].type"),
                "missing_required_parameter",
                "missing required parameter.".into(),
            ));
        }
        if t.get("type").and_then(Value::as_str) == Some("function")
            && !t
                .get("function")
                .and_then(|f| f.get("name"))
                .is_some_and(Value::is_string)
        {
            return Err(invalid(
                format!("tools[{i}].function.name"),
                "missing_required_parameter",
                "missing required parameter.".into(),
            ));
        }
    }
    Ok(())
}

fn tool_choice(body: &Map<String, Value>) -> Result<(), Invalid> {
    match present(body, "tool_choice") {
        None | Some(Value::Object(_)) => Ok(()),
        Some(Value::String(s)) if matches!(s.as_str(), "none" | "auto" | "required") => Ok(()),
        Some(Value::String(s)) => Err(invalid(
            "tool_choice",
            "invalid_value",
            format!("'{s}' is not one of ['none', 'auto', 'required']."),
        )),
        Some(other) => Err(wrong_type("tool_choice", "a string or an object", other)),
    }
}

fn response_format(body: &Map<String, Value>) -> Result<(), Invalid> {
    let Some(f) = present(body, "response_format").and_then(Value::as_object) else {
        return Ok(());
    };
    match f.get("type").and_then(Value::as_str) {
        Some("text" | "json_object") => Ok(()),
        Some("json_schema") if f.get("json_schema").is_some_and(Value::is_object) => Ok(()),
        Some("json_schema") => Err(invalid(
            "response_format.json_schema",
            "missing_required_parameter",
            "missing required parameter.".into(),
        )),
        Some(other) => Err(invalid(
            "response_format.type",
            "invalid_value",
            format!("'{other}' is not one of ['text', 'json_object', 'json_schema']."),
        )),
        None => Err(invalid(
            "response_format.type",
            "missing_required_parameter",
            "missing required parameter.".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(v: Value) -> Result<(), Invalid> {
        chat_request(v.as_object().expect("object"))
    }

    fn base() -> Value {
        json!({"model": "support", "messages": [{"role": "user", "content": "hi"}]})
    }

    fn with(field: &str, value: Value) -> Value {
        let mut v = base();
        v[field] = value;
        v
    }

    #[test]
    fn a_plain_request_passes() {
        assert_eq!(check(base()), Ok(()));
        let full = json!({
            "model": "support", "max_tokens": 5, "temperature": 0.2, "top_p": 1, "n": 1,
            "stop": ["a", "b"], "stream": true, "stream_options": {"include_usage": true},
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
            "tool_choice": "auto", "response_format": {"type": "json_object"}, "seed": 7,
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "assistant", "content": null, "tool_calls": []},
                {"role": "tool", "tool_call_id": "c1", "content": "42"}
            ],
            "temperature_extra_vendor_field": "passes"
        });
        assert_eq!(check(full), Ok(()));
        // null means unset, as OpenAI reads it.
        assert_eq!(check(with("temperature", Value::Null)), Ok(()));
    }

    #[test]
    fn what_openai_refuses_is_refused_with_its_param() {
        let cases = [
            (with("messages", json!([])), "messages", "empty_array"),
            (with("messages", json!("hi")), "messages", "invalid_type"),
            (
                with("messages", json!([{"content": "x"}])),
                "messages[0].role",
                "missing_required_parameter",
            ),
            (
                with("messages", json!([{"role": "robot", "content": "x"}])),
                "messages[0].role",
                "invalid_value",
            ),
            (
                with("messages", json!([{"role": "user"}])),
                "messages[0].content",
                "missing_required_parameter",
            ),
            (
                with("messages", json!([{"role": "user", "content": 3}])),
                "messages[0].content",
                "invalid_type",
            ),
            (
                with("messages", json!([{"role": "tool", "content": "x"}])),
                "messages[0].tool_call_id",
                "missing_required_parameter",
            ),
            (
                with("max_tokens", json!(0)),
                "max_tokens",
                "integer_below_min_value",
            ),
            (with("max_tokens", json!("10")), "max_tokens", "invalid_type"),
            (with("max_tokens", json!(1.5)), "max_tokens", "invalid_type"),
            (
                with("max_completion_tokens", json!(-1)),
                "max_completion_tokens",
                "integer_below_min_value",
            ),
            (with("n", json!(0)), "n", "integer_below_min_value"),
            (with("temperature", json!("hot")), "temperature", "invalid_type"),
            (
                with("temperature", json!(2.5)),
                "temperature",
                "decimal_above_max_value",
            ),
            (with("top_p", json!(-0.1)), "top_p", "decimal_below_min_value"),
            (
                with("presence_penalty", json!(3)),
                "presence_penalty",
                "decimal_above_max_value",
            ),
            (with("stream", json!("yes")), "stream", "invalid_type"),
            (
                with("stream_options", json!({"include_usage": true})),
                "stream_options",
                "invalid_value",
            ),
            (
                with("stop", json!(["a", "b", "c", "d", "e"])),
                "stop",
                "array_above_max_length",
            ),
            (with("stop", json!([1])), "stop[0]", "invalid_type"),
            (with("tools", json!({})), "tools", "invalid_type"),
            (
                with("tools", json!([{"type": "function", "function": {}}])),
                "tools[0].function.name",
                "missing_required_parameter",
            ),
            (
                with("tool_choice", json!("sometimes")),
                "tool_choice",
                "invalid_value",
            ),
            (
                with("response_format", json!({"type": "yaml"})),
                "response_format.type",
                "invalid_value",
            ),
            (with("model", json!(7)), "model", "invalid_type"),
            (
                with("top_logprobs", json!(21)),
                "top_logprobs",
                "decimal_above_max_value",
            ),
        ];
        for (body, param, code) in cases {
            let e = check(body.clone()).expect_err(&format!("refused: {body}"));
            assert_eq!((e.param.as_str(), e.code), (param, code), "{body}: {}", e.message);
            assert!(
                e.message.contains(param) || param == "stream_options",
                "{}",
                e.message
            );
        }
    }
}
