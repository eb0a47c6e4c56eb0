//! Anthropic's wire format, from the Messages API reference: `POST
//! /v1/messages` (the request, the `message` object, the events of a
//! stream) and the error body.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::json_bytes;

/// A Messages request. Every field is optional here so that a missing one
/// is refused with Anthropic's own wording (`model: Field required`);
/// fields the mock does not read (`temperature`, `metadata`, `thinking`,
/// ...) are ignored; `tools` are kept as JSON (counted as input, and a
/// prompt-cache prefix may end in them).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct MessagesRequest {
    pub(crate) model: Option<String>,
    /// Signed, so that a negative value is refused by range, as Anthropic does.
    pub(crate) max_tokens: Option<i64>,
    pub(crate) messages: Option<Vec<InputMessage>>,
    /// A string, or an array of text blocks.
    pub(crate) system: Option<Content>,
    pub(crate) stream: Option<bool>,
    pub(crate) tools: Option<Vec<Value>>,
}

/// One turn of `messages`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct InputMessage {
    pub(crate) role: Option<String>,
    pub(crate) content: Option<Content>,
}

/// A content: a string, or an array of blocks.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum Content {
    Text(String),
    Blocks(Vec<Block>),
}

impl Content {
    /// The text: the string, or the blocks' text (`text` blocks, the
    /// content of `tool_result` blocks, the JSON `input` of `tool_use`
    /// blocks) joined with newlines; images, documents and thinking carry
    /// no text here.
    pub(crate) fn text(&self) -> String {
        match self {
            Content::Text(s) => s.clone(),
            Content::Blocks(blocks) => blocks
                .iter()
                .filter_map(|b| match b {
                    Block::Text { text } => Some(text.clone()),
                    Block::ToolResult { content } => content.as_ref().map(Content::text),
                    Block::ToolUse { input } => Some(input.to_string()),
                    Block::Other => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// One content block, by its `type`.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Block {
    Text {
        text: String,
    },
    ToolUse {
        #[serde(default)]
        input: Value,
    },
    ToolResult {
        content: Option<Content>,
    },
    #[serde(other)]
    Other,
}

/// `usage` of a `message` (and of a stream's `message_delta`):
/// `input_tokens` are the input tokens neither written to nor read from
/// the prompt cache.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct MessageUsage {
    pub(crate) input_tokens: u64,
    pub(crate) cache_creation_input_tokens: u64,
    pub(crate) cache_read_input_tokens: u64,
    pub(crate) output_tokens: u64,
}

/// A typed piece of text: a `text` block of an answer, or the
/// `text_delta` of a `content_block_delta` event.
#[derive(Debug, Serialize)]
pub(crate) struct TextBlock<'a> {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) text: &'a str,
}

impl<'a> TextBlock<'a> {
    /// A `text` block.
    pub(crate) fn new(text: &'a str) -> Self {
        Self { kind: "text", text }
    }

    /// A `text_delta`.
    pub(crate) fn delta(text: &'a str) -> Self {
        Self {
            kind: "text_delta",
            text,
        }
    }
}

/// A `message` (the answer, or the head of a stream in `message_start`).
#[derive(Debug, Serialize)]
pub(crate) struct MessageObject<'a> {
    pub(crate) id: &'a str,
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) role: &'static str,
    pub(crate) model: &'a str,
    pub(crate) content: Vec<TextBlock<'a>>,
    pub(crate) stop_reason: Option<&'a str>,
    pub(crate) stop_sequence: Option<&'a str>,
    pub(crate) usage: MessageUsage,
}

/// `delta` of a `message_delta` event.
#[derive(Debug, Serialize)]
pub(crate) struct StopDelta<'a> {
    pub(crate) stop_reason: &'a str,
    pub(crate) stop_sequence: Option<&'a str>,
}

/// One event of a stream; its `type` is also the SSE event name.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum StreamEvent<'a> {
    MessageStart {
        message: MessageObject<'a>,
    },
    ContentBlockStart {
        index: u32,
        content_block: TextBlock<'a>,
    },
    Ping,
    ContentBlockDelta {
        index: u32,
        delta: TextBlock<'a>,
    },
    ContentBlockStop {
        index: u32,
    },
    MessageDelta {
        delta: StopDelta<'a>,
        usage: MessageUsage,
    },
    MessageStop,
    /// A stream failing midway.
    Error {
        error: AnthropicErrorDetail<'a>,
    },
}

impl StreamEvent<'_> {
    fn name(&self) -> &'static str {
        match self {
            Self::MessageStart { .. } => "message_start",
            Self::ContentBlockStart { .. } => "content_block_start",
            Self::Ping => "ping",
            Self::ContentBlockDelta { .. } => "content_block_delta",
            Self::ContentBlockStop { .. } => "content_block_stop",
            Self::MessageDelta { .. } => "message_delta",
            Self::MessageStop => "message_stop",
            Self::Error { .. } => "error",
        }
    }

    /// The event as server-sent event bytes (`event:` and `data:` lines).
    pub(crate) fn sse(&self) -> Bytes {
        let data = json_bytes(self);
        let mut out = format!("event: {}\ndata: ", self.name()).into_bytes();
        out.extend_from_slice(&data);
        out.extend_from_slice(b"\n\n");
        Bytes::from(out)
    }
}

/// Anthropic's error body: `{"type": "error", "error": {"type", "message"}}`.
#[derive(Debug, Serialize)]
pub(crate) struct AnthropicErrorBody<'a> {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) error: AnthropicErrorDetail<'a>,
}

/// The `error` of an [`AnthropicErrorBody`].
#[derive(Debug, Serialize)]
pub(crate) struct AnthropicErrorDetail<'a> {
    #[serde(rename = "type")]
    pub(crate) kind: &'a str,
    pub(crate) message: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_blocks_tool_results_and_unknown_blocks() {
        let r: MessagesRequest = serde_json::from_str(
            r#"{"model":"c","max_tokens":5,"metadata":{"user_id":"u"},
                "system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral"}}],
                "messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64"}},
                  {"type":"text","text":"hi"},{"type":"tool_result","tool_use_id":"t",
                  "content":[{"type":"text","text":"42"}]},{"type":"thinking","thinking":"x"}]},
                  {"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"a":1}}]}]}"#,
        )
        .unwrap();
        assert_eq!(r.system.as_ref().map(Content::text).as_deref(), Some("sys"));
        let turns = r.messages.unwrap();
        assert_eq!(turns[0].content.as_ref().unwrap().text(), "hi\n42");
        assert_eq!(turns[1].content.as_ref().unwrap().text(), r#"{"a":1}"#);
    }

    #[test]
    fn events_carry_their_type_as_the_event_name() {
        let e = StreamEvent::ContentBlockStop { index: 0 }.sse();
        assert_eq!(
            &e[..],
            b"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
        );
        assert_eq!(
            &StreamEvent::Ping.sse()[..],
            b"event: ping\ndata: {\"type\":\"ping\"}\n\n"
        );
    }
}
