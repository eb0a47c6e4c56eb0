//! [`Responses`]: the [`Wire`] of OpenAI's Responses API — `POST
//! {baseUrl}/responses` with `Authorization: Bearer <key>`, and the
//! translation of [`request`](super::request),
//! [`response`](super::response) and [`stream`](super::stream).

use http::header::{HeaderName, AUTHORIZATION};

use crate::provider::body::BodyStream;
use crate::provider::error::CallError;
use crate::provider::types::{ChatRequest, ChatResponse, NativeWire};
use crate::provider::wire::Wire;

/// OpenAI's Responses API (a provider of kind `openai-responses`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Responses;

impl Wire for Responses {
    fn chat_path(&self) -> &'static str {
        "responses"
    }

    fn key_header(&self, key: &str) -> (HeaderName, String) {
        (AUTHORIZATION, format!("Bearer {key}"))
    }

    fn native(&self) -> Option<NativeWire> {
        Some(NativeWire::Responses)
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
