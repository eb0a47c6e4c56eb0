//! An Anthropic Messages answer as a `chat.completion`.
//!
//! | Messages API | chat completions |
//! |---|---|
//! | `id`, `model` | `id`, `model`; `object: "chat.completion"`, `created: 0` (Anthropic sends no timestamp; 0 like the pipeline's own answers) |
//! | `text` blocks | `message.content`, joined in order (`null` when there is no text) |
//! | the `tool_use` block of [`ANSWER_TOOL`] (a `json_schema` response format) | `message.content`: its `input` as JSON text; `finish_reason` `stop` |
//! | other `tool_use` blocks (`id`, `name`, `input`) | `message.tool_calls` (`{"id","type":"function","function":{"name","arguments"}}`, `arguments` = `input` as JSON text) |
//! | `thinking` blocks | `message.reasoning_content` |
//! | `stop_reason` | `finish_reason` ([`finish_reason`]) |
//! | `usage` | `usage` ([`to_usage`]) |
//!
//! Other blocks (`redacted_thinking`, server tool blocks) are left out.

use serde_json::{json, Map, Value};

use super::ANSWER_TOOL;
use crate::provider::types::{ChatResponse, Choice, CompletionHeader, Message, MessageContent, Usage};

/// `finish_reason` for an Anthropic `stop_reason`: `end_turn`,
/// `stop_sequence` and `pause_turn` → `stop`; `max_tokens` and
/// `model_context_window_exceeded` → `length`; `tool_use` → `tool_calls`;
/// `refusal` → `content_filter`; anything else → `stop`.
pub(crate) fn finish_reason(stop_reason: &str) -> &'static str {
    match stop_reason {
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        _ => "stop",
    }
}

/// Chat-completions usage from an Anthropic `usage` object: prompt tokens =
/// `input_tokens` + `cache_creation_input_tokens` + `cache_read_input_tokens`
/// (what the call read, like OpenAI's `prompt_tokens`, which includes cached
/// tokens; the cache reads are also given as
/// `prompt_tokens_details.cached_tokens` and the cache writes as
/// `cache_creation_input_tokens`, each when not zero, so the pipeline
/// prices every class apart), completion tokens =
/// `output_tokens`, total = both.
pub(crate) fn to_usage(u: &Value) -> Usage {
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    let cache_read = n("cache_read_input_tokens");
    let prompt = n("input_tokens")
        .saturating_add(n("cache_creation_input_tokens"))
        .saturating_add(cache_read);
    let completion = n("output_tokens");
    let mut extra = Map::new();
    if cache_read > 0 {
        extra.insert(
            "prompt_tokens_details".into(),
            json!({"cached_tokens": cache_read}),
        );
    }
    let cache_write = n("cache_creation_input_tokens");
    if cache_write > 0 {
        extra.insert("cache_creation_input_tokens".into(), json!(cache_write));
    }
    Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt.saturating_add(completion),
        extra,
    }
}

/// A tool call in OpenAI's shape.
pub(crate) fn tool_call(id: &str, name: &str, arguments: String) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
}

