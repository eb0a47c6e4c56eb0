//! `POST /v1/messages`: the mock in Anthropic's wire format (the Messages
//! API, JSON and server-sent events), with the same phases, quota, faults,
//! billing and recording as `/v1/chat/completions` (`handler.rs`), decided
//! in the same order:
//!
//! 1. Parse as Anthropic does: malformed JSON, no `model`, no (or a
//!    non-positive) `max_tokens`, no `messages`, a role other than `user` /
//!    `assistant` → `400 invalid_request_error`, not billed.
//! 2. A message (or the system prompt) containing [`BAD_REQUEST_MARKER`] →
//!    `400 invalid_request_error`, not billed.
//! 3. The model's quota when the phase has one: over it → `429
//!    rate_limit_error` with `retry-after` (whole seconds, rounded up, as
//!    Anthropic sends it) and `anthropic-ratelimit-*` headers; an admitted
//!    answer carries the `anthropic-ratelimit-*` headers too (resets as RFC
//!    3339 times, with a `date` header of the same clock so a client can
//!    subtract them).
//! 4. The fault draw: `errorShare` → `500 api_error`, `overloadShare` → `529
//!    overloaded_error` (both at once, not billed); `hangShare` → silence
//!    (input billed); `stallShare` → the head and the first events, then
//!    silence; else the answer after the latency draw: a `message` body, or
//!    the event sequence `message_start`, `content_block_start`, `ping`,
//!    `content_block_delta`s (the first after 20 % of the latency),
//!    `content_block_stop`, `message_delta` (`stop_reason`, output
//!    `usage`), `message_stop`.
//!
//! Input tokens are counted as on the other endpoint (the system prompt and
//! the text of every block, the model's encoding, OpenAI's chat framing);
//! `stop_reason` is `max_tokens` when the request's `max_tokens` cut the
//! answer, else `end_turn`. Every arrival is recorded with the endpoint
//! `/v1/messages`.

use std::collections::VecDeque;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use pressure_llm::provider::Message;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::handler::{
    count_input, cut_text, put, split_even, streamed, MAX_CONTENT_CHUNKS, STALL_JSON_BYTES,
};
use super::quota::{QuotaHints, Verdict};
use super::record::{Outcome, BAD_REQUEST_MARKER};
use super::sse::{Piece, Plan};
use super::state::{Draft, Fault, OutputBill, Shared, Tracker};

/// The path of the Messages endpoint (as recorded in arrivals).
pub(super) const MESSAGES: &str = "/v1/messages";

/// What the mock reads of a Messages request.
#[derive(Debug)]
struct Request {
    model: String,
    max_tokens: u64,
    stream: bool,
    /// The system prompt (as a `system` message) and the turns, as text.
    messages: Vec<Message>,
}

