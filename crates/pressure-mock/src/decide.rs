//! The one decision step of every endpoint ([`decide`]): a request is
//! decided in a fixed order, alike for chat completions, messages and
//! embeddings; only reading the request and wording the answer belong to
//! the [`Endpoint`].
//!
//! 1. Read ([`Endpoint::read`]): a request the provider would refuse → 400
//!    `invalid_request_error`, not billed.
//! 2. A text containing [`BAD_REQUEST_MARKER`](crate::BAD_REQUEST_MARKER) → 400, not billed.
//! 3. The phase in force; if its faults hit the model and it has a
//!    `rateLimit`, the model's quota ([`crate::quota`]), costing the input
//!    tokens plus the output the request allows (its cap, else the phase's
//!    `outputTokens`; none for embeddings): over it → 429 with
//!    `retry-after` and the dialect's quota headers, not billed and not
//!    counted against the quota; admitted answers carry the headers too.
//! 4. One uniform draw: `errorShare` → 500 at once (not billed);
//!    `overloadShare` → OpenAI's 503 / Anthropic's 529 at once (not
//!    billed); `hangShare` → nothing is ever sent (input billed);
//!    `stallShare` → the head and the first content event (a stream) or
//!    the first bytes (a JSON body), then silence (input billed, the full
//!    output billed when generation would have finished); else a normal
//!    answer after the latency draw (a stream spreads it over its events,
//!    the first content event after 20 % of it); `streamErrorShare` → a
//!    stream's head and first content event, then at the end of the
//!    latency the endpoint's error event and the end of the stream (input
//!    billed, no output; recorded `server_error` with status 200), a JSON
//!    request → 500 at once like `errorShare`.
//!
//! The input of an accepted request (answered, stalled, failed midway or
//! hanging) is billed by its prompt-cache classes: the endpoint's
//! cacheable prefix is looked up in the mock's prompt cache (`cache.rs`)
//! when the request is accepted.
//!
//! The output is the responder's text cut to `min(outputTokens, cap)`
//! tokens; the answer says it was cut (`length`, `max_tokens`) only when
//! the request's own cap did it.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::time::{Duration, Instant};

use crate::behaviour::Phase;
use crate::body::{Piece, TimedBody};
use crate::dialect::Dialect;
use crate::endpoint::{Call, Due, Endpoint, Output, Reply};
use crate::quota::Verdict;
use crate::record::Outcome;
use crate::state::{Draft, Fault, OutputBill, Shared, Tracker};
use crate::text::cut_text;
use crate::tokens::count_text;

/// A stalled JSON answer sends this many bytes of its body.
const STALL_JSON_BYTES: usize = 16;

/// The answer to a request carrying [`BAD_REQUEST_MARKER`](crate::BAD_REQUEST_MARKER).
const MARKED: &str = "The request was refused by the mock (bad-request marker).";