/// The `chat.completion` for a Messages answer body; `Err` when the body is
/// not a message (an error object, or not JSON) — the client then
/// classifies it like any error body.
pub(crate) fn to_chat_response(body: &[u8]) -> Result<ChatResponse, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if v.get("type").and_then(Value::as_str) != Some("message") {
        return Err("the body is not a Messages answer (`type` is not \"message\")".into());
    }
    let blocks = v
        .get("content")
        .and_then(Value::as_array)
        .ok_or("the message has no `content` array")?;
    let mut text = String::new();
    let mut has_text = false;
    let mut thinking = String::new();
    let mut calls = Vec::new();
    let mut answer = None;
    for b in blocks {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => {
                has_text = true;
                text.push_str(b.get("text").and_then(Value::as_str).unwrap_or(""));
            }
            Some("tool_use") if b.get("name").and_then(Value::as_str) == Some(ANSWER_TOOL) => {
                answer = Some(b.get("input").cloned().unwrap_or_else(|| json!({})).to_string());
            }
            Some("tool_use") => {
                let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                calls.push(tool_call(
                    b.get("id").and_then(Value::as_str).unwrap_or(""),
                    b.get("name").and_then(Value::as_str).unwrap_or(""),
                    input.to_string(),
                ));
            }
            Some("thinking") => thinking.push_str(b.get("thinking").and_then(Value::as_str).unwrap_or("")),
            _ => {}
        }
    }
    let only_answer = calls.is_empty();
    let mut extra = Map::new();
    if !calls.is_empty() {
        extra.insert("tool_calls".into(), Value::Array(calls));
    }
    if !thinking.is_empty() {
        extra.insert("reasoning_content".into(), json!(thinking));
    }
    // A `json_schema` answer: the forced tool's input is the content.
    let content = match answer {
        Some(json_text) => Some(MessageContent::Text(json_text)),
        None => has_text.then_some(MessageContent::Text(text)),
    };
    let message = Message {
        role: "assistant".into(),
        content,
        extra,
    };
    let finish = v.get("stop_reason").and_then(Value::as_str).map(|r| match r {
        "tool_use" if only_answer => "stop".to_owned(),
        _ => finish_reason(r).to_owned(),
    });
    let str_of = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    Ok(ChatResponse {
        header: CompletionHeader {
            id: str_of("id"),
            object: "chat.completion".into(),
            created: 0,
            model: str_of("model"),
        },
        choices: vec![Choice {
            index: 0,
            message,
            finish_reason: finish,
            extra: Map::new(),
        }],
        usage: v.get("usage").map(to_usage),
        extra: Map::new(),
        native: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_answer() {
        let body = json!({
            "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": " there!"}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 3}
        });
        let r = to_chat_response(body.to_string().as_bytes()).unwrap();
        assert_eq!(
            (
                r.header.id.as_str(),
                r.header.object.as_str(),
                r.header.model.as_str()
            ),
            ("msg_01", "chat.completion", "claude-sonnet-4-5")
        );
        assert_eq!(r.choices.len(), 1);
        assert_eq!(r.choices[0].message.role, "assistant");
        assert_eq!(r.choices[0].message.text(), "Hello there!");
        assert_eq!(r.choices[0].finish_reason.as_deref(), Some("stop"));
        let u = r.usage.unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.total_tokens),
            (12, 3, 15)
        );
        assert!(u.extra.is_empty());
    }

    #[test]
    fn tool_use_answer_fixture() {
        let body = include_str!("../../../tests/fixtures/anthropic/response-tool-use.json");
        let r = to_chat_response(body.as_bytes()).unwrap();
        let wire = serde_json::to_value(&r).unwrap();
        assert_eq!(
            wire["choices"][0]["message"]["content"],
            "I'll check both cities."
        );
        assert_eq!(wire["choices"][0]["finish_reason"], "tool_calls");
        let calls = &wire["choices"][0]["message"]["tool_calls"];
        assert_eq!(
            calls,
            &json!([
                {"id": "toolu_01A", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "toolu_01B", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\",\"unit\":\"c\"}"}}
            ])
        );
        // Arguments are JSON text that parses back to the input.
        let args: Value = serde_json::from_str(calls[1]["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args, json!({"city": "Oslo", "unit": "c"}));
        assert_eq!(wire["choices"][0]["message"]["reasoning_content"], "Two lookups.");
        assert_eq!(
            wire["usage"],
            json!({"prompt_tokens": 480, "completion_tokens": 91, "total_tokens": 571,
                   "prompt_tokens_details": {"cached_tokens": 300},
                   "cache_creation_input_tokens": 30})
        );
    }

    #[test]
    fn tool_only_answer_has_null_content() {
        let body = json!({"id": "m", "type": "message", "role": "assistant", "model": "c",
            "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1}});
        let r = to_chat_response(body.to_string().as_bytes()).unwrap();
        let wire = serde_json::to_value(&r).unwrap();
        assert!(wire["choices"][0]["message"]
            .get("content")
            .is_none_or(Value::is_null));
        assert_eq!(
            wire["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            "{}"
        );
    }

    #[test]
    fn stop_reasons() {
        for (anthropic, openai) in [
            ("end_turn", "stop"),
            ("stop_sequence", "stop"),
            ("pause_turn", "stop"),
            ("max_tokens", "length"),
            ("model_context_window_exceeded", "length"),
            ("tool_use", "tool_calls"),
            ("refusal", "content_filter"),
            ("something_new", "stop"),
        ] {
            assert_eq!(finish_reason(anthropic), openai, "{anthropic}");
        }
    }

    #[test]
    fn the_answer_tool_comes_back_as_json_content() {
        let body = json!({
            "id": "msg_03", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": ANSWER_TOOL, "input": {"city": "Paris"}}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 20, "output_tokens": 9}
        });
        let r = to_chat_response(body.to_string().as_bytes()).unwrap();
        let c = &r.choices[0];
        assert_eq!(c.message.text(), r#"{"city":"Paris"}"#);
        assert!(c.message.extra.get("tool_calls").is_none());
        assert_eq!(c.finish_reason.as_deref(), Some("stop"));
    }

    #[test]
    fn not_a_message_is_an_error() {
        let err = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
        assert!(to_chat_response(err.to_string().as_bytes()).is_err());
        assert!(to_chat_response(b"not json").is_err());
        assert!(to_chat_response(br#"{"type":"message"}"#).is_err());
    }
}