/// The Messages endpoint.
pub(crate) async fn messages(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let now = Instant::now();
    let mut tracker = Tracker::new(shared.clone());
    let phase = shared.phase_at(now);
    let mut draft = Draft::arriving(now, MESSAGES, &headers, &phase.name);

    // 1. Parse.
    let req = match parse(&body) {
        Ok(req) => req,
        Err(message) => {
            draft.model_of_invalid(&body);
            shared.record(draft, Outcome::BadRequest, 400, 0);
            tracker.finish();
            return error(StatusCode::BAD_REQUEST, "invalid_request_error", &message);
        }
    };
    draft.model = req.model.clone();
    draft.stream = req.stream;
    let texts: Vec<String> = req.messages.iter().map(Message::text).collect();

    // 2. The refused-request marker.
    if texts.iter().any(|t| t.contains(BAD_REQUEST_MARKER)) {
        shared.record(draft, Outcome::BadRequest, 400, 0);
        tracker.finish();
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "The request was refused by the mock (bad-request marker).",
        );
    }

    let input = count_input(&shared.counter, &chat_of(&req), &texts);
    let hit = phase.hits(&req.model);

    // 3. The mock's own quota.
    let mut out_headers = HeaderMap::new();
    if let (true, Some(limit)) = (hit, phase.rate_limit) {
        let cost = input + req.max_tokens;
        let verdict = shared
            .quota
            .lock()
            .check(&req.model, limit, cost, shared.ms_since_start(now));
        match verdict {
            Verdict::Admitted(hints) => put_hints(&mut out_headers, &hints),
            Verdict::Refused {
                kind,
                retry_after_ms,
                hints,
            } => {
                shared.record(draft, Outcome::RateLimited, 429, 0);
                tracker.finish();
                put_hints(&mut out_headers, &hints);
                put(
                    &mut out_headers,
                    "retry-after",
                    retry_after_ms.div_ceil(1_000).to_string(),
                );
                let message = format!(
                    "This request would exceed the rate limit for {kind} on {} (pressure mock). \
                     Please try again in {} ms.",
                    req.model, retry_after_ms
                );
                return with_headers(
                    error(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", &message),
                    out_headers,
                );
            }
        }
    }

    // 4. The fault draw.
    let fault = if hit {
        shared.draw_fault(&phase)
    } else {
        Fault::None
    };
    match fault {
        Fault::Error => {
            shared.record(draft, Outcome::ServerError, 500, 0);
            tracker.finish();
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "api_error",
                "Internal server error",
            )
        }
        Fault::Overload => {
            shared.record(draft, Outcome::ServerError, 529, 0);
            tracker.finish();
            error(overloaded_status(), "overloaded_error", "Overloaded")
        }
        Fault::Hang => {
            let at = shared.record(draft, Outcome::Hung, 0, input);
            tracker.attach(at);
            shared.shutdown_signal().await;
            shutting_down()
        }
        Fault::Stall | Fault::None => {
            let stall = fault == Fault::Stall;
            let latency = shared.draw_latency(&phase.latency);
            let full = shared.responder.respond(&req.model, &req.messages);
            let limit = req.max_tokens.min(u64::from(phase.output_tokens));
            let cut = cut_text(&shared.counter, &req.model, &full, limit);
            let stop_reason = if cut.truncated && req.max_tokens < u64::from(phase.output_tokens) {
                "max_tokens"
            } else {
                "end_turn"
            };
            let outcome = if stall { Outcome::Stalled } else { Outcome::Ok };
            let stream = draft.stream;
            let at = shared.record(draft, outcome, 200, input);
            tracker.attach(at);
            let due = now + latency;
            let mut bill = OutputBill::new(shared.clone(), at, cut.tokens, due);
            let answer = Answer {
                id: format!("msg_mock_{}", at.seq()),
                model: req.model.clone(),
                text: cut.text,
                stop_reason,
                input,
                output: cut.tokens,
            };
            let first_at = now + latency.mul_f64(0.2);
            if stall {
                drop(bill);
                let pieces = if stream {
                    answer.stream_pieces(now, first_at, due, true)
                } else {
                    let body = answer.json();
                    let head = body.slice(..STALL_JSON_BYTES.min(body.len()));
                    [Piece {
                        at: first_at,
                        bytes: head,
                        bill: false,
                    }]
                    .into()
                };
                let plan = Plan {
                    pieces,
                    stall: true,
                    tracker,
                    bill: None,
                    shared: shared.clone(),
                };
                return streamed(out_headers, stream, plan);
            }
            if stream {
                let plan = Plan {
                    pieces: answer.stream_pieces(now, first_at, due, false),
                    stall: false,
                    tracker,
                    bill: Some(bill),
                    shared: shared.clone(),
                };
                return streamed(out_headers, true, plan);
            }
            tokio::select! {
                _ = tokio::time::sleep_until(due) => {}
                _ = shared.shutdown_signal() => return shutting_down(),
            }
            bill.bill_now();
            tracker.finish();
            out_headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            (StatusCode::OK, out_headers, answer.json()).into_response()
        }
    }
}

/// HTTP 529, Anthropic's "overloaded".
fn overloaded_status() -> StatusCode {
    StatusCode::from_u16(529).unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
}

