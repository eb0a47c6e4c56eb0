//! The provider client: OpenAI-compatible chat completions, streamed and not,
//! with every timeout explicit (docs/architecture.md#the-llm-stack, layer 1). A provider of
//! [`ProviderKind::Anthropic`] speaks Anthropic's Messages API instead; the
//! client translates on the wire (`anthropic`), so everything above it
//! sees chat completions either way.
//!
//! * `types` — the wire format (`ChatRequest`, `ChatResponse`, `ChatChunk`).
//! * `config` — `ProviderConfig`, its `ProviderKind` and `TimeoutsConfig`.
//! * `wire` — `Wire`: what differs between the wire formats of remote
//!   providers (endpoint path, key and fixed headers, request encoder,
//!   answer and stream decoders); one implementation per wire, beside its
//!   translation:
//! * `openai` — chat completions, sent as they are (`OpenAi`);
//! * `anthropic` — the translation to and from Anthropic's Messages API
//!   (`Anthropic`);
//! * `responses` — the translation to and from OpenAI's Responses API
//!   (`Responses`).
//! * `native` — an agent's own request passed to a provider of its wire.
//! * `client` — `ProviderClient`: `complete`
//!   and [`stream`](ProviderClient::stream), each bounded per phase (pool
//!   wait, connect, write, first byte, read between chunks) and by the
//!   caller's total deadline.
//! * `embeddings` — `POST {baseUrl}/embeddings` (`EmbeddingRequest`,
//!   [`EmbeddingResponse`], [`ProviderClient::embed_tagged`]) on the same
//!   pool and timeouts.
//! * `local` — [`LocalModel`]: the in-process sentence-transformers model
//!   of a [`ProviderKind::Local`] provider (candle, CPU; behind the
//!   `local-models` cargo feature), answering `embed` calls with the same
//!   slots, timeouts and error classification as a remote provider.
//! * `stream` — `ChatStream`, the parsed server-sent events of a streamed
//!   answer, with time to first token, final usage and the output so far.
//! * [`ratelimit`] — [`RateLimitHints`] from `x-ratelimit-*` /
//!   `anthropic-ratelimit-*` headers.
//! * `tag` — `CallTag`: the event id, attempt number and probe flag sent
//!   as `x-pressure-*` headers with every call.
//! * `error` — `CallError` (classified by `crate::taxonomy`) and
//!   [`ProviderError`] (configuration).
//!
//! * `remote` — `Remote`: what a remote provider builds once (its wire,
//!   endpoint URIs, constant headers and pooled client).
//! * `transport` — how its connections are opened: TLS, `CONNECT`
//!   tunnels through an HTTP proxy, the connect timeout.
//!
//! The HTTP client is hyper 1 (hyper-util's pooling client) with rustls:
//! HTTP/1.1, and HTTP/2 via ALPN for `https://` providers; see `transport`.
//!
//! # How the timeouts agree along the chain
//! The use case's total budget (`totalMs`: 15 s interactive, 120 s batch by
//! default) is the one deadline of an event: every retry, backoff sleep,
//! limiter wait and fallback level runs inside it. Each per-attempt timer
//! (pool wait, connect, write, first byte, read between chunks) is the
//! smaller of its own setting and the time left before that deadline; when
//! the deadline is the nearer bound the error says `Total`, and the pipeline
//! stops trying further models (rules and the manual queue still answer).
//! A retry whose backoff or `retry-after` would end past the deadline is not
//! made. So an attempt can never outlive its event, and a slow first attempt
//! shortens, never extends, what the fallbacks get.

mod anthropic;
mod body;
mod client;
mod config;
mod embeddings;
mod error;
mod local;
mod native;
mod openai;
pub mod ratelimit;
mod remote;
mod responses;
mod sse;
mod stream;
mod tag;
mod translate_error;
mod transport;
mod types;
mod wire;

pub use client::{Completion, PoolStats, ProviderClient};
pub use config::{ProviderConfig, ProviderKind, ProviderSettings, TimeoutsConfig};
pub use embeddings::{
    Embedding, EmbeddingCompletion, EmbeddingInput, EmbeddingRequest, EmbeddingResponse, EmbeddingUsage,
    InputItem, InvalidEmbeddingRequest, MAX_EMBEDDING_INPUTS,
};
pub use error::{CallError, ProviderError};
pub use local::{LocalEmbeddings, LocalModel, LocalModelError};
pub use ratelimit::{parse_go_duration, parse_http_date, parse_rfc3339, RateLimitHints};
pub use stream::ChatStream;
pub use tag::{CallTag, ATTEMPT_HEADER, PROBE_HEADER, REQUEST_ID_HEADER};
pub use types::{
    ChatChunk, ChatRequest, ChatResponse, Choice, ChunkChoice, CompletionHeader, Delta, Message,
    MessageContent, NativeRequest, NativeWire, StreamOptions, Usage, NATIVE_FIELD,
};
