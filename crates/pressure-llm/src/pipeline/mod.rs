//! The pipeline that composes the stack (docs/architecture.md#the-llm-stack), outer to inner:
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
//!   `anthropic-ratelimit-*`) saying the quota is spent hold the model
//!   until the announced reset: a held level is treated like a limiter
//!   denial, waited out only when it ends within the level's share of the
//!   time left (the time left over the model levels still to try), else the
//!   next level answers at once — so the provider is not asked again before
//!   it would answer 429, and an idle backup is not left waiting;
//! * a `batch` use case reserves under the model's batch ceiling
//!   (`1 − batchHeadroom` of each limit, [`ModelConfig::batch_headroom`]);
//!   interactive ones may use the whole limit;
//! * a failure is priced (input tokens plus output generated) into the
//!   event's [`RetryState`](crate::retry::RetryState) whose decision retries
//!   the same level, falls to the next level, or fails the event;
//! * a `knn` level embeds the last user message with a local embedding
//!   model (a call through the same gate, retry loop and ledger as any
//!   model call) and answers with the label the nearest labelled examples
//!   vote for ([`knn`]);
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
//! case whose chain holds embedding models.
//!
//! [`LlmClient::stream`] runs the same walk for a streamed answer, which may
//! fall back only before its first output chunk; see [`AnswerStream`].
//!
//! When the deadline has passed, remaining model levels are skipped but
//! `knn`, `rules` and `manualQueue` levels still run: they make no remote
//! call and answer at once (a `knn` level's local call gets
//! [`knn::KNN_MIN_TIME`]), and a degraded answer beats none.
//!
//! When every level gave up, the error's [`LlmError::retry_after`] is the
//! time from the give-up to the soonest moment a level could answer, never
//! less than the chain's own backoff before it would try a level again.
//!
//! # Layout
//! * `engine/` — the attempt engine, written once for every kind of call:
//!   the chain walk, the gate, the retry loop of a level, the ledger that
//!   settles an attempt, the model table and its provider holds.
//! * `calls/` — the three kinds of call it drives: `chat` (complete),
//!   `stream` (committed at the first output chunk), `embed`.
//! * `caller` — [`Caller`]: the event's id and the resource that pays for
//!   its attempts (a tenant's budget).
//! * `client` — [`LlmClient`], `answer` / `answer_stream` / `error` — what
//!   the caller gets; `config`, [`pool`] (a deployment pool level's
//!   configuration), `fallback` (rules and the manual queue),
//!   [`knn`] (the nearest-neighbour level), `metrics`.

mod answer;
mod answer_stream;
mod caller;
mod calls;
mod client;
mod config;
mod engine;
mod error;
mod fallback;
pub mod knn;
mod metrics;
pub mod pool;

pub use answer::{Answer, Degradation, EmbeddingAnswer, LlmReply};
pub use answer_stream::AnswerStream;
pub use caller::{Caller, CallerTrace};
pub use client::LlmClient;
pub use config::{
    ChainLevel, ConfigError, KnnLevel, LlmConfig, ModelConfig, ModelKind, ProviderSettings, UseCaseConfig,
    UseCasePriority, DEFAULT_BATCH_HEADROOM, DEFAULT_BATCH_TOTAL_MS, DEFAULT_INTERACTIVE_TOTAL_MS,
    DEFAULT_KNN_K, MAX_MODEL_ID_BYTES,
};
pub use error::{EmbeddingError, ErrorDescription, LlmError};
pub use fallback::{
    queued_response, queued_text, FallbackHandler, InMemoryQueue, KeywordRule, KeywordRules, ManualQueue,
    ManualQueueError, QueuedRequest, QUEUED_MODEL,
};
pub use metrics::{Histogram, MetricsSnapshot, LATENCY_BUCKETS};
pub use pool::{PoolMember, DEFAULT_POOL_WEIGHT, MAX_POOL_MEMBERS, MAX_POOL_WEIGHT};
