//! OpenAI's wire format, from its API reference: `POST /v1/chat/completions`
//! (the request, the `chat.completion` object, the `chat.completion.chunk`
//! events of a stream), `POST /v1/embeddings`, and the error body.

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::json_bytes;

/// A request body read as OpenAI reads it: malformed JSON, a missing
/// field or an empty `model` is refused with OpenAI's wording.
pub(crate) fn read_request<T: DeserializeOwned>(body: &[u8], model: fn(&T) -> &str) -> Result<T, String> {
    let req: T = serde_json::from_slice(body)
        .map_err(|e| format!("We could not parse the JSON body of your request: {e}"))?;
    if model(&req).is_empty() {
        return Err("you must provide a model parameter".into());
    }
    Ok(req)
}

/// A chat completion request. Only what the mock reads is typed; every
/// other field (`temperature`, `tools`, `n`, ...) is ignored.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ChatCompletionRequest {
    pub(crate) model: String,
    pub(crate) messages: Vec<ChatMessage>,
    /// The output cap of older clients (deprecated by OpenAI, still accepted).
    pub(crate) max_tokens: Option<u32>,
    /// The output cap of newer clients.
    pub(crate) max_completion_tokens: Option<u32>,
    pub(crate) stream: Option<bool>,
    pub(crate) stream_options: Option<StreamOptions>,
    /// The key OpenAI routes its prompt cache by.
    pub(crate) prompt_cache_key: Option<String>,
}

impl ChatCompletionRequest {
    /// The output cap: `max_tokens`, else `max_completion_tokens`.
    pub(crate) fn max_output(&self) -> Option<u32> {
        self.max_tokens.or(self.max_completion_tokens)
    }

    /// Whether a stream should end with a usage chunk.
    pub(crate) fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false)
    }
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct StreamOptions {
    pub(crate) include_usage: Option<bool>,
}

/// One message of the conversation (`system`, `developer`, `user`,
/// `assistant`, `tool`, ...).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ChatMessage {
    pub(crate) role: String,
    /// A string, an array of parts, or `null` / absent (an assistant
    /// message that only calls tools).
    pub(crate) content: Option<ChatContent>,
    /// The participant's name.
    pub(crate) name: Option<String>,
}

impl ChatMessage {
    /// The text: the string, or the text parts joined with newlines.
    pub(crate) fn text(&self) -> String {
        match &self.content {
            None => String::new(),
            Some(ChatContent::Text(s)) => s.clone(),
            Some(ChatContent::Parts(parts)) => parts
                .iter()
                .filter_map(|p| match p {
                    ContentPart::Text { text } => Some(text.as_str()),
                    ContentPart::Other => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// A message's `content`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum ChatContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// One part of an array content: `text`, or another kind (`image_url`,
/// `input_audio`, `file`, `refusal`), which carries no text to count.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ContentPart {
    Text {
        text: String,
    },
    #[serde(other)]
    Other,
}

/// An embeddings request.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct EmbeddingsRequest {
    pub(crate) model: String,
    pub(crate) input: EmbeddingsInput,
    /// `float` (the default) or `base64`.
    pub(crate) encoding_format: Option<String>,
    pub(crate) dimensions: Option<u32>,
}

/// The four forms of `input`: a text, texts, token ids, arrays of token ids.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum EmbeddingsInput {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenArrays(Vec<Vec<u32>>),
}

/// `usage` of a chat answer.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Usage {
    pub(crate) prompt_tokens: u64,
    pub(crate) completion_tokens: u64,
    pub(crate) total_tokens: u64,
    pub(crate) prompt_tokens_details: CachedTokens,
}

/// `prompt_tokens_details` (chat) and `input_tokens_details` (responses):
/// the prompt tokens served by the prompt cache.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct CachedTokens {
    pub(crate) cached_tokens: u64,
}

impl Usage {
    /// `input` prompt tokens (`cached` of them from the cache), `output` completion tokens.
    pub(crate) fn of(input: u64, output: u64, cached: u64) -> Self {
        Self {
            prompt_tokens: input,
            completion_tokens: output,
            total_tokens: input.saturating_add(output),
            prompt_tokens_details: CachedTokens {
                cached_tokens: cached,
            },
        }
    }
}

/// The fields a `chat.completion` and each of its chunks start with.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct CompletionHead<'a> {
    pub(crate) id: &'a str,
    pub(crate) object: &'static str,
    pub(crate) created: u64,
    pub(crate) model: &'a str,
}

/// A `chat.completion`.
#[derive(Debug, Serialize)]
pub(crate) struct ChatCompletion<'a> {
    #[serde(flatten)]
    pub(crate) head: CompletionHead<'a>,
    pub(crate) choices: [Choice<'a>; 1],
    pub(crate) usage: Usage,
}

/// The one choice of a [`ChatCompletion`].
#[derive(Debug, Serialize)]
pub(crate) struct Choice<'a> {
    pub(crate) index: u32,
    pub(crate) message: AssistantMessage<'a>,
    pub(crate) finish_reason: &'a str,
}

