//! What reached the mock: one [`Arrival`] per request and the billing
//! counters ([`MockStats`]), so a test or the chaos report can check what
//! the stack under test really sent.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The request header naming the client's event (one per user request,
/// shared by its retries and fallbacks). Sent by the pressure LLM client.
pub const REQUEST_ID_HEADER: &str = "x-pressure-request-id";
/// The request header numbering the attempts of one event (1, 2, ...).
pub const ATTEMPT_HEADER: &str = "x-pressure-attempt";
/// The request header marking a circuit breaker's half-open probe.
pub const PROBE_HEADER: &str = "x-pressure-probe";
/// A message containing this text is answered `400 invalid_request_error`
/// (a request the provider refuses; it must never be retried).
pub const BAD_REQUEST_MARKER: &str = "[mock:bad-request]";

/// How the mock treated one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Answered in full (200).
    Ok,
    /// Refused by the mock's own quota (429), not billed.
    RateLimited,
    /// Answered 500 (or, overloaded, 529 / 503) at once, not billed.
    ServerError,
    /// Never answered; input billed.
    Hung,
    /// Head and first chunk sent, then silence; input and the full output billed.
    Stalled,
    /// Refused as invalid (400), not billed.
    BadRequest,
}

/// One request as the mock saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Arrival {
    /// Sequence number, from 0.
    pub seq: u64,
    /// Milliseconds since the mock started (fractional).
    pub at_ms: f64,
    /// The request's `model`.
    pub model: String,
    /// The path called: `/v1/chat/completions`, `/v1/embeddings`,
    /// `/v1/responses`, `/v1/messages` or `/v1/messages/count_tokens`.
    #[serde(default)]
    pub endpoint: String,
    /// `x-pressure-request-id`, when sent.
    pub request_id: Option<String>,
    /// `x-pressure-attempt`, when sent.
    pub attempt: Option<u32>,
    /// The W3C `traceparent` header, when sent (the gateway's tracing on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// Whether `x-pressure-probe` was sent.
    pub probe: bool,
    /// Whether the request asked for a stream.
    pub stream: bool,
    /// The name of the phase in force.
    pub phase: String,
    /// What the mock did.
    pub outcome: Outcome,
    /// The status sent (0 when nothing was sent: a hang).
    pub status: u16,
    /// Input tokens billed (0 when not billed), every cache class included.
    pub input_tokens: u64,
    /// Output tokens billed, counted when the mock finished generating them
    /// (even if the client had gone); 0 until then.
    pub output_tokens: u64,
    /// What those tokens cost at the mock's price table, in micro-dollars
    /// (the part of the input served by or written to the prompt cache at
    /// the cache prices).
    pub micro_usd: u64,
    /// Whether the client went away before the answer was complete.
    pub client_gone: bool,
}

/// Billing and request counts of one model.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelBill {
    /// Requests received.
    pub requests: u64,
    /// Input tokens billed (every class: uncached, cache writes, cache reads).
    pub input_tokens: u64,
    /// Output tokens billed.
    pub output_tokens: u64,
    /// Of `input_tokens`, those written to the prompt cache (billed at the
    /// model's cache-write price).
    #[serde(default)]
    pub cache_write_input_tokens: u64,
    /// Of `input_tokens`, those read from the prompt cache (billed at the
    /// model's cache-read price).
    #[serde(default)]
    pub cache_read_input_tokens: u64,
    /// The bill at the mock's price table, in micro-dollars: uncached input
    /// × input price + cache writes × write price + cache reads × read
    /// price + output × output price, rounded up once.
    pub micro_usd: u64,
}

/// The mock's counters since start (or the last reset).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MockStats {
    /// Requests received.
    pub requests: u64,
    /// Requests by the status sent (`"0"` for hangs), as strings for JSON.
    pub by_status: BTreeMap<String, u64>,
    /// Requests by [`Outcome`].
    pub by_outcome: BTreeMap<Outcome, u64>,
    /// Requests by the path called (`/v1/chat/completions`, `/v1/responses`,
    /// `/v1/messages`, ...).
    #[serde(default)]
    pub by_endpoint: BTreeMap<String, u64>,
    /// Billing per model.
    pub by_model: BTreeMap<String, ModelBill>,
    /// Input tokens billed, all models.
    pub billed_input_tokens: u64,
    /// Output tokens billed, all models.
    pub billed_output_tokens: u64,
    /// Of the input tokens billed, those written to the prompt cache, all models.
    #[serde(default)]
    pub billed_cache_write_input_tokens: u64,
    /// Of the input tokens billed, those read from the prompt cache, all models.
    #[serde(default)]
    pub billed_cache_read_input_tokens: u64,
    /// The whole bill, in micro-dollars.
    pub billed_micro_usd: u64,
    /// Requests being answered (or hanging) now.
    pub in_flight: u64,
    /// The most requests in flight at once.
    pub max_in_flight: u64,
    /// The phase in force now.
    pub phase: String,
}
