//! [`render`]: a chat completion as a Messages answer.

use serde_json::{json, Map, Value};

use super::{message_id, stop_reason, Tokens};
use crate::provider::{ChatResponse, MessageContent};

/// The Messages answer (`{"type":"message", ...}`) for a chat completion,
/// named `model` (the model the client asked for):
///
/// * `id`: the completion's id prefixed `msg_` (unless it is already);
/// * `content`: a `thinking` block for `reasoning_content` (`signature`
///   empty: the chat wire carries none), a `text` block for the text (the
///   message's `refusal` when it has no text; left out when empty and the
///   answer calls tools, or when there is nothing at all), then one
///   `tool_use` block per tool call, `input` = the call's `arguments`
///   parsed. Arguments that are not a JSON object (cut short by
///   `max_tokens`, or not JSON at all) become `{}`: Anthropic's `input` is
///   always an object, a made-up field would be passed to the tool as if the
///   model had meant it, and the `stop_reason` (`max_tokens`) already tells
///   the client the call is incomplete;
/// * `stop_reason` / `stop_sequence` from `finish_reason` (module docs);
/// * `usage` (`Tokens`): zero when the completion has none.
///
/// Only the first choice is rendered (a Messages request asks for one).
pub fn render(resp: &ChatResponse, model: &str) -> Value {
    let choice = resp.choices.first();
    let mut content = Vec::new();
    let mut tools = false;
    if let Some(c) = choice {
        let m = &c.message;
        if let Some(thinking) = reasoning(&m.extra) {
            content.push(json!({"type": "thinking", "thinking": thinking, "signature": ""}));
        }
        let mut text = match &m.content {
            Some(MessageContent::Text(s)) => s.clone(),
            Some(MessageContent::Parts(_)) => m.text(),
            None => String::new(),
        };
        if text.is_empty() {
            if let Some(r) = m.extra.get("refusal").and_then(Value::as_str) {
                text = r.to_owned();
            }
        }
        let calls = m
            .extra
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        tools = !calls.is_empty();
        if !text.is_empty() {
            content.push(json!({"type": "text", "text": text}));
        }
        for (k, call) in calls.iter().enumerate() {
            content.push(tool_use(call, &resp.header.id, k));
        }
    }
    let (reason, sequence) = match choice {
        Some(c) => stop_reason(c.finish_reason.as_deref(), tools, &c.extra),
        None => stop_reason(None, false, &Map::new()),
    };
    let usage = resp.usage.as_ref().map(Tokens::of).unwrap_or_default();
    json!({
        "id": message_id(&resp.header.id),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage.to_json(),
    })
}

/// The reasoning text of a chat message or delta: `reasoning_content`
/// (DeepSeek, vLLM, the anthropic provider), else `reasoning` (OpenRouter,
/// newer vLLM), when it is a non-empty string.
pub(super) fn reasoning(extra: &Map<String, Value>) -> Option<&str> {
    ["reasoning_content", "reasoning"]
        .iter()
        .find_map(|k| extra.get(*k).and_then(Value::as_str))
        .filter(|s| !s.is_empty())
}

/// The id of the `k`-th tool call of completion `completion_id` when the
/// provider gave it none (ids must be unique across the conversation: the
/// client answers each by its id).
pub(super) fn tool_id(id: Option<&str>, completion_id: &str, k: impl std::fmt::Display) -> String {
    match id {
        Some(id) if !id.is_empty() => id.to_owned(),
        _ => format!("toolu_{}_{k}", completion_id.trim_start_matches("msg_")),
    }
}

