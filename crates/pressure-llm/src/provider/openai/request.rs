//! [`ChatBody`]: a chat request as sent to an OpenAI-compatible provider.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::provider::types::{ChatRequest, Message, StreamOptions};

/// The request as sent: the caller's fields with `stream` and `stream_options` set by the client.
#[derive(Serialize)]
pub(crate) struct ChatBody<'a> {
    model: &'a str,
    messages: &'a [Message],
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(flatten)]
    extra: &'a Map<String, Value>,
}

impl<'a> ChatBody<'a> {
    /// `req` as sent; for a streamed call (`streaming`) with `stream: true`
    /// and `stream_options.include_usage: true` (the final usage chunk).
    pub(crate) fn new(req: &'a ChatRequest, streaming: bool) -> Self {
        let stream_options = streaming.then(|| {
            let mut o = req.stream_options.clone().unwrap_or_default();
            o.include_usage = Some(true);
            o
        });
        Self {
            model: &req.model,
            messages: &req.messages,
            max_tokens: req.max_tokens,
            stream: streaming.then_some(true),
            stream_options,
            extra: &req.extra,
        }
    }
}
