//! Errors of the provider client: configuration errors and failed calls.

use std::fmt;

use super::ratelimit::RateLimitHints;
use crate::taxonomy::{ErrorKind, TimeoutPhase};

/// The client could not be built from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// `apiKeyEnv` names a variable that is unset or not valid in a header.
    #[error("provider {provider}: environment variable {var} is unset or not a valid API key")]
    MissingApiKey {
        /// The provider's name.
        provider: String,
        /// The variable's name.
        var: String,
    },
    /// `baseUrl` is not an http(s) URL.
    #[error("provider {provider}: invalid baseUrl {url:?}: {reason}")]
    InvalidBaseUrl {
        /// The provider's name.
        provider: String,
        /// The configured URL.
        url: String,
        /// Why it was rejected.
        reason: String,
    },
    /// `maxConnections` is zero.
    #[error("provider {provider}: maxConnections must be at least 1")]
    NoConnections {
        /// The provider's name.
        provider: String,
    },
    /// A `local` provider's model could not be loaded from `modelDir`.
    #[error("provider {provider}: cannot load the local model: {error}")]
    LocalModel {
        /// The provider's name.
        provider: String,
        /// What is wrong with the model directory.
        error: super::local::LocalModelError,
    },
    /// The HTTP client could not be built (TLS backend initialisation).
    #[error("provider {provider}: building the HTTP client failed: {reason}")]
    Client {
        /// The provider's name.
        provider: String,
        /// The underlying error.
        reason: String,
    },
}

/// One failed call (attempt) to a provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallError {
    /// What went wrong; its disposition decides retry, fallback or fail.
    pub kind: ErrorKind,
    /// The HTTP status, when a response head arrived.
    pub status: Option<u16>,
    /// A human-readable description (the provider's error message, bounded).
    pub message: String,
    /// The rate-limit hints of the error response, if any.
    pub ratelimit: RateLimitHints,
    /// The request field at fault, when the client refused to send the
    /// request because of it (nothing was sent).
    pub param: Option<&'static str>,
}

impl CallError {
    /// An error without an HTTP response.
    pub(crate) fn transport(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            status: None,
            message: message.into(),
            ratelimit: RateLimitHints::default(),
            param: None,
        }
    }

    /// A request refused before sending (`BadRequest`), naming the field
    /// at fault when there is one.
    pub(crate) fn refused(param: Option<&'static str>, message: impl Into<String>) -> Self {
        Self {
            param,
            ..Self::transport(ErrorKind::BadRequest, message)
        }
    }

    /// A timeout in `phase`.
    pub(crate) fn timeout(phase: TimeoutPhase, message: impl Into<String>) -> Self {
        Self::transport(ErrorKind::Timeout { phase }, message)
    }

    /// The timeout phase, if this is a timeout.
    pub fn timeout_phase(&self) -> Option<TimeoutPhase> {
        match self.kind {
            ErrorKind::Timeout { phase } => Some(phase),
            _ => None,
        }
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(s) => write!(f, "{} (HTTP {s}): {}", self.kind, self.message),
            None => write!(f, "{}: {}", self.kind, self.message),
        }
    }
}

impl std::error::Error for CallError {}
