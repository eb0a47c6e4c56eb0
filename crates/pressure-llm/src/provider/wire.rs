//! [`Wire`]: what differs between the wire formats a remote provider can
//! speak, and nothing else.
//!
//! Everything above the provider client speaks chat completions. A wire
//! names where a call goes, which headers carry the key (and any other
//! constant), how a chat request is written in its format, and how its
//! answers, whole or streamed, read back as chat completions. The rest of
//! a call — the pool, the per-phase timeouts, the tags, the rate-limit
//! hints, the classification of error answers — is the client's, the same
//! for every wire.
//!
//! One implementation per wire, beside its translation:
//! [`OpenAi`](super::openai::OpenAi) (chat completions),
//! [`Anthropic`](super::anthropic::Anthropic) (Messages) and
//! [`Responses`](super::responses::Responses) (OpenAI's Responses API).
//! The client picks one when it is built, from the provider's
//! [`ProviderKind`](super::ProviderKind), and keeps it as a
//! `&'static dyn Wire`: the wires are unit structs, so choosing one
//! allocates nothing, and a call pays one indirect call per step.

use http::header::{HeaderName, HeaderValue};

use super::body::BodyStream;
use super::error::CallError;
use super::types::{ChatRequest, ChatResponse, NativeWire};

/// The wire format of a remote provider (see the [module](self)).
pub(crate) trait Wire: Send + Sync + 'static {
    /// The chat endpoint's path under `baseUrl`: `chat/completions`,
    /// `messages` or `responses`.
    fn chat_path(&self) -> &'static str;

    /// The token-counting endpoint's path under `baseUrl`, for a wire that
    /// has one (Anthropic's `messages/count_tokens`).
    fn count_tokens_path(&self) -> Option<&'static str> {
        None
    }

    /// The header that carries the API key `key` (already trimmed), and
    /// its value: `Authorization: Bearer <key>`, or Anthropic's
    /// `x-api-key: <key>`.
    fn key_header(&self, key: &str) -> (HeaderName, String);

    /// The headers every call sends besides the key and `content-type`
    /// (Anthropic's `anthropic-version`).
    fn fixed_headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        Vec::new()
    }

    /// The agent dialect this wire is, if any: an agent's request in it is
    /// sent as it came, and answered as the provider answers.
    fn native(&self) -> Option<NativeWire> {
        None
    }

    /// `req` as this wire's request body (`streaming`: a streamed call).
    /// `Err` is a `BadRequest` naming the field at fault when there is one:
    /// the request cannot be said on this wire, and nothing is sent.
    fn encode(&self, req: &ChatRequest, streaming: bool) -> Result<Vec<u8>, Box<CallError>>;

    /// A non-streamed answer body as a chat completion; `Err` says why it
    /// is not one.
    fn decode(&self, body: &[u8]) -> Result<ChatResponse, String>;

    /// A streamed answer's body as chat-completions events, translated on
    /// the fly; with `keep_native`, each of the provider's own events is
    /// passed on too, verbatim, for an ingress of the same dialect. A wire
    /// of chat completions returns `body` as it is.
    fn translate_stream(&self, body: BodyStream, keep_native: bool) -> BodyStream {
        let _ = keep_native;
        body
    }
}
