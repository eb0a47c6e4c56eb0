//! Anthropic's Messages API (`POST /v1/messages`, spoken by Claude Code and
//! the anthropic SDKs) in front of the chat-completions engine: the inverse
//! of `provider::anthropic`, which sends chat requests to Anthropic.
//!
//! * [`parse`] — a Messages body, checked as Anthropic checks it (errors
//!   name the field as a dotted path, `messages.0.content.1.type`), to the
//!   chat request the engine runs, with the hints that translation drops and
//!   the first content only the Messages wire carries (`request`: the
//!   top-level fields; `turns`: the `messages`, turn by turn; `fields`:
//!   typed reads with Anthropic's error messages; `translation`: what the
//!   walk over the body carries from field to field);
//! * [`render`] — a chat completion as a Messages answer;
//! * [`StreamEncoder`] — chat chunks as Messages server-sent events;
//! * [`error_body`] — Anthropic's error shape.
//!
//! # Request: Messages → chat
//!
//! | Messages API | chat completions |
//! |---|---|
//! | `model` (non-empty string) | `model` (the gateway swaps in the provider's) |
//! | `max_tokens` (integer ≥ 1, required) | `max_tokens` |
//! | `system`: a string, or `text` blocks | a first `system` message, the texts joined with newlines |
//! | user `text` / `image` blocks | a `user` message: a string when it is only text, else parts `{"type":"text"}` / `{"type":"image_url","image_url":{"url"}}` (`data:<media_type>;base64,<data>` or the URL) |
//! | user `tool_result` (`tool_use_id`, `content`) | a `tool` message (`tool_call_id`, the result's text), before the rest of that user turn; images of the result join the turn's `user` message |
//! | assistant `text` + `tool_use` (`id`, `name`, `input`) | an `assistant` message: the text (`null` when none) and `tool_calls` (`{"id","type":"function","function":{"name","arguments": input as JSON text}}`) |
//! | `stop_sequences` | `stop` |
//! | `temperature` (0–1), `top_p` | the same |
//! | custom `tools` (`name`, `description`, `input_schema`, `strict`) | `tools: [{"type":"function","function":{"name","description","parameters","strict"}}]` |
//! | `tool_choice` `auto` / `any` / `tool` / `none` | `"auto"` / `"required"` / `{"type":"function","function":{"name"}}` / `"none"`; `disable_parallel_tool_use: true` → `parallel_tool_calls: false` (both left out when no custom tool is left) |
//! | `stream` | `stream`, and `stream_options: {"include_usage": true}` when streaming |
//! | the body and the given headers | `native` ([`NativeWire::Messages`](crate::provider::NativeWire)) |
//!
//! **Dropped** (the request still runs on the chat wire; each is named in
//! [`Parsed::dropped`](super::Parsed), in the order the walk meets it — the
//! body's fields in the map's key order, a field's nested paths at that
//! field, `tool_choice` last as it is read once the tools are known — and
//! never twice):
//!
//! * top-level fields by name: `thinking` (enabled or adaptive; `disabled`
//!   is the default and loses nothing), `metadata` (when not empty),
//!   `top_k`, `service_tier`, `container`, `context_management`, and any
//!   field this module does not know (by its name: newer API fields reach a
//!   native provider unchanged);
//! * `cache_control`, once, by that name, wherever it appears (system
//!   blocks, content blocks, tools): Claude Code marks several blocks per
//!   request and their paths move every turn, so the paths would only make
//!   the list long; the loss is the same — the chat wire has no cache hints;
//! * by path: `thinking` / `redacted_thinking` blocks of the history
//!   (`messages.3.content.0`), server tool definitions (`tools.3`, a
//!   `web_search_*`, `bash_*`, `text_editor_*`, ... tool: the model just
//!   cannot call it), a custom tool's unknown fields (`tools.2.defer_loading`),
//!   a text block's `citations`, a `tool_result`'s `is_error: true`, a
//!   message's unknown fields, and `tool_choice` when it forces a tool the
//!   chat request no longer has.
//!
//! **Native only** ([`Parsed::native_only`](super::Parsed), the first met):
//! `document` blocks (in a turn or a tool result), images whose source is a
//! `file` id or that sit in an assistant turn, `search_result` blocks,
//! server-side tool blocks of the history (`server_tool_use`,
//! `web_search_tool_result`, `web_fetch_tool_result`, the
//! `*code_execution_tool_result` kinds, `tool_search_tool_result`,
//! `mcp_tool_use`, `mcp_tool_result`, `container_upload`), and a non-empty
//! top-level `mcp_servers`. The chat request is still built, without them.
//!
//! # Answer: chat → Messages
//! See [`render`] and [`StreamEncoder`]: `reasoning_content` becomes a
//! `thinking` block (with an empty `signature`: the chat wire has none),
//! text a `text` block, each tool call a `tool_use` block; `finish_reason`
//! `stop` → `end_turn` (`stop_sequence` when the choice names the matched
//! sequence in a string `stop_reason`, as vLLM does; `tool_use` when tool
//! calls came), `length` → `max_tokens`, `tool_calls` → `tool_use`,
//! `content_filter` → `refusal`; usage as the inverse of the anthropic
//! provider's `to_usage`.