/// The request, or the message of a 400 (worded like Anthropic's).
fn parse(body: &[u8]) -> Result<Request, String> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| format!("Invalid JSON in the request body: {e}"))?;
    let model = match v.get("model").and_then(Value::as_str) {
        Some(m) if !m.is_empty() => m.to_owned(),
        _ => return Err("model: Field required".into()),
    };
    let max_tokens = match v.get("max_tokens") {
        None | Some(Value::Null) => return Err("max_tokens: Field required".into()),
        Some(n) => match n.as_u64() {
            Some(n) if n >= 1 => n,
            _ => return Err("max_tokens: Input should be a valid integer greater than or equal to 1".into()),
        },
    };
    let turns = match v.get("messages").and_then(Value::as_array) {
        Some(t) if !t.is_empty() => t,
        Some(_) => return Err("messages: at least one message is required".into()),
        None => return Err("messages: Field required".into()),
    };
    let mut messages = Vec::with_capacity(turns.len() + 1);
    if let Some(system) = v.get("system").filter(|s| !s.is_null()) {
        messages.push(Message::new("system", text_of(system)));
    }
    for (i, t) in turns.iter().enumerate() {
        let role = t.get("role").and_then(Value::as_str).unwrap_or("");
        if !matches!(role, "user" | "assistant") {
            return Err(format!(
                "messages.{i}.role: Input should be 'user' or 'assistant'"
            ));
        }
        let content = t
            .get("content")
            .ok_or_else(|| format!("messages.{i}.content: Field required"))?;
        messages.push(Message::new(role, text_of(content)));
    }
    Ok(Request {
        model,
        max_tokens,
        stream: v.get("stream").and_then(Value::as_bool) == Some(true),
        messages,
    })
}

/// The text of a content (a string, or blocks: `text`, `tool_result`
/// contents and `tool_use` inputs, joined with newlines).
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| match b.get("type").and_then(Value::as_str) {
                Some("text") => b.get("text").and_then(Value::as_str).map(str::to_owned),
                Some("tool_result") => b.get("content").map(text_of),
                Some("tool_use") => b.get("input").map(Value::to_string),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The request as a chat request, for the shared token counting.
fn chat_of(req: &Request) -> pressure_llm::provider::ChatRequest {
    pressure_llm::provider::ChatRequest::new(req.model.clone(), req.messages.clone())
}

/// What an answer says.
#[derive(Debug)]
struct Answer {
    id: String,
    model: String,
    text: String,
    stop_reason: &'static str,
    input: u64,
    output: u64,
}

fn event(name: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

impl Answer {
    /// The non-streamed `message` body.
    fn json(&self) -> Bytes {
        let body = json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [{"type": "text", "text": self.text}],
            "stop_reason": self.stop_reason,
            "stop_sequence": null,
            "usage": {"input_tokens": self.input, "output_tokens": self.output},
        });
        Bytes::from(body.to_string())
    }

    /// The events of a stream; see the module docs. A stalling stream
    /// keeps the opening events and the first delta.
    fn stream_pieces(&self, now: Instant, first_at: Instant, due: Instant, stall: bool) -> VecDeque<Piece> {
        let piece = |at, bytes| Piece {
            at,
            bytes,
            bill: false,
        };
        let mut pieces = VecDeque::new();
        let start = json!({"type": "message_start", "message": {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": self.input, "output_tokens": 1},
        }});
        pieces.push_back(piece(now, event("message_start", &start)));
        let block =
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}});
        pieces.push_back(piece(now, event("content_block_start", &block)));
        pieces.push_back(piece(now, event("ping", &json!({"type": "ping"}))));
        let parts = split_even(&self.text, MAX_CONTENT_CHUNKS);
        let k = parts.len();
        let span = due.saturating_duration_since(first_at);
        for (j, part) in parts.into_iter().enumerate() {
            let at = if k > 1 {
                first_at + span.mul_f64(j as f64 / (k - 1) as f64)
            } else {
                first_at
            };
            let delta = json!({"type": "content_block_delta", "index": 0,
                               "delta": {"type": "text_delta", "text": part}});
            pieces.push_back(piece(at, event("content_block_delta", &delta)));
            if stall {
                return pieces;
            }
        }
        let stop = json!({"type": "content_block_stop", "index": 0});
        pieces.push_back(piece(due, event("content_block_stop", &stop)));
        let delta = json!({"type": "message_delta",
                           "delta": {"stop_reason": self.stop_reason, "stop_sequence": null},
                           "usage": {"output_tokens": self.output}});
        pieces.push_back(Piece {
            at: due,
            bytes: event("message_delta", &delta),
            bill: true,
        });
        pieces.push_back(piece(
            due,
            event("message_stop", &json!({"type": "message_stop"})),
        ));
        pieces
    }
}

