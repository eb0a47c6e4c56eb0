//! The mock provider: OpenAI-compatible `POST /v1/chat/completions`
//! (JSON and SSE, `usage` included) whose [`Behaviour`] is set at start and
//! switched at run time through its admin endpoints:
//!
//! * `GET /mock/stats` → [`MockStats`]
//! * `GET /mock/arrivals` → `[Arrival]` (every request, in order)
//! * `GET /mock/behaviour` / `PUT /mock/behaviour` (a [`Behaviour`] as JSON;
//!   400 naming the JSON path when invalid) — restarts the phase clock
//! * `PUT /mock/scenario/{name}` — a preset ([`PRESETS`])
//! * `POST /mock/reset` — clears counters and arrivals
//!
//! It bills like a provider: input tokens for every accepted request,
//! output tokens when generation finishes even if the client has gone.

mod behaviour;
mod handler;
mod quota;
mod record;
mod responder;
mod server;
mod sse;
mod state;

pub use behaviour::{Behaviour, Latency, Phase, RateLimit, PRESETS};
pub use record::{
    Arrival, MockStats, ModelBill, Outcome, ATTEMPT_HEADER, BAD_REQUEST_MARKER, PROBE_HEADER,
    REQUEST_ID_HEADER,
};
pub use responder::{FillerResponder, Responder};
pub use server::{parse_behaviour, unknown_scenario, MockConfig, MockError, MockProvider};