/// A chat tool call as a `tool_use` block.
fn tool_use(call: &Value, completion_id: &str, k: usize) -> Value {
    let name = call
        .pointer("/function/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let input = match call.pointer("/function/arguments") {
        Some(Value::String(s)) => serde_json::from_str::<Value>(s)
            .ok()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({})),
        Some(v @ Value::Object(_)) => v.clone(),
        _ => json!({}),
    };
    json!({
        "type": "tool_use",
        "id": tool_id(call.get("id").and_then(Value::as_str), completion_id, k),
        "name": name,
        "input": input,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(v: Value) -> ChatResponse {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("fixture: {e}"))
    }

    #[test]
    fn a_text_answer() {
        let r = resp(json!({
            "id": "chatcmpl-9", "object": "chat.completion", "created": 1, "model": "gpt-x",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello!"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
        }));
        assert_eq!(
            render(&r, "claude-sonnet-4-5"),
            json!({
                "id": "msg_chatcmpl-9", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": "Hello!"}],
                "stop_reason": "end_turn", "stop_sequence": null,
                "usage": {"input_tokens": 12, "output_tokens": 3,
                          "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
            })
        );
    }

    #[test]
    fn tool_calls_with_reasoning() {
        let r = resp(json!({
            "id": "c1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "", "reasoning_content": "Look it up.",
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "", "type": "function", "function": {"name": "broken", "arguments": "{\"city\":"}}
                ]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
        }));
        let v = render(&r, "claude-x");
        assert_eq!(
            v["content"],
            json!([
                {"type": "thinking", "thinking": "Look it up.", "signature": ""},
                {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_c1_1", "name": "broken", "input": {}}
            ])
        );
        assert_eq!(v["stop_reason"], "tool_use");
        assert_eq!(v["id"], "msg_c1");
    }

    #[test]
    fn stop_reasons() {
        let with = |finish: Value, extra: Value| {
            let mut choice = json!({"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": finish});
            if let (Some(c), Some(e)) = (choice.as_object_mut(), extra.as_object()) {
                c.extend(e.clone());
            }
            let r = resp(json!({"id": "c", "choices": [choice]}));
            let v = render(&r, "m");
            (v["stop_reason"].clone(), v["stop_sequence"].clone())
        };
        assert_eq!(
            with(json!("length"), json!({})),
            (json!("max_tokens"), Value::Null)
        );
        assert_eq!(
            with(json!("content_filter"), json!({})),
            (json!("refusal"), Value::Null)
        );
        assert_eq!(with(json!("stop"), json!({})), (json!("end_turn"), Value::Null));
        assert_eq!(with(Value::Null, json!({})), (json!("end_turn"), Value::Null));
        assert_eq!(
            with(json!("stop"), json!({"stop_reason": "\n\nHuman:"})),
            (json!("stop_sequence"), json!("\n\nHuman:"))
        );
        // vLLM's token id for an end-of-sequence token is not a sequence.
        assert_eq!(
            with(json!("stop"), json!({"stop_reason": 2})),
            (json!("end_turn"), Value::Null)
        );
    }

    #[test]
    fn a_cut_answer_with_cache_usage() {
        let r = resp(json!({
            "id": "msg_01", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Once upon"},
                                         "finish_reason": "length"}],
            "usage": {"prompt_tokens": 1500, "completion_tokens": 4, "total_tokens": 1504,
                      "prompt_tokens_details": {"cached_tokens": 1200}, "cache_creation_input_tokens": 200}
        }));
        let v = render(&r, "claude-x");
        assert_eq!(v["id"], "msg_01");
        assert_eq!(v["stop_reason"], "max_tokens");
        assert_eq!(
            v["usage"],
            json!({"input_tokens": 100, "output_tokens": 4,
                   "cache_creation_input_tokens": 200, "cache_read_input_tokens": 1200})
        );
    }

    #[test]
    fn a_refusal_and_an_empty_answer() {
        let r = resp(
            json!({"id": "c", "choices": [{"index": 0, "finish_reason": "content_filter",
            "message": {"role": "assistant", "content": null, "refusal": "I can't help with that."}}]}),
        );
        let v = render(&r, "m");
        assert_eq!(
            v["content"],
            json!([{"type": "text", "text": "I can't help with that."}])
        );
        assert_eq!(v["stop_reason"], "refusal");
        let r = resp(json!({"id": "c", "choices": []}));
        let v = render(&r, "m");
        assert_eq!(v["content"], json!([]));
        assert_eq!(v["stop_reason"], "end_turn");
        assert_eq!(v["usage"]["output_tokens"], 0);
    }
}
