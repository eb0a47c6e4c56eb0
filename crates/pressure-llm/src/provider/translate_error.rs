//! [`TranslateError`]: a chat request that a provider's wire cannot
//! express (Anthropic's Messages, OpenAI's Responses), refused before any
//! call with the field at fault.

/// A chat request that has no equivalent on a provider's wire.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot translate the request for an {wire} provider: {message}")]
pub(crate) struct TranslateError {
    /// The provider kind whose wire it is (`anthropic`, `openai-responses`).
    pub wire: &'static str,
    /// What cannot be expressed.
    pub message: String,
    /// The request field at fault, for the 400's `param`, when one is.
    pub param: Option<&'static str>,
}

impl TranslateError {
    /// A request `wire` cannot express.
    pub(crate) fn bad(wire: &'static str, message: impl Into<String>) -> Self {
        Self {
            wire,
            message: message.into(),
            param: None,
        }
    }

    /// A refusal of the request field `param`.
    pub(crate) fn refuse(wire: &'static str, param: &'static str, message: impl Into<String>) -> Self {
        Self {
            wire,
            message: message.into(),
            param: Some(param),
        }
    }
}
