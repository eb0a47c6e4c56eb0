//! The pipeline that composes the stack (DESIGN §6), outer to inner:
//! total deadline → fallback chain → retry (with its money budget) →
//! circuit breaker → limiter reservation → per-attempt timeouts.
//!
//! [`LlmClient::complete`] runs one event of a use case:
//!
//! * one deadline (`totalMs`) covers every retry and every fallback;
//! * the request is checked against every model level's context window
//!   first: levels it cannot fit are skipped, and when it fits none, the
//!   event fails with [`LlmError::ContextLength`] (HTTP 400) before any
//!   provider or quota is touched;
//! * each model level asks its breaker first (open: next level, no network
//!   call, no quota), then reserves its own capacity on
//!   `llm:<provider>:<model>` within the time left (none: next level), then
//!   calls the provider; the reservation is reconciled to the `usage` of an
//!   answer, or to the input tokens alone after a failure (the reserved output
//!   is refunded);
//! * a successful answer's rate-limit headers (`x-ratelimit-*`,
//!   `anthropic-ratelimit-*`) saying the quota is spent ([`hold_for`]) hold
//!   the model until the announced reset: a held level is treated like a
//!   limiter denial (wait when the hold ends before the deadline, else next
//!   level), so the provider is not asked again before it would answer 429;
//! * a `batch` use case reserves under the model's batch ceiling
//!   (`1 − batchHeadroom` of each limit, [`ModelConfig::batch_headroom`]);
//!   interactive ones may use the whole limit;
//! * a failure is priced (input tokens plus output generated) into the
//!   event's [`RetryState`](crate::retry::RetryState) whose decision retries
//!   the same level, falls to the next level, or fails the event;
//! * `rules` levels ask a [`FallbackHandler`]; the `manualQueue` level parks
//!   the request in a [`ManualQueue`] and answers with a ticket.
//!
//! Breaker accounting: server errors, overload, timeouts, refused
//! connections, unknown errors and 401/403/404 (a broken credential or model
//! name of this pair) are failures. A rate limit (429, spend cap) and 409 are
//! *not* (the provider is healthy, only busy for us: the limiter and
//! `retry-after` handle it), and a request-caused error (400, context length,
//! content refusal) proves the provider healthy, so it is recorded as a
//! success.
//!
//! [`LlmClient::embed`] runs the walk for an embeddings request on a use
//! case whose chain holds embedding models ([`embeddings`]).
//!
//! [`LlmClient::stream`] runs the same walk for a streamed answer, which may
//! fall back only before its first output chunk; see [`AnswerStream`].
//!
//! When the deadline has passed, remaining model levels are skipped but
//! `rules` and `manualQueue` levels still run: they make no provider call and
//! answer at once, and a degraded answer beats none.

mod client;
pub mod config;
pub mod embeddings;
pub mod fallback;
mod metrics;
mod stream;

use std::time::Duration;

use serde_json::{json, Value};

pub use client::{hold_for, LlmClient, MAX_PROVIDER_HOLD};
pub use config::{
    ChainLevel, ConfigError, LlmConfig, ModelConfig, ModelKind, ProviderSettings, UseCaseConfig,
    UseCasePriority,
};
pub use embeddings::{EmbeddingAnswer, EmbeddingError};
pub use fallback::{
    queued_response, queued_text, FallbackHandler, InMemoryQueue, KeywordRule, KeywordRules, ManualQueue,
    ManualQueueError, QueuedRequest,
};
pub use metrics::{Histogram, MetricsSnapshot, LATENCY_BUCKETS};
pub use stream::AnswerStream;

use crate::price::Money;
use crate::provider::{ChatResponse, InvalidEmbeddingRequest, ProviderError};
use crate::reservation::ContextError;
use crate::taxonomy::ErrorKind;
use crate::tokens::TokenizerError;

/// Which kind of level served an answer; the `x-pressure-degradation` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Degradation {
    /// The first model level of the chain.
    Primary,
    /// A later model level: `Backup(1)` is the first backup.
    Backup(usize),
    /// A non-LLM handler.
    Rules,
    /// The request was parked in the manual queue.
    ManualQueue,
}

