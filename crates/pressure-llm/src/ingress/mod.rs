//! The agents' dialects at the gateway's door (docs/architecture.md#agents-at-the-door-messages-and-responses): Anthropic's
//! Messages API ([`messages`]) and OpenAI's Responses API ([`responses`]).
//!
//! Each dialect is two pure translations around the one attempt engine:
//!
//! * in: the agent's body, checked as its vendor checks it, to a
//!   [`Parsed`] — the chat request the engine runs (with the body kept as
//!   its [`NativeRequest`](crate::provider::NativeRequest), so a provider of
//!   the same wire gets it unchanged), the hints the chat translation drops
//!   and the content it cannot carry;
//! * out: a chat completion, or a stream of chunks, rendered in the dialect
//!   (a provider's own answer, when it came natively, is passed on as it is:
//!   the gateway decides that, not these modules).

pub mod messages;
pub mod responses;

use crate::provider::ChatRequest;
use serde_json::Value;

/// Writes one server-sent event of an agent's dialect to `out`:
/// `event: <name>`, `data: <json>`, a blank line (both APIs name every
/// event; the one writer of their events).
pub fn write_event(out: &mut Vec<u8>, name: &str, data: &Value) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    // A `Value` always serialises; into the buffer, without a String between.
    let _ = serde_json::to_writer(&mut *out, data);
    out.extend_from_slice(b"\n\n");
}

/// An agent's request, read and checked.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// The request as the engine runs it: the chat translation, with
    /// `stream`, `stream_options.include_usage: true` (the renderers need
    /// the usage) and `native` set to the body as received.
    pub chat: ChatRequest,
    /// The model id the agent asked for (names the use case, via aliases).
    pub model: String,
    /// Whether the agent asked for a stream.
    pub stream: bool,
    /// The request's fields and hints that the chat translation leaves out
    /// (`thinking`, `cache_control`, `metadata`, `include`, ...), named by
    /// their JSON path or field name, in order, without repeats. A level of
    /// the request's own wire drops nothing; any other level drops these,
    /// and the answer says so (`x-pressure-dropped`).
    pub dropped: Vec<String>,
    /// The first piece of content only the request's own wire can carry
    /// (a server-side tool's result, a document), by its JSON path: a level
    /// of another wire cannot take the request and is skipped.
    pub native_only: Option<String>,
}

/// A request its vendor would refuse: a `400` naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct IngressError {
    /// What is wrong, for a human.
    pub message: String,
    /// The field at fault, as a JSON path (`messages.0.content.1.type`).
    pub param: String,
}

impl IngressError {
    /// An error at `param`.
    pub fn new(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            param: param.into(),
        }
    }
}
