//! The OpenAI chat-completions wire format: requests, responses and stream chunks.
//!
//! Only the fields the client stack reads are typed; everything else (tool
//! calls, `temperature`, `logprobs`, vendor extensions, ...) is kept in an
//! `extra` map (`#[serde(flatten)]`) so it passes through unchanged in both
//! directions.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The field of an internal stream chunk that carries one provider event
/// verbatim (`{"event": <name or null>, "data": <the data line>}`), so an
/// ingress of the provider's own dialect can pass it on unchanged. Only
/// chunks of a request that came with a [`NativeRequest`] carry it; the
/// chunk has no choices and says nothing to the chat path.
pub const NATIVE_FIELD: &str = "pressure_native";

/// The wire of an agent's ingress dialect, when it is also a provider wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NativeWire {
    /// Anthropic's Messages API (`POST /v1/messages`).
    Messages,
    /// OpenAI's Responses API (`POST /v1/responses`).
    Responses,
}

impl NativeWire {
    /// `messages` or `responses`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Messages => "messages",
            Self::Responses => "responses",
        }
    }
}

/// The request as the agent sent it, kept beside its chat translation: a
/// provider of the same wire is sent this body (its `model` and `stream`
/// set by the gateway) and these headers, so unknown fields, thinking
/// signatures and betas reach it unchanged (docs/architecture.md#agents-at-the-door-messages-and-responses "native first").
#[derive(Debug, Clone, PartialEq)]
pub struct NativeRequest {
    /// The dialect the body is in.
    pub wire: NativeWire,
    /// The body as received (a JSON object).
    pub body: Map<String, Value>,
    /// Headers passed to a provider of the same wire (`anthropic-beta`,
    /// `anthropic-version`); never a credential.
    pub headers: Vec<(String, String)>,
    /// The first piece of content only this wire can carry (a document, a
    /// server tool's result), by its JSON path: a chain level of another
    /// wire cannot take the request and is skipped.
    pub native_only: Option<String>,
}

/// A chat completion request (`POST {baseUrl}/chat/completions`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The provider's model name.
    pub model: String,
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// The maximum number of output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Whether the answer is streamed as server-sent events. The client sets
    /// it itself: [`ProviderClient::complete`](super::ProviderClient::complete)
    /// never streams, [`ProviderClient::stream`](super::ProviderClient::stream)
    /// always does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Streaming options; the client always asks streams for `include_usage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Every other field, passed through unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    /// The agent's own request, when it came in a provider's dialect
    /// (never on the wire of the chat translation).
    #[serde(skip)]
    pub native: Option<Arc<NativeRequest>>,
}

impl ChatRequest {
    /// A request for `model` with the given messages and nothing else set.
    pub fn new(model: impl Into<String>, messages: Vec<Message>) -> Self {
        Self {
            model: model.into(),
            messages,
            max_tokens: None,
            stream: None,
            stream_options: None,
            extra: Map::new(),
            native: None,
        }
    }

    /// The output-token cap: `max_tokens`, or else the newer
    /// `max_completion_tokens` if the caller sent that one.
    pub fn max_output_tokens(&self) -> Option<u32> {
        self.max_tokens.or_else(|| {
            self.extra
                .get("max_completion_tokens")
                .and_then(Value::as_u64)
                .and_then(|v| u32::try_from(v).ok())
        })
    }
}