mod answer;
mod fields;
mod request;
mod stream;
mod translation;
mod turns;

use serde_json::{json, Map, Value};

pub use answer::render;
pub use request::parse;
pub use stream::StreamEncoder;

use crate::provider::Usage;

/// An Anthropic error body, `{"type":"error","error":{"type","message"}}`:
/// what the gateway answers a Messages client that fails (with the status
/// Anthropic gives that type), and the data of a stream's `error` event.
pub fn error_body(error_type: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": error_type, "message": message}})
}

/// The Messages id of a chat completion id: `msg_` + the id, unless it
/// already starts so (an Anthropic provider's answer), or `msg_` + 24
/// random letters and digits when the provider sent none.
fn message_id(id: &str) -> String {
    if id.starts_with("msg_") {
        id.to_owned()
    } else if id.is_empty() {
        use rand::distr::{Alphanumeric, SampleString};
        format!("msg_{}", Alphanumeric.sample_string(&mut rand::rng(), 24))
    } else {
        format!("msg_{id}")
    }
}

/// Anthropic's `stop_reason` (and `stop_sequence`) for a chat
/// `finish_reason`; `tools` says whether the answer called tools, `choice`
/// is the choice's other fields (a string `stop_reason` there is the stop
/// sequence that matched, as vLLM reports it).
fn stop_reason(finish: Option<&str>, tools: bool, choice: &Map<String, Value>) -> (&'static str, Value) {
    match finish {
        Some("length") => ("max_tokens", Value::Null),
        Some("tool_calls" | "function_call") => ("tool_use", Value::Null),
        Some("content_filter") => ("refusal", Value::Null),
        _ if tools => ("tool_use", Value::Null),
        _ => match choice.get("stop_reason").and_then(Value::as_str) {
            Some(seq) if !seq.is_empty() => ("stop_sequence", json!(seq)),
            _ => ("end_turn", Value::Null),
        },
    }
}

/// The four figures of a Messages `usage`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Tokens {
    input: u64,
    output: u64,
    cache_creation: u64,
    cache_read: u64,
}

impl Tokens {
    /// The figures of a chat usage, inverting the anthropic provider's
    /// `to_usage` (which sets prompt tokens to input plus cache creation
    /// plus cache reads, and `prompt_tokens_details.cached_tokens` to the
    /// cache reads): cache reads are the usage's extra
    /// `cache_read_input_tokens` if present, else
    /// `prompt_tokens_details.cached_tokens`; cache creation is the extra
    /// `cache_creation_input_tokens` (0 when absent: the chat wire has no
    /// such figure); input is the prompt tokens less both, never below 0;
    /// output is the completion tokens.
    fn of(u: &Usage) -> Self {
        let extra = |k: &str| u.extra.get(k).and_then(Value::as_u64);
        let cache_read = extra("cache_read_input_tokens")
            .or_else(|| {
                u.extra
                    .get("prompt_tokens_details")
                    .and_then(|d| d.get("cached_tokens"))
                    .and_then(Value::as_u64)
            })
            .unwrap_or(0);
        let cache_creation = extra("cache_creation_input_tokens").unwrap_or(0);
        Self {
            input: u
                .prompt_tokens
                .saturating_sub(cache_read)
                .saturating_sub(cache_creation),
            output: u.completion_tokens,
            cache_creation,
            cache_read,
        }
    }

    /// `{"input_tokens","output_tokens","cache_creation_input_tokens","cache_read_input_tokens"}`.
    fn to_json(self) -> Value {
        json!({
            "input_tokens": self.input,
            "output_tokens": self.output,
            "cache_creation_input_tokens": self.cache_creation,
            "cache_read_input_tokens": self.cache_read,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_body_is_anthropics_shape() {
        assert_eq!(
            error_body("overloaded_error", "Overloaded"),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
        );
    }

    #[test]
    fn message_ids() {
        assert_eq!(message_id("chatcmpl-1"), "msg_chatcmpl-1");
        assert_eq!(message_id("msg_01"), "msg_01");
        let fresh = message_id("");
        assert_eq!(fresh.len(), 28);
        assert!(fresh.starts_with("msg_"));
        assert_ne!(fresh, message_id(""));
    }

    #[test]
    fn usage_inverts_the_providers_to_usage() {
        // to_usage of {"input_tokens":100,"cache_read_input_tokens":300,"output_tokens":9}.
        let u: Usage = serde_json::from_value(json!({
            "prompt_tokens": 400, "completion_tokens": 9, "total_tokens": 409,
            "prompt_tokens_details": {"cached_tokens": 300}
        }))
        .unwrap_or_default();
        assert_eq!(
            Tokens::of(&u),
            Tokens {
                input: 100,
                output: 9,
                cache_creation: 0,
                cache_read: 300
            }
        );
        let u: Usage = serde_json::from_value(json!({
            "prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11,
            "cache_creation_input_tokens": 20, "cache_read_input_tokens": 5
        }))
        .unwrap_or_default();
        let t = Tokens::of(&u);
        assert_eq!((t.input, t.cache_creation, t.cache_read), (0, 20, 5), "saturates");
    }
}