/// An Anthropic error answer: `{"type":"error","error":{"type","message"}}`.
fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    (status, [(CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn with_headers(mut r: Response, headers: HeaderMap) -> Response {
    r.headers_mut().extend(headers);
    r
}

/// What a hanging or waiting handler answers when the mock shuts down.
fn shutting_down() -> Response {
    error(
        overloaded_status(),
        "overloaded_error",
        "The mock provider is shutting down.",
    )
}

/// The `anthropic-ratelimit-*` headers, with a `date` header of the same
/// clock (resets are times, which a client reads against `date`).
fn put_hints(headers: &mut HeaderMap, hints: &QuotaHints) {
    // An HTTP `date` is wall-clock time by definition; nothing is timed by it.
    #[allow(clippy::disallowed_methods)]
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    // `date` has whole seconds: resets count from the same truncated second.
    let date_s = now_ms / 1_000;
    put(headers, "date", http_date(date_s));
    let dims = [("requests", hints.requests), ("tokens", hints.tokens)];
    for (name, dim) in dims {
        let Some(d) = dim else { continue };
        let reset = rfc3339_ms(date_s * 1_000 + d.reset_ms);
        let (limit, remaining, reset_name) = match name {
            "requests" => (
                "anthropic-ratelimit-requests-limit",
                "anthropic-ratelimit-requests-remaining",
                "anthropic-ratelimit-requests-reset",
            ),
            _ => (
                "anthropic-ratelimit-tokens-limit",
                "anthropic-ratelimit-tokens-remaining",
                "anthropic-ratelimit-tokens-reset",
            ),
        };
        put(headers, limit, d.limit.to_string());
        put(headers, remaining, d.remaining.to_string());
        put(headers, reset_name, reset);
    }
}

/// (year, month, day) of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// An IMF-fixdate (`Wed, 21 Oct 2015 07:28:00 GMT`) of Unix seconds.
fn http_date(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = (secs / 86_400) as i64;
    let (y, m, d) = civil_from_days(days);
    let rem = secs % 86_400;
    format!(
        "{}, {d:02} {} {y} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[(m - 1) as usize],
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

/// An RFC 3339 UTC time with milliseconds (`2015-10-21T07:28:00.250Z`) of Unix milliseconds.
fn rfc3339_ms(ms: u64) -> String {
    let secs = ms / 1_000;
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60,
        ms % 1_000
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use pressure_llm::provider::ratelimit::{parse_http_date, parse_rfc3339};

    #[test]
    fn dates_read_back_with_the_clients_parsers() {
        assert_eq!(http_date(1_445_412_480), "Wed, 21 Oct 2015 07:28:00 GMT");
        assert_eq!(rfc3339_ms(1_445_412_480_250), "2015-10-21T07:28:00.250Z");
        for secs in [0u64, 951_782_400, 1_709_210_096, 4_102_444_799] {
            assert_eq!(parse_http_date(&http_date(secs)), Some(secs as f64), "{secs}");
            let back = parse_rfc3339(&rfc3339_ms(secs * 1_000 + 500)).unwrap();
            assert!((back - (secs as f64 + 0.5)).abs() < 1e-6, "{secs}");
        }
    }

    #[test]
    fn parse_refuses_what_anthropic_refuses() {
        let ok = br#"{"model":"claude-m","max_tokens":5,"system":[{"type":"text","text":"sys"}],
                     "messages":[{"role":"user","content":[{"type":"text","text":"hi"},
                     {"type":"tool_result","tool_use_id":"t","content":"42"}]}],"stream":true}"#;
        let r = parse(ok).unwrap();
        assert_eq!((r.model.as_str(), r.max_tokens, r.stream), ("claude-m", 5, true));
        assert_eq!(r.messages[0].role, "system");
        assert_eq!(r.messages[0].text(), "sys");
        assert_eq!(r.messages[1].text(), "hi\n42");
        for (body, needle) in [
            (&b"{"[..], "Invalid JSON"),
            (
                br#"{"max_tokens":5,"messages":[{"role":"user","content":"x"}]}"#,
                "model",
            ),
            (
                br#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#,
                "max_tokens: Field required",
            ),
            (
                br#"{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}"#,
                "max_tokens",
            ),
            (br#"{"model":"m","max_tokens":5,"messages":[]}"#, "at least one"),
            (
                br#"{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"x"}]}"#,
                "role",
            ),
        ] {
            let e = parse(body).unwrap_err();
            assert!(e.contains(needle), "{e}");
        }
    }
}
