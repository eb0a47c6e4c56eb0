//! # pressure-llm
//!
//! The LLM client stack (DESIGN §6), outer to inner: total deadline →
//! fallback chain → retry (with its money budget) → circuit breaker →
//! limiter reservation → per-attempt timeouts.
//!
//! * [`LlmClient`] runs events of a use case — a chat completion
//!   ([`LlmClient::complete`]), a stream ([`LlmClient::stream`],
//!   [`AnswerStream`]) or an embeddings request ([`LlmClient::embed`]) —
//!   through one attempt engine: one chain walk, one retry loop, one
//!   settlement of each attempt's breaker permit, limiter permit and price
//!   ([`pipeline`]).
//! * The policy pieces that decide *whether* to call, each usable alone:
//!   the error [`taxonomy`], the [`retry`] policy with backoff, jitter,
//!   `retry-after` and a money budget, the circuit [`breaker`] per
//!   (provider, model), the [`reservation`] of a call's tokens, the
//!   [`price`] table and the [`tokens`] counter.
//! * The [`provider`] client: OpenAI's chat-completions and embeddings wire
//!   format, Anthropic's Messages API translated both ways, every timeout
//!   explicit.
//!
//! The types a user of the client needs are re-exported here; the modules
//! hold the rest of their area's public types.

#![warn(unreachable_pub)]

pub mod breaker;
pub mod pipeline;
pub mod price;
pub mod provider;
pub mod reservation;
pub mod retry;
pub mod taxonomy;
pub mod tokens;

pub use pipeline::{
    Answer, AnswerStream, Caller, ChainLevel, Degradation, EmbeddingAnswer, EmbeddingError, ErrorDescription,
    LlmClient, LlmConfig, LlmError, LlmReply, MetricsSnapshot,
};
pub use provider::{
    CallError, ChatChunk, ChatRequest, ChatResponse, EmbeddingRequest, EmbeddingResponse, Message,
    ProviderClient, ProviderConfig, ProviderKind,
};
pub use taxonomy::ErrorKind;
