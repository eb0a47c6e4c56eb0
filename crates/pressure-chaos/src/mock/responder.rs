//! What the mock says: the assistant text of an answer.

use pressure_llm::provider::Message;

/// Produces the assistant's text for a request. The mock cuts the text to
/// the phase's `outputTokens` and the request's `max_tokens`, and bills the
/// tokens it would have sent. Pluggable so that an example (the triage
/// classifier) can give answers with content while the faults stay the mock's.
pub trait Responder: Send + Sync + std::fmt::Debug + 'static {
    /// The assistant text for `messages` sent to `model`.
    fn respond(&self, model: &str, messages: &[Message]) -> String;
}

/// The default [`Responder`]: a deterministic filler answer that names the
/// model, long enough to be cut to any `outputTokens`.
#[derive(Debug, Clone, Copy, Default)]
pub struct FillerResponder;

impl Responder for FillerResponder {
    fn respond(&self, model: &str, _messages: &[Message]) -> String {
        let mut s = format!("This is {model}, the pressure mock provider, answering.");
        while s.len() < 4_096 {
            s.push_str(" The quick brown fox jumps over the lazy dog.");
        }
        s
    }
}
