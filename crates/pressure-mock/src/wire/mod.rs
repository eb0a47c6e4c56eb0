//! The providers' wire formats as the mock reads and writes them, written
//! from the providers' API references (not from pressure's client, so that
//! a wire bug on one side shows on the other):
//!
//! * [`openai`]: chat completions (request, `chat.completion`,
//!   `chat.completion.chunk`), embeddings, the error body (the Responses
//!   API is read and written as JSON values in `endpoint/responses.rs`);
//! * [`anthropic`]: the Messages API (request, `message`, the stream's
//!   events), the error body.
//!
//! Requests are read as leniently as the providers read them: unknown
//! fields are ignored, content is a string or an array of parts (blocks),
//! and optional fields may be `null`.

pub(crate) mod anthropic;
pub(crate) mod openai;

use bytes::Bytes;
use serde::Serialize;

/// The JSON of a wire value (these types always serialize).
pub(crate) fn json_bytes<T: Serialize>(value: &T) -> Bytes {
    Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}
