//! The provider client: OpenAI-compatible chat completions, streamed and not,
//! with every timeout explicit (DESIGN §6, layer 1).
//!
//! * [`types`] — the wire format ([`ChatRequest`], [`ChatResponse`], [`ChatChunk`]).
//! * [`config`] — [`ProviderConfig`] and its [`TimeoutsConfig`].
//! * [`client`] — [`ProviderClient`]: [`complete`](ProviderClient::complete)
//!   and [`stream`](ProviderClient::stream), each bounded per phase (pool
//!   wait, connect, write, first byte, read between chunks) and by the
//!   caller's total deadline.
//! * [`stream`] — [`ChatStream`], the parsed server-sent events of a streamed
//!   answer, with time to first token, final usage and the output so far.
//! * [`ratelimit`] — [`RateLimitHints`] from `x-ratelimit-*` /
//!   `anthropic-ratelimit-*` headers.
//! * [`error`] — [`CallError`] (classified by [`crate::taxonomy`]) and
//!   [`ProviderError`] (configuration).
//!
//! The HTTP client is `reqwest` with rustls (HTTP/1.1 and HTTP/2 via ALPN).

pub mod client;
pub mod config;
pub mod error;
pub mod ratelimit;
pub mod stream;
pub mod types;

pub use client::{Completion, ProviderClient};
pub use config::{ProviderConfig, TimeoutsConfig};
pub use error::{CallError, ProviderError};
pub use ratelimit::RateLimitHints;
pub use stream::ChatStream;
pub use types::{
    ChatChunk, ChatRequest, ChatResponse, Choice, ChunkChoice, Delta, Message, MessageContent, StreamOptions,
    Usage,
};
