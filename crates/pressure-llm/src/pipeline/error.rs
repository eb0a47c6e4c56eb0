//! [`LlmError`]: why an event got no answer, and the parts of the OpenAI
//! error answer for it ([`LlmError::describe`]); [`EmbeddingError`] for
//! the embeddings endpoint.

use std::time::Duration;

use pressure_core::Dimension;

use super::config::{ConfigError, ModelKind};
use super::fallback::ManualQueueError;
use crate::provider::{InvalidEmbeddingRequest, ProviderError};
use crate::reservation::ContextError;
use crate::taxonomy::ErrorKind;
use crate::tokens::TokenizerError;

/// Why an event got no answer (or the client could not be built).
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// No such use case.
    #[error("unknown use case {0:?}")]
    UnknownUseCase(String),
    /// The request fits no model of the chain.
    #[error(transparent)]
    ContextLength(ContextError),
    /// The request carries content that only its own wire can carry, and
    /// no level of the chain speaks that wire (docs/architecture.md#agents-at-the-door-messages-and-responses): refused before
    /// any provider call.
    #[error(
        "{param}: this content can only be sent to a provider of the {wire} wire, and no level of the chain takes it"
    )]
    NativeOnly {
        /// The request field at fault, as a JSON path.
        param: String,
        /// The wire that could carry it (`messages`, `responses`).
        wire: &'static str,
    },
    /// The use case serves the other endpoint (chat vs embeddings).
    #[error("use case {use_case:?} serves {}; {}", serves_what(*.serves), call_instead(*.serves))]
    WrongKind {
        /// The use case asked for.
        use_case: String,
        /// What it serves.
        serves: ModelKind,
    },
    /// An embeddings request a provider would refuse (400 with its `param`).
    #[error(transparent)]
    InvalidEmbedding(InvalidEmbeddingRequest),
    /// An embeddings input is longer than every level's `maxInputTokens`.
    #[error("input {index} has {tokens} tokens; the models of this use case take at most {max} per input")]
    InputTooLong {
        /// Position of the input.
        index: usize,
        /// Its tokens.
        tokens: u64,
        /// The (first) level's `maxInputTokens`.
        max: u64,
    },
    /// The last provider failure (after retries and fallbacks).
    #[error("{provider}/{model}: {kind}: {message}")]
    Upstream {
        /// Provider name.
        provider: String,
        /// Model name.
        model: String,
        /// The classified failure.
        kind: ErrorKind,
        /// Its HTTP status, if any.
        status: Option<u16>,
        /// The provider's message.
        message: String,
        /// The request field at fault, when the call was refused for one
        /// (e.g. `temperature` out of an Anthropic model's range).
        param: Option<&'static str>,
    },
    /// The event's total deadline passed.
    #[error("deadline of {total_ms} ms exceeded")]
    DeadlineExceeded {
        /// The use case's total budget.
        total_ms: u64,
    },
    /// The local limiter had no capacity for the (last) model within the deadline.
    #[error("no capacity on {resource} within the deadline")]
    NoCapacity {
        /// The broker resource.
        resource: String,
        /// When the limiter (or the provider's hold) would have had capacity.
        retry_after: Option<Duration>,
    },
    /// The event's payer (a tenant) has spent a calendar budget: no model
    /// level may call until the budget's period ends.
    #[error(
        "{resource}: {dimension} budget of {budget} cannot cover this call ({spent} used, up to {needed} needed); \
         it resets in {} s",
        retry_after.as_secs_f64().ceil()
    )]
    BudgetExceeded {
        /// The payer's resource (`gateway:tenant:<id>`).
        resource: String,
        /// The calendar dimension that is spent (`costMicroUsdPerDay`, …).
        dimension: Dimension,
        /// What the store counts as spent in the period now (the
        /// dimension's unit: micro-dollars, tokens or requests).
        spent: u64,
        /// The budget of the period.
        budget: u64,
        /// What the refused attempt would have reserved on that dimension
        /// (its estimate).
        needed: u64,
        /// Until the period ends.
        retry_after: Duration,
        /// Whether the period ends after the event's deadline: asking again
        /// within the same request's time cannot help
        /// ([`LlmError::should_retry`]).
        beyond_deadline: bool,
    },
    /// The (last) model's circuit breaker was open.
    #[error("circuit breaker of {provider}/{model} is open")]
    BreakerOpen {
        /// Provider name.
        provider: String,
        /// Model name.
        model: String,
        /// The breaker's remaining open time (zero while its probes run).
        retry_after: Option<Duration>,
    },
    /// Every level declined (no rule matched and no queue level).
    #[error("no level of the chain answered")]
    NoAnswer,
    /// The manual queue refused the request.
    #[error(transparent)]
    ManualQueue(#[from] ManualQueueError),
    /// The prompt could not be counted.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// The broker failed (backend error).
    #[error("limiter: {0}")]
    Limiter(#[from] pressure_core::Error),
    /// Invalid configuration.
    #[error("invalid llm configuration: {0}")]
    Config(#[from] ConfigError),
    /// A provider client could not be built.
    #[error(transparent)]
    Provider(#[from] ProviderError),
}

impl LlmError {
    /// A stable label for the "errors by type" metric.
    pub fn label(&self) -> &'static str {
        match self {
            Self::UnknownUseCase(_) => "unknown_use_case",
            Self::ContextLength(_) => "context_length",
            Self::NativeOnly { .. } => "native_only",
            Self::WrongKind { .. } => "wrong_kind",
            Self::InvalidEmbedding(_) => "invalid_request",
            Self::InputTooLong { .. } => "context_length",
            Self::Upstream { kind, .. } => kind.label(),
            Self::DeadlineExceeded { .. } => "deadline",
            Self::NoCapacity { .. } => "no_capacity",
            Self::BudgetExceeded { .. } => "budget_exceeded",
            Self::BreakerOpen { .. } => "breaker_open",
            Self::NoAnswer => "no_answer",
            Self::ManualQueue(_) => "manual_queue",
            Self::Tokenizer(_) => "tokenizer",
            Self::Limiter(_) => "limiter",
            Self::Config(_) => "config",
            Self::Provider(_) => "provider",
        }
    }

    /// The request field at fault as a JSON path, when it is not one of
    /// [`ErrorDescription::param`]'s fixed names.
    pub fn param_path(&self) -> Option<&str> {
        match self {
            Self::NativeOnly { param, .. } => Some(param),
            _ => None,
        }
    }

    /// When asking again could succeed, as far as the pipeline knows: the
    /// limiter's wait, the breaker's remaining open time or the provider's
    /// `retry-after`. After a whole chain gave up this is the time from the
    /// give-up to the soonest moment one of its levels could answer, and
    /// never less than the shortest wait a level asked for, so a client's
    /// retry loop waits for a level that could answer instead of re-running
    /// the chain at once.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::NoCapacity { retry_after, .. } | Self::BreakerOpen { retry_after, .. } => *retry_after,
            Self::BudgetExceeded { retry_after, .. } => Some(*retry_after),
            Self::Upstream { kind, .. } => kind.retry_after(),
            _ => None,
        }
    }

    /// Whether a client should ask again at all (OpenAI's
    /// `x-should-retry`, which its SDKs obey): `Some(false)` for a spent
    /// provider account and for a spent budget whose period ends after the
    /// event's deadline, `None` when the status says enough.
    pub fn should_retry(&self) -> Option<bool> {
        match self {
            Self::BudgetExceeded {
                beyond_deadline: true,
                ..
            }
            | Self::Upstream {
                kind: ErrorKind::QuotaExhausted,
                ..
            } => Some(false),
            _ => None,
        }
    }

    /// This error with its retry hint set to `hint` where it has one to
    /// carry (limiter, breaker, a provider's rate limit or overload).
    pub fn with_retry_after(mut self, hint: Option<Duration>) -> Self {
        let Some(hint) = hint else { return self };
        match &mut self {
            Self::NoCapacity { retry_after, .. } | Self::BreakerOpen { retry_after, .. } => {
                *retry_after = Some(hint);
            }
            Self::Upstream {
                kind: ErrorKind::RateLimited { retry_after } | ErrorKind::Overloaded { retry_after },
                ..
            } => *retry_after = Some(hint),
            _ => {}
        }
        self
    }

    /// The HTTP status and OpenAI-style error fields
    /// (`{"error": {"message", "type", "param", "code"}}`) to answer with;
    /// the gateway renders the body, this crate only names the parts.
    pub fn describe(&self) -> ErrorDescription {
        let d = |status: u16,
                 error_type: &'static str,
                 code: Option<&'static str>,
                 param: Option<&'static str>| {
            ErrorDescription {
                status,
                error_type,
                code,
                param,
            }
        };
        match self {
            Self::UnknownUseCase(_) => d(
                404,
                "invalid_request_error",
                Some("model_not_found"),
                Some("model"),
            ),
            Self::ContextLength(e) => d(400, e.error_type(), Some(e.code()), Some(e.param())),
            Self::NativeOnly { .. } => d(400, "invalid_request_error", Some("unsupported_content"), None),
            Self::WrongKind { .. } => d(
                400,
                "invalid_request_error",
                Some("model_not_supported"),
                Some("model"),
            ),
            Self::InvalidEmbedding(e) => d(400, "invalid_request_error", Some(e.code), Some(e.param)),
            Self::InputTooLong { .. } => d(
                400,
                "invalid_request_error",
                Some("context_length_exceeded"),
                Some("input"),
            ),
            Self::Upstream { kind, param, .. } => match kind {
                ErrorKind::BadRequest => d(400, "invalid_request_error", None, *param),
                ErrorKind::ContextLength => d(
                    400,
                    "invalid_request_error",
                    Some("context_length_exceeded"),
                    Some("messages"),
                ),
                ErrorKind::ContentRefusal => d(400, "invalid_request_error", Some("content_filter"), None),
                ErrorKind::RateLimited { .. } => {
                    d(429, "rate_limit_error", Some("rate_limit_exceeded"), None)
                }
                ErrorKind::QuotaExhausted => d(429, "insufficient_quota", Some("insufficient_quota"), None),
                ErrorKind::Timeout { .. } => d(504, "timeout_error", Some("upstream_timeout"), None),
                ErrorKind::Overloaded { .. } => d(503, "server_error", Some("overloaded"), None),
                _ => d(502, "server_error", Some("upstream_error"), None),
            },
            Self::DeadlineExceeded { .. } => d(504, "timeout_error", Some("deadline_exceeded"), None),
            Self::NoCapacity { .. } => d(429, "rate_limit_error", Some("rate_limit_exceeded"), None),
            Self::BudgetExceeded { dimension, .. } => d(
                429,
                "insufficient_quota",
                Some("budget_exceeded"),
                Some(dimension.as_str()),
            ),
            Self::BreakerOpen { .. } | Self::NoAnswer | Self::ManualQueue(_) => {
                d(503, "server_error", Some("service_unavailable"), None)
            }
            Self::Tokenizer(_) | Self::Limiter(_) | Self::Config(_) | Self::Provider(_) => {
                d(500, "server_error", None, None)
            }
        }
    }
}