/// `stream_options` of a streaming request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamOptions {
    /// Ask for a final chunk carrying the whole call's `usage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_usage: Option<bool>,
    /// Every other field, passed through unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One message of a conversation (request) or of an answer (response choice).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant`, `tool`, ...
    pub role: String,
    /// The message text. `None` when the wire had `null` or no content (an
    /// assistant message that only calls tools); `Parts` for multi-part
    /// (e.g. image) content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<MessageContent>,
    /// Every other field (`name`, `tool_calls`, `tool_call_id`, ...), passed through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Message {
    /// A message with a role and plain-text content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: Some(MessageContent::Text(content.into())),
            extra: Map::new(),
        }
    }

    /// The text of the message: the plain content, or the `text` parts of a
    /// multi-part content joined with newlines; empty when there is none.
    pub fn text(&self) -> String {
        match &self.content {
            None => String::new(),
            Some(MessageContent::Text(s)) => s.clone(),
            Some(MessageContent::Parts(parts)) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// The `content` of a [`Message`]: a string, or an array of typed parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    /// Plain text, the common case.
    Text(String),
    /// Multi-part content (`[{"type":"text","text":...}, {"type":"image_url",...}]`), kept as JSON.
    Parts(Vec<Value>),
}

/// Token accounting of a call, as reported by the provider.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Output tokens.
    #[serde(default)]
    pub completion_tokens: u64,
    /// Input plus output tokens.
    #[serde(default)]
    pub total_tokens: u64,
    /// Details (`prompt_tokens_details`, ...), passed through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Usage {
    /// The tokens by price class: every prompt token as input, of them the
    /// cache reads (`prompt_tokens_details.cached_tokens`, OpenAI's and the
    /// Anthropic translation's) and the cache writes
    /// (`cache_creation_input_tokens`, kept by the Anthropic translation).
    pub fn token_use(&self) -> crate::price::TokenUse {
        let read = self
            .extra
            .get("prompt_tokens_details")
            .and_then(|d| d.get("cached_tokens"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let write = self
            .extra
            .get("cache_creation_input_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        crate::price::TokenUse {
            input: self.prompt_tokens,
            cache_write: write,
            cache_read: read,
            output: self.completion_tokens,
        }
    }
}

/// The fields a chat completion and each of its stream chunks start
/// with, flattened into both on the wire.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionHeader {
    /// The provider's completion id (the same in every chunk of a stream).
    #[serde(default)]
    pub id: String,
    /// `chat.completion`, or `chat.completion.chunk` for a stream chunk.
    #[serde(default)]
    pub object: String,
    /// Unix seconds of creation.
    #[serde(default)]
    pub created: u64,
    /// The model that answers.
    #[serde(default)]
    pub model: String,
}

/// A non-streamed chat completion (`object: "chat.completion"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// `id`, `object`, `created` and `model`.
    #[serde(flatten)]
    pub header: CompletionHeader,
    /// The answers (one unless the request set `n`).
    pub choices: Vec<Choice>,
    /// Token accounting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Every other field, passed through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    /// The provider's answer as it came, when the request was sent
    /// natively ([`NativeRequest`]): what an ingress of that wire answers.
    #[serde(skip)]
    pub native: Option<(NativeWire, Arc<Value>)>,
}

/// One answer of a [`ChatResponse`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    /// Position in `choices`.
    #[serde(default)]
    pub index: u32,
    /// The answer.
    pub message: Message,
    /// Why generation stopped (`stop`, `length`, `tool_calls`, `content_filter`).
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// Every other field (`logprobs`, ...), passed through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One streamed chunk (`object: "chat.completion.chunk"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChunk {
    /// `id`, `object` (`chat.completion.chunk`), `created` and `model`.
    #[serde(flatten)]
    pub header: CompletionHeader,
    /// Deltas per choice; empty in the final usage chunk.
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    /// The whole call's usage, in the final chunk when `include_usage` was asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Every other field, passed through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ChatChunk {
    /// True when the chunk carries generated output: non-empty content, or a
    /// tool call, refusal or reasoning delta.
    pub fn has_output(&self) -> bool {
        self.choices.iter().any(|c| {
            c.delta.content.as_deref().is_some_and(|s| !s.is_empty())
                || ["tool_calls", "refusal", "reasoning_content", "function_call"]
                    .iter()
                    .any(|k| c.delta.extra.get(*k).is_some_and(|v| !v.is_null()))
        })
    }
}

/// One choice's delta in a [`ChatChunk`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkChoice {
    /// Which choice this delta extends.
    #[serde(default)]
    pub index: u32,
    /// The new output.
    #[serde(default)]
    pub delta: Delta,
    /// Set in the choice's last chunk.
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// Every other field, passed through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The increment of one choice in a streamed chunk.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    /// Set in the first chunk (`assistant`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// New text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Every other field (`tool_calls`, `refusal`, ...), passed through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_flattened_header_keeps_the_wire_shape() {
        let text = r#"{"id":"c1","object":"chat.completion","created":7,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3},"system_fingerprint":"fp"}"#;
        let r: ChatResponse = serde_json::from_str(text).expect("a completion");
        assert_eq!(r.header.id, "c1");
        assert_eq!(r.header.created, 7);
        assert_eq!(r.extra.len(), 1, "only the unknown field is extra: {:?}", r.extra);
        assert_eq!(serde_json::to_string(&r).expect("encodes"), text);
        // A body without `choices` is not a completion; a chunk may lack them.
        assert!(serde_json::from_value::<ChatResponse>(json!({"id": "x", "error": {}})).is_err());
        let c: ChatChunk =
            serde_json::from_value(json!({"id": "c1", "object": "chat.completion.chunk"})).expect("a chunk");
        assert_eq!((c.header.id.as_str(), c.header.model.as_str()), ("c1", ""));
        assert!(c.choices.is_empty() && c.extra.is_empty());
    }
}