/// The answer's message.
#[derive(Debug, Serialize)]
pub(crate) struct AssistantMessage<'a> {
    pub(crate) role: &'static str,
    pub(crate) content: &'a str,
}

/// A `chat.completion.chunk`: one choice delta, or (the last, when
/// `include_usage` was asked) no choice and the `usage`.
#[derive(Debug, Serialize)]
pub(crate) struct ChatCompletionChunk<'a> {
    #[serde(flatten)]
    pub(crate) head: CompletionHead<'a>,
    pub(crate) choices: Vec<ChunkChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) usage: Option<Usage>,
}

/// The choice of a chunk.
#[derive(Debug, Serialize)]
pub(crate) struct ChunkChoice<'a> {
    pub(crate) index: u32,
    pub(crate) delta: Delta<'a>,
    pub(crate) finish_reason: Option<&'a str>,
}

/// What a chunk adds: the role (first chunk), content, or nothing (the
/// finishing chunk).
#[derive(Debug, Default, Serialize)]
pub(crate) struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) content: Option<&'a str>,
}

/// The `data:` event of a chunk.
pub(crate) fn sse(chunk: &ChatCompletionChunk<'_>) -> Bytes {
    let json = json_bytes(chunk);
    let mut out = Vec::with_capacity(json.len() + 8);
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(&json);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// The stream's last event.
pub(crate) const DONE: &[u8] = b"data: [DONE]\n\n";

/// The `data:` event that ends a chat stream failing midway, as OpenAI
/// sends it: an error body instead of a chunk.
pub(crate) fn sse_error(message: &str) -> Bytes {
    let json = json_bytes(&OpenAiErrorBody {
        error: OpenAiErrorDetail {
            message,
            kind: "server_error",
            param: None,
            code: Some("server_error"),
        },
    });
    let mut out = Vec::with_capacity(json.len() + 8);
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(&json);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// What a stream failing midway says.
pub(crate) const STREAM_ERROR_MESSAGE: &str =
    "The server had an error while processing your request (pressure mock: stream failed midway).";

/// An embeddings answer (`object: "list"`).
#[derive(Debug, Serialize)]
pub(crate) struct EmbeddingList<'a> {
    pub(crate) object: &'static str,
    pub(crate) data: Vec<EmbeddingData>,
    pub(crate) model: &'a str,
    pub(crate) usage: EmbeddingUsage,
}

/// One vector of an [`EmbeddingList`].
#[derive(Debug, Serialize)]
pub(crate) struct EmbeddingData {
    pub(crate) object: &'static str,
    pub(crate) index: usize,
    pub(crate) embedding: Vector,
}

/// A vector as floats, or as base64 of its little-endian `f32`s.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum Vector {
    Floats(Vec<f32>),
    Base64(String),
}

/// `usage` of an embeddings answer.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct EmbeddingUsage {
    pub(crate) prompt_tokens: u64,
    pub(crate) total_tokens: u64,
}

/// OpenAI's error body: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Serialize)]
pub(crate) struct OpenAiErrorBody<'a> {
    pub(crate) error: OpenAiErrorDetail<'a>,
}

/// The `error` of an [`OpenAiErrorBody`].
#[derive(Debug, Serialize)]
pub(crate) struct OpenAiErrorDetail<'a> {
    pub(crate) message: &'a str,
    #[serde(rename = "type")]
    pub(crate) kind: &'a str,
    pub(crate) param: Option<&'a str>,
    pub(crate) code: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_a_string_parts_or_null_and_unknown_fields_pass() {
        let req: ChatCompletionRequest = serde_json::from_str(
            r#"{"model":"m","temperature":0.2,"tools":[],"max_completion_tokens":9,
                "messages":[{"role":"developer","content":"be brief"},
                            {"role":"user","name":"ann","content":[{"type":"text","text":"a"},
                              {"type":"image_url","image_url":{"url":"data:x"}},{"type":"text","text":"b"}]},
                            {"role":"assistant","content":null,"tool_calls":[]}],
                "stream":null}"#,
        )
        .unwrap();
        assert_eq!(req.max_output(), Some(9));
        assert_eq!(req.stream, None);
        let texts: Vec<String> = req.messages.iter().map(ChatMessage::text).collect();
        assert_eq!(texts, ["be brief", "a\nb", ""]);
        assert_eq!(req.messages[1].name.as_deref(), Some("ann"));
    }

    #[test]
    fn embeddings_input_takes_its_four_forms() {
        for (input, form) in [
            (r#""one""#, "text"),
            (r#"["a","b"]"#, "texts"),
            ("[1,2,3]", "tokens"),
            ("[[1],[2,3]]", "arrays"),
        ] {
            let r: EmbeddingsRequest =
                serde_json::from_str(&format!(r#"{{"model":"e","input":{input},"user":"u"}}"#)).unwrap();
            let got = match r.input {
                EmbeddingsInput::Text(_) => "text",
                EmbeddingsInput::Texts(_) => "texts",
                EmbeddingsInput::Tokens(_) => "tokens",
                EmbeddingsInput::TokenArrays(_) => "arrays",
            };
            assert_eq!(got, form);
        }
    }
}