/// The parts of an OpenAI-style error answer for an [`LlmError`]: status,
/// `type`, `code` and `param` (the message is the error's `Display`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorDescription {
    /// The HTTP status to answer with.
    pub status: u16,
    /// OpenAI's `error.type`.
    pub error_type: &'static str,
    /// OpenAI's `error.code`, when there is one.
    pub code: Option<&'static str>,
    /// OpenAI's `error.param`: the request field at fault, when there is one.
    pub param: Option<&'static str>,
}

/// What a use case of `kind` serves, for [`LlmError::WrongKind`].
fn serves_what(kind: ModelKind) -> &'static str {
    match kind {
        ModelKind::Chat => "chat completions, not embeddings",
        ModelKind::Embedding => "embeddings, not chat completions",
    }
}

/// Where to send its requests instead.
fn call_instead(kind: ModelKind) -> &'static str {
    match kind {
        ModelKind::Chat => "use POST /v1/chat/completions",
        ModelKind::Embedding => "use POST /v1/embeddings",
    }
}

/// Why an embeddings event got no answer, and when it could be tried again.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct EmbeddingError {
    /// What failed (its [`LlmError::describe`] is the HTTP answer).
    pub error: LlmError,
    /// When asking again could succeed ([`LlmError::retry_after`] of
    /// `error`, the same hint as a chat event's); `None` when no level said.
    pub retry_after: Option<Duration>,
}

impl From<LlmError> for EmbeddingError {
    fn from(error: LlmError) -> Self {
        Self {
            retry_after: error.retry_after().filter(|d| !d.is_zero()),
            error,
        }
    }
}
