//! What the mock says: the assistant text of an answer.

/// One turn of a request as a [`Responder`] sees it: the role and the text
/// (OpenAI's text parts, Anthropic's text blocks and tool results, joined
/// with newlines). Anthropic's `system` prompt is a turn of role `system`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// `system`, `developer`, `user`, `assistant`, `tool`, ...
    pub role: String,
    /// The turn's text.
    pub text: String,
}

impl Turn {
    /// A turn of `role` saying `text`.
    pub fn new(role: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            text: text.into(),
        }
    }
}

/// Produces the assistant's text for a request. The mock cuts the text to
/// the phase's `outputTokens` and the request's `max_tokens`, and bills the
/// tokens it would have sent. Pluggable so that an example (the triage
/// classifier) can give answers with content while the faults stay the mock's.
pub trait Responder: Send + Sync + std::fmt::Debug + 'static {
    /// The assistant text for the `turns` of a request to `model`.
    fn respond(&self, model: &str, turns: &[Turn]) -> String;
}

/// The default [`Responder`]: a deterministic filler answer that names the
/// model, long enough to be cut to any `outputTokens`.
#[derive(Debug, Clone, Copy, Default)]
pub struct FillerResponder;

impl Responder for FillerResponder {
    fn respond(&self, model: &str, _turns: &[Turn]) -> String {
        let mut s = format!("This is {model}, the pressure mock provider, answering.");
        while s.len() < 4_096 {
            s.push_str(" The quick brown fox jumps over the lazy dog.");
        }
        s
    }
}