/// The handler of endpoint `E`; see the module docs.
pub(crate) async fn decide<E: Endpoint>(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let now = Instant::now();
    let mut tracker = Tracker::new(shared.clone());
    let phase = shared.phase_at(now);
    let mut draft = Draft::arriving(now, E::ROUTE.path, &headers, &phase.name);
    let dialect = E::ROUTE.dialect;
    let mut refuse = |draft: Draft, outcome: Outcome, status: u16, answer: Response| {
        shared.record(draft, outcome, status, 0);
        tracker.finish();
        answer
    };

    // 1. Read.
    let call = match E::read(&body) {
        Ok(call) => call,
        Err(message) => {
            draft.model_of_invalid(&body);
            return refuse(draft, Outcome::BadRequest, 400, dialect.invalid_request(&message));
        }
    };
    draft.model = call.model.clone();
    draft.stream = call.stream;

    // 2. The refused-request marker.
    if call.marked {
        return refuse(draft, Outcome::BadRequest, 400, dialect.invalid_request(MARKED));
    }

    // 3. The mock's own quota.
    let hit = phase.hits(&call.model);
    let quota_headers = match quota(&shared, &phase, hit, &call, dialect, now) {
        Ok(headers) => headers,
        Err(refused) => return refuse(draft, Outcome::RateLimited, 429, *refused),
    };

    // 4. The fault draw.
    let fault = match (hit, call.stream) {
        (false, _) => Fault::None,
        (true, stream) => match shared.draw_fault(&phase) {
            Fault::StreamError if !stream => Fault::Error,
            f => f,
        },
    };
    match fault {
        Fault::Error | Fault::Overload => {
            let (status, answer) = dialect.failure(fault == Fault::Overload);
            refuse(draft, Outcome::ServerError, status, answer)
        }
        Fault::Hang => {
            let cache = shared.cache.lock().use_of(call.cache);
            let at = shared.record_cached(draft, Outcome::Hung, 0, call.input, cache);
            tracker.attach(at);
            shared.shutdown_signal().await;
            dialect.shutting_down()
        }
        Fault::Stall | Fault::StreamError | Fault::None => {
            let plan = Playout {
                now,
                latency: shared.draw_latency(&phase.latency),
                stall: fault == Fault::Stall,
                fail: fault == Fault::StreamError,
                headers: quota_headers,
            };
            answer::<E>(&shared, &phase, draft, tracker, &call, plan).await
        }
    }
}

/// The model's quota for `call` when the phase's rate limit hits it: the
/// hint headers to answer with, or the 429.
fn quota<R>(
    shared: &Shared,
    phase: &Phase,
    hit: bool,
    call: &Call<R>,
    dialect: Dialect,
    now: Instant,
) -> Result<HeaderMap, Box<Response>> {
    let mut headers = HeaderMap::new();
    let (true, Some(limit)) = (hit, phase.rate_limit) else {
        return Ok(headers);
    };
    let allowed = call.max_output.unwrap_or(u64::from(phase.output_tokens));
    let cost = call.input.saturating_add(allowed);
    let verdict = shared
        .quota
        .lock()
        .check(&call.model, limit, cost, shared.ms_since_start(now));
    match verdict {
        Verdict::Admitted(hints) => {
            dialect.put_hints(&mut headers, &hints);
            Ok(headers)
        }
        Verdict::Refused {
            kind,
            retry_after_ms,
            hints,
        } => Err(Box::new(dialect.rate_limited(
            &call.model,
            kind,
            retry_after_ms,
            &hints,
            cost,
        ))),
    }
}

/// How an answer is played: from `now`, over `latency`, stalling, failing
/// midway (a stream) or not, with the quota's headers.
#[derive(Debug)]
struct Playout {
    now: Instant,
    latency: Duration,
    stall: bool,
    fail: bool,
    headers: HeaderMap,
}

impl Playout {
    /// When the first content is due (20 % of the latency).
    fn first_at(&self) -> Instant {
        self.now + self.latency.mul_f64(0.2)
    }

    /// When the answer is complete.
    fn due(&self) -> Instant {
        self.now + self.latency
    }

    /// The instant of an event.
    fn at(&self, due: Due) -> Instant {
        match due {
            Due::Start => self.now,
            Due::Content { index, of } if of > 1 => {
                let span = self.due().saturating_duration_since(self.first_at());
                // Both are at most MAX_CONTENT_CHUNKS: exact as f64.
                let share = f64::from(u32::try_from(index).unwrap_or(u32::MAX))
                    / f64::from(u32::try_from(of - 1).unwrap_or(u32::MAX));
                self.first_at() + span.mul_f64(share.min(1.0))
            }
            Due::Content { .. } => self.first_at(),
            Due::End => self.due(),
        }
    }
}

/// The generated text of `call`, cut to its budget: (text, tokens, capped).
fn generate<R>(shared: &Shared, phase: &Phase, call: &Call<R>) -> (String, u64, bool) {
    if let Some(fixed) = &call.fixed_output {
        return (fixed.clone(), count_text(&call.model, fixed), false);
    }
    let Some(turns) = &call.turns else {
        return (String::new(), 0, false);
    };
    let full = shared.responder.respond(&call.model, turns);
    let cap = u64::from(phase.output_tokens);
    let limit = call.max_output.map_or(cap, |m| m.min(cap));
    let cut = cut_text(&call.model, &full, limit);
    let capped = cut.truncated && call.max_output.is_some_and(|m| m < cap);
    (cut.text, cut.tokens, capped)
}

