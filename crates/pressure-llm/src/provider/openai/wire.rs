//! [`OpenAi`]: the [`Wire`] of chat completions — `POST
//! {baseUrl}/chat/completions` with `Authorization: Bearer <key>`, the
//! request as [`ChatBody`] writes it, the answers as they come.

use http::header::{HeaderName, AUTHORIZATION};

use super::request::ChatBody;
use crate::provider::error::CallError;
use crate::provider::types::{ChatRequest, ChatResponse};
use crate::provider::wire::Wire;

/// OpenAI's chat completions (a provider of kind `openai`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct OpenAi;

impl Wire for OpenAi {
    fn chat_path(&self) -> &'static str {
        "chat/completions"
    }

    fn key_header(&self, key: &str) -> (HeaderName, String) {
        (AUTHORIZATION, format!("Bearer {key}"))
    }

    fn encode(&self, req: &ChatRequest, streaming: bool) -> Result<Vec<u8>, Box<CallError>> {
        serde_json::to_vec(&ChatBody::new(req, streaming))
            .map_err(|e| Box::new(CallError::refused(None, format!("serialising the request: {e}"))))
    }

    fn decode(&self, body: &[u8]) -> Result<ChatResponse, String> {
        serde_json::from_slice::<ChatResponse>(body).map_err(|e| e.to_string())
    }
}
