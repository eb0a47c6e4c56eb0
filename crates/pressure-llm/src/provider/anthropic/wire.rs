//! [`Anthropic`]: the [`Wire`] of Anthropic's Messages API — `POST
//! {baseUrl}/messages` with `x-api-key` and `anthropic-version`, the
//! translation of [`request`](super::request), [`response`](super::response)
//! and [`stream`](super::stream), and the token count at
//! `{baseUrl}/messages/count_tokens`.

use http::header::{HeaderName, HeaderValue};

use super::{API_KEY_HEADER, API_VERSION, VERSION_HEADER};
use crate::provider::body::BodyStream;
use crate::provider::error::CallError;
use crate::provider::types::{ChatRequest, ChatResponse, NativeWire};
use crate::provider::wire::Wire;

/// Anthropic's Messages API (a provider of kind `anthropic`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Anthropic;

impl Wire for Anthropic {
    fn chat_path(&self) -> &'static str {
        "messages"
    }

    fn count_tokens_path(&self) -> Option<&'static str> {
        Some("messages/count_tokens")
    }

    fn key_header(&self, key: &str) -> (HeaderName, String) {
        (HeaderName::from_static(API_KEY_HEADER), key.to_owned())
    }

    fn fixed_headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        vec![(
            HeaderName::from_static(VERSION_HEADER),
            HeaderValue::from_static(API_VERSION),
        )]
    }

    fn native(&self) -> Option<NativeWire> {
        Some(NativeWire::Messages)
    }

    fn encode(&self, req: &ChatRequest, streaming: bool) -> Result<Vec<u8>, Box<CallError>> {
        super::request::encode(req, streaming)
            .map_err(|e| Box::new(CallError::refused(e.param, e.to_string())))
    }

    fn decode(&self, body: &[u8]) -> Result<ChatResponse, String> {
        super::response::to_chat_response(body)
    }

    fn translate_stream(&self, body: BodyStream, keep_native: bool) -> BodyStream {
        super::stream::translate_body(body, keep_native)
    }
}