/// A request that is answered (in full, or stalling): recorded and billed
/// its input now, its output when generation finishes.
async fn answer<E: Endpoint>(
    shared: &Arc<Shared>,
    phase: &Phase,
    draft: Draft,
    mut tracker: Tracker,
    call: &Call<E::Request>,
    plan: Playout,
) -> Response {
    let (text, tokens, capped) = generate(shared, phase, call);
    let outcome = match (plan.stall, plan.fail) {
        (true, _) => Outcome::Stalled,
        (false, true) => Outcome::ServerError,
        (false, false) => Outcome::Ok,
    };
    let cache = shared.cache.lock().use_of(call.cache);
    let at = shared.record_cached(draft, outcome, 200, call.input, cache);
    tracker.attach(at);
    let mut bill = OutputBill::new(shared.clone(), at, tokens, plan.due());
    let output = Output {
        seq: at.seq(),
        created: shared.ms_since_start(plan.now) / 1_000,
        input: call.input,
        cache,
        text,
        tokens,
        capped,
    };
    let Reply { json, mut events } = E::answer(call, &output);
    if plan.fail && call.stream {
        // The head and the first content event, then the error event.
        bill.forgo();
        let first = events.iter().position(|e| matches!(e.at, Due::Content { .. }));
        events.truncate(first.map_or(events.len(), |i| i + 1));
        let error = E::stream_error(call, &output, events.len());
        let mut pieces: std::collections::VecDeque<Piece> = events
            .into_iter()
            .map(|e| piece(&plan, e.at, e.bytes, false))
            .collect();
        pieces.push_back(piece(&plan, Due::End, error, false));
        let timed = TimedBody::new(shared, pieces, false, tracker, None);
        return streamed(plan.headers, true, timed);
    }
    if plan.stall {
        // Generation goes on without anyone listening: billed when it would have finished.
        drop(bill);
        let pieces = if call.stream {
            // The head and the first content event.
            let first = events.iter().position(|e| matches!(e.at, Due::Content { .. }));
            events.truncate(first.map_or(events.len(), |i| i + 1));
            events
                .into_iter()
                .map(|e| piece(&plan, e.at, e.bytes, false))
                .collect()
        } else {
            let head = json.slice(..STALL_JSON_BYTES.min(json.len()));
            [piece(&plan, Due::Content { index: 0, of: 1 }, head, false)].into()
        };
        let timed = TimedBody::new(shared, pieces, true, tracker, None);
        return streamed(plan.headers, call.stream, timed);
    }
    if call.stream {
        let pieces = events
            .into_iter()
            .map(|e| piece(&plan, e.at, e.bytes, e.bill))
            .collect();
        let timed = TimedBody::new(shared, pieces, false, tracker, Some(bill));
        return streamed(plan.headers, true, timed);
    }
    tokio::select! {
        _ = tokio::time::sleep_until(plan.due()) => {}
        _ = shared.shutdown_signal() => return E::ROUTE.dialect.shutting_down(),
    }
    bill.bill_now();
    tracker.finish();
    let mut headers = plan.headers;
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    (StatusCode::OK, headers, json).into_response()
}

fn piece(plan: &Playout, due: Due, bytes: Bytes, bill: bool) -> Piece {
    Piece {
        at: plan.at(due),
        bytes,
        bill,
    }
}

/// A response whose body is played out by `body`.
fn streamed(mut headers: HeaderMap, sse: bool, body: TimedBody) -> Response {
    let ct = if sse {
        "text/event-stream"
    } else {
        "application/json"
    };
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(ct));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    (StatusCode::OK, headers, Body::from_stream(body.into_stream())).into_response()
}