impl Degradation {
    /// The header value: `primary`, `backup`, `rules` or `manual_queue`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Primary => "primary",
            Self::Backup(_) => "backup",
            Self::Rules => "rules",
            Self::ManualQueue => "manual_queue",
        }
    }
}

/// The `model` of a manual-queue answer ([`queued_response`]).
pub const QUEUED_MODEL: &str = "manual_queue";

/// What answered: a completion, or a manual-queue ticket.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A chat completion (from a model or a rules handler).
    Completion(ChatResponse),
    /// The request was accepted into the manual queue.
    Queued {
        /// The ticket id.
        ticket: String,
    },
}

/// The result of one event.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The answer.
    pub reply: Reply,
    /// Index of the chain level that served it.
    pub level: usize,
    /// Which kind of level that was.
    pub degradation: Degradation,
    /// `provider/model` for a model level.
    pub model: Option<String>,
    /// Provider calls made (all levels).
    pub attempts: u32,
    /// Money spent on every attempt, the successful one included.
    pub spent: Money,
    /// Money spent on failed attempts.
    pub failed_spent: Money,
}

impl Answer {
    /// The completion, if this is not a manual-queue ticket.
    pub fn response(&self) -> Option<&ChatResponse> {
        match &self.reply {
            Reply::Completion(r) => Some(r),
            Reply::Queued { .. } => None,
        }
    }

    /// The manual-queue ticket, if any.
    pub fn ticket(&self) -> Option<&str> {
        match &self.reply {
            Reply::Queued { ticket } => Some(ticket),
            Reply::Completion(_) => None,
        }
    }

    /// The HTTP status to answer with: 200, or 202 for a queued request.
    pub fn http_status(&self) -> u16 {
        match self.reply {
            Reply::Completion(_) => 200,
            Reply::Queued { .. } => 202,
        }
    }
}

/// Why an event got no answer (or the client could not be built).
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// No such use case.
    #[error("unknown use case {0:?}")]
    UnknownUseCase(String),
    /// The request fits no model of the chain.
    #[error(transparent)]
    ContextLength(ContextError),
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
            Self::WrongKind { .. } => "wrong_kind",
            Self::InvalidEmbedding(_) => "invalid_request",
            Self::InputTooLong { .. } => "context_length",
            Self::Upstream { kind, .. } => kind.label(),
            Self::DeadlineExceeded { .. } => "deadline",
            Self::NoCapacity { .. } => "no_capacity",
            Self::BreakerOpen { .. } => "breaker_open",
            Self::NoAnswer => "no_answer",
            Self::ManualQueue(_) => "manual_queue",
            Self::Tokenizer(_) => "tokenizer",
            Self::Limiter(_) => "limiter",
            Self::Config(_) => "config",
            Self::Provider(_) => "provider",
        }
    }

    /// When asking again could succeed, as far as the pipeline knows: the
    /// limiter's wait, the breaker's remaining open time or the provider's
    /// `retry-after`. After a whole chain gave up this is the soonest of its
    /// levels (see [`LlmClient::complete`]), so a client's retry loop waits
    /// for the first level that could answer instead of re-running the chain
    /// at once.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::NoCapacity { retry_after, .. } | Self::BreakerOpen { retry_after, .. } => *retry_after,
            Self::Upstream { kind, .. } => kind.retry_after(),
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
            Self::Upstream { kind, .. } => match kind {
                ErrorKind::BadRequest => d(400, "invalid_request_error", None, None),
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
            Self::BreakerOpen { .. } | Self::NoAnswer | Self::ManualQueue(_) => {
                d(503, "server_error", Some("service_unavailable"), None)
            }
            Self::Tokenizer(_) | Self::Limiter(_) | Self::Config(_) | Self::Provider(_) => {
                d(500, "server_error", None, None)
            }
        }
    }

    /// The HTTP status and OpenAI-style error body. Transitional: the
    /// gateway's one renderer takes [`LlmError::describe`] instead.
    pub fn openai_error(&self) -> (u16, Value) {
        let d = self.describe();
        (
            d.status,
            json!({"error": {"message": self.to_string(), "type": d.error_type, "param": d.param, "code": d.code}}),
        )
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
