//! An OpenAI `Response` object as a `chat.completion` (the table is in the
//! [module docs](super)); its usage and finish reason are shared with the
//! stream translation.

use serde_json::{json, Map, Value};

use crate::provider::types::{ChatResponse, Choice, CompletionHeader, Message, MessageContent, Usage};

/// Chat-completions usage from a Responses `usage` object: `input_tokens`
/// → `prompt_tokens` (`input_tokens_details.cached_tokens` →
/// `prompt_tokens_details.cached_tokens`), `output_tokens` →
/// `completion_tokens` (`output_tokens_details.reasoning_tokens` →
/// `completion_tokens_details.reasoning_tokens`), `total_tokens` (else
/// the sum).
pub(crate) fn to_usage(u: &Value) -> Usage {
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    let prompt = n("input_tokens");
    let completion = n("output_tokens");
    let total = u
        .get("total_tokens")
        .and_then(Value::as_u64)
        .unwrap_or_else(|| prompt.saturating_add(completion));
    let mut extra = Map::new();
    if let Some(cached) = u
        .pointer("/input_tokens_details/cached_tokens")
        .and_then(Value::as_u64)
    {
        extra.insert("prompt_tokens_details".into(), json!({"cached_tokens": cached}));
    }
    if let Some(reasoning) = u
        .pointer("/output_tokens_details/reasoning_tokens")
        .and_then(Value::as_u64)
    {
        extra.insert(
            "completion_tokens_details".into(),
            json!({"reasoning_tokens": reasoning}),
        );
    }
    Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: total,
        extra,
    }
}

/// `finish_reason` for a Response: `incomplete` for `max_output_tokens` →
/// `length`, for `content_filter` → `content_filter`; otherwise
/// `tool_calls` when the answer calls tools, else `stop`.
pub(crate) fn finish_reason(response: &Value, has_calls: bool) -> &'static str {
    let status = response.get("status").and_then(Value::as_str);
    let reason = response
        .pointer("/incomplete_details/reason")
        .and_then(Value::as_str);
    match (status, reason) {
        (Some("incomplete"), Some("content_filter")) => "content_filter",
        (Some("incomplete"), _) => "length",
        _ if has_calls => "tool_calls",
        _ => "stop",
    }
}

