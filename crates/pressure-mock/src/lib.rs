//! # pressure-mock
//!
//! The mock provider. Its endpoints:
//!
//! * OpenAI `POST /v1/chat/completions` (JSON and SSE, `usage` with
//!   `prompt_tokens_details.cached_tokens`);
//! * OpenAI `POST /v1/responses` (the Responses API: JSON and its event
//!   stream with sequence numbers; a function call when function tools are
//!   offered after a user turn, text after a `function_call_output`);
//! * OpenAI `POST /v1/embeddings` (deterministic unit vectors, see
//!   [`embedding_vector`]);
//! * Anthropic `POST /v1/messages` (JSON and SSE events, Anthropic-shaped
//!   errors and `anthropic-ratelimit-*` headers, prompt-cache usage);
//! * Anthropic `POST /v1/messages/count_tokens` (`{"input_tokens": N}`,
//!   counted as `/v1/messages` counts; recorded, never billed nor limited).
//!
//! Its [`Behaviour`] is set at start and switched at run time through its
//! admin endpoints (every billed endpoint plays the same phases, shares the
//! per-model quota and is billed and recorded alike; [`Arrival::endpoint`]
//! and [`MockStats::by_endpoint`] tell them apart):
//!
//! * `GET /mock/stats` → [`MockStats`]
//! * `GET /mock/arrivals` → `[Arrival]` (every request, in order)
//! * `GET /mock/behaviour` / `PUT /mock/behaviour` (a [`Behaviour`] as JSON;
//!   400 naming the JSON path when invalid) — restarts the phase clock
//! * `PUT /mock/scenario/{name}` — a preset ([`PRESETS`])
//! * `POST /mock/reset` — clears counters, arrivals and the prompt cache
//!
//! It bills like a provider: input tokens for every accepted request,
//! output tokens when generation finishes even if the client has gone.
//! It plays prompt caching too, so a gateway can be tested on cache
//! pricing: Anthropic's `cache_control` prefixes (first sight
//! `cache_creation_input_tokens`, later `cache_read_input_tokens`) and
//! OpenAI's automatic caching of prompts of 1024 tokens and more (whole
//! 128-token steps, `cached_tokens` from the second sight), in a bounded
//! set of prefixes per model; those tokens are billed at the [`Price`]'s
//! cache-write and cache-read prices ([`ModelBill`] counts them apart).
//!
//! Start one with [`MockProvider::start`] (a [`MockConfig`]: behaviour,
//! [`Price`]s, [`Responder`], seed) and point an OpenAI or Anthropic client
//! at [`MockProvider::base_url`]; the handle reads and changes the same
//! state as the admin endpoints. How a request is decided (read, bad-request
//! marker, quota, fault draw, latency) is one step for every endpoint
//! (`decide.rs`); the quota's exact sliding-log scheme is in `quota.rs`: per
//! model, at most `requests` requests and `tokens` tokens in ANY window of
//! `windowMs` (not only aligned ones); a 429 costs no quota; a new
//! behaviour or a reset starts with an empty quota.
//!
//! The mock depends on nothing of pressure's: its wire types (`wire/`) are
//! written from the providers' API references and read requests as
//! leniently as the providers do, and it counts tokens with `tiktoken-rs`
//! itself, so that a wire bug in pressure's client shows against it.
//!
//! Beside it, [`demo_upstream`]: the small upstream `pressure gateway
//! --demo-upstream` serves (a JSON echo, slow and event streams, canned
//! chat completions and embeddings) for trying the gateway with nothing
//! else running.

#![warn(unreachable_pub)]

mod behaviour;
mod body;
mod cache;
mod dates;
mod decide;
pub mod demo_upstream;
mod dialect;
mod endpoint;
mod key;
mod price;
mod quota;
mod record;
mod responder;
mod server;
mod state;
mod text;
mod tokens;
mod wire;

pub use behaviour::{Behaviour, Latency, Phase, RateLimit, PRESETS};
pub use endpoint::embeddings::{default_dimensions, embedding_vector, InputItem};
pub use price::Price;
pub use record::{
    Arrival, MockStats, ModelBill, Outcome, ATTEMPT_HEADER, BAD_REQUEST_MARKER, PROBE_HEADER,
    REQUEST_ID_HEADER,
};
pub use responder::{FillerResponder, Responder, Turn};
pub use server::{parse_behaviour, unknown_scenario, MockConfig, MockError, MockProvider};