/// The text of a reasoning item: its summaries, else its full reasoning
/// text (`content` parts of `reasoning_text`, as open-weight servers send),
/// joined by blank lines.
fn reasoning_text(item: &Value) -> String {
    let texts = |key: &str| -> Vec<&str> {
        item.get(key)
            .and_then(Value::as_array)
            .map(|parts| {
                parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default()
    };
    let summary = texts("summary");
    if summary.is_empty() {
        texts("content").join("\n\n")
    } else {
        summary.join("\n\n")
    }
}

/// Why a body is a failure and not a Response, if it is one: an `error`
/// object, or `status: "failed"`.
fn failure(v: &Value) -> Option<String> {
    let error = v.get("error").filter(|e| !e.is_null());
    if error.is_none() && v.get("status").and_then(Value::as_str) != Some("failed") {
        return None;
    }
    let message = error
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .unwrap_or("the response failed");
    Some(match error.and_then(|e| e.get("code")).and_then(Value::as_str) {
        Some(code) => format!("{code}: {message}"),
        None => message.to_owned(),
    })
}

/// The `chat.completion` for a Response body; `Err` when the body is not a
/// Response (an error object, a failed response, not JSON) — the client
/// then classifies it like any error body. `native` is left unset (the
/// caller keeps the body when the request came natively).
pub(crate) fn to_chat_response(body: &[u8]) -> Result<ChatResponse, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if let Some(why) = failure(&v) {
        return Err(why);
    }
    let output = v
        .get("output")
        .and_then(Value::as_array)
        .ok_or("the body is not a Response (no `output` array)")?;
    let mut text = String::new();
    let mut has_text = false;
    let mut refusal = String::new();
    let mut reasoning: Vec<String> = Vec::new();
    let mut calls = Vec::new();
    for item in output {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                let parts = item
                    .get("content")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                for part in parts {
                    match part.get("type").and_then(Value::as_str) {
                        Some("output_text") => {
                            has_text = true;
                            text.push_str(part.get("text").and_then(Value::as_str).unwrap_or(""));
                        }
                        Some("refusal") => {
                            refusal.push_str(part.get("refusal").and_then(Value::as_str).unwrap_or(""));
                        }
                        _ => {}
                    }
                }
            }
            Some("function_call") => {
                let s = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("");
                calls.push(json!({"id": s("call_id"), "type": "function",
                                  "function": {"name": s("name"), "arguments": s("arguments")}}));
            }
            Some("reasoning") => {
                let t = reasoning_text(item);
                if !t.is_empty() {
                    reasoning.push(t);
                }
            }
            _ => {}
        }
    }
    let finish = finish_reason(&v, !calls.is_empty());
    let mut extra = Map::new();
    if !calls.is_empty() {
        extra.insert("tool_calls".into(), Value::Array(calls));
    }
    if !reasoning.is_empty() {
        extra.insert("reasoning_content".into(), json!(reasoning.join("\n\n")));
    }
    if !refusal.is_empty() {
        extra.insert("refusal".into(), json!(refusal));
    }
    let message = Message {
        role: "assistant".into(),
        content: has_text.then_some(MessageContent::Text(text)),
        extra,
    };
    let str_of = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    Ok(ChatResponse {
        header: CompletionHeader {
            id: str_of("id"),
            object: "chat.completion".into(),
            created: v.get("created_at").and_then(Value::as_u64).unwrap_or(0),
            model: str_of("model"),
        },
        choices: vec![Choice {
            index: 0,
            message,
            finish_reason: Some(finish.to_owned()),
            extra: Map::new(),
        }],
        usage: v.get("usage").filter(|u| u.is_object()).map(to_usage),
        extra: Map::new(),
        native: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(v: Value) -> Result<ChatResponse, String> {
        to_chat_response(v.to_string().as_bytes())
    }

    #[test]
    fn text_answer_with_reasoning_and_cached_tokens() {
        let r = convert(json!({
            "id": "resp_1", "object": "response", "created_at": 1741476777, "status": "completed",
            "error": null, "incomplete_details": null, "model": "gpt-5-2025-08-07",
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Greet."}]},
                {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Hello", "annotations": []},
                             {"type": "output_text", "text": " there.", "annotations": []}]}
            ],
            "usage": {"input_tokens": 36, "input_tokens_details": {"cached_tokens": 20}, "output_tokens": 87,
                      "output_tokens_details": {"reasoning_tokens": 64}, "total_tokens": 123}
        }))
        .unwrap();
        let wire = serde_json::to_value(&r).unwrap();
        assert_eq!(
            wire,
            json!({
                "id": "resp_1", "object": "chat.completion", "created": 1741476777, "model": "gpt-5-2025-08-07",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {
                    "role": "assistant", "content": "Hello there.", "reasoning_content": "Greet."}}],
                "usage": {"prompt_tokens": 36, "completion_tokens": 87, "total_tokens": 123,
                          "prompt_tokens_details": {"cached_tokens": 20},
                          "completion_tokens_details": {"reasoning_tokens": 64}}
            })
        );
        assert!(r.native.is_none());
    }

    #[test]
    fn function_calls() {
        let r = convert(json!({
            "id": "resp_2", "object": "response", "status": "completed", "model": "m",
            "output": [
                {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "read",
                 "arguments": "{\"p\":1}", "status": "completed"},
                {"type": "function_call", "id": "fc_2", "call_id": "call_b", "name": "list",
                 "arguments": "{}", "status": "completed"},
                {"type": "web_search_call", "id": "ws_1", "status": "completed"}
            ],
            "usage": {"input_tokens": 5, "output_tokens": 9}
        }))
        .unwrap();
        let c = &r.choices[0];
        assert_eq!(c.finish_reason.as_deref(), Some("tool_calls"));
        assert!(c.message.content.is_none());
        assert_eq!(
            c.message.extra["tool_calls"],
            json!([
                {"id": "call_a", "type": "function", "function": {"name": "read", "arguments": "{\"p\":1}"}},
                {"id": "call_b", "type": "function", "function": {"name": "list", "arguments": "{}"}}
            ])
        );
        let u = r.usage.unwrap();
        assert_eq!((u.prompt_tokens, u.completion_tokens, u.total_tokens), (5, 9, 14));
        assert!(u.extra.is_empty());
    }

    #[test]
    fn incomplete_answers() {
        let body = |reason: &str| {
            json!({"id": "r", "object": "response", "status": "incomplete", "model": "m",
                   "incomplete_details": {"reason": reason},
                   "output": [{"type": "message", "role": "assistant",
                               "content": [{"type": "output_text", "text": "Once upon"}]}]})
        };
        let r = convert(body("max_output_tokens")).unwrap();
        assert_eq!(r.choices[0].finish_reason.as_deref(), Some("length"));
        assert_eq!(r.choices[0].message.text(), "Once upon");
        assert!(r.usage.is_none());
        let r = convert(body("content_filter")).unwrap();
        assert_eq!(r.choices[0].finish_reason.as_deref(), Some("content_filter"));
    }

    #[test]
    fn failures_are_errors() {
        let failed = json!({"id": "r", "object": "response", "status": "failed", "output": [],
                            "error": {"code": "server_error", "message": "The model crashed."}});
        assert_eq!(convert(failed).unwrap_err(), "server_error: The model crashed.");
        let error = json!({"error": {"message": "Invalid model", "type": "invalid_request_error",
                                     "param": "model", "code": null}});
        assert_eq!(convert(error).unwrap_err(), "Invalid model");
        assert!(convert(json!({"id": "r", "status": "failed", "error": null})).is_err());
        assert!(convert(json!({"id": "r"})).is_err());
        assert!(to_chat_response(b"not json").is_err());
    }
}
