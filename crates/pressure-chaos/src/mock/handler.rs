//! `POST /v1/chat/completions`: one request, decided in a fixed order.
//!
//! 1. Parse (malformed JSON, no `model`, no `messages` → 400
//!    `invalid_request_error`, not billed).
//! 2. A message containing [`BAD_REQUEST_MARKER`] → 400, not billed.
//! 3. The phase in force; if its faults hit the model and it has a
//!    `rateLimit`, the model's quota ([`super::quota`]): over it → 429 with
//!    `retry-after`, `retry-after-ms` and `x-ratelimit-*`, not billed and not
//!    counted against the quota.
//! 4. One uniform draw: `errorShare` → 500 at once (not billed);
//!    `overloadShare` → 503 at once (not billed); `hangShare` → nothing is
//!    ever sent (input billed); `stallShare` → the
//!    head and the first chunk, then silence (input billed, the full output
//!    billed when generation would have finished); else a normal answer
//!    after the latency draw (a stream spreads it over its chunks, the first
//!    content chunk after 20 % of it).
//!
//! Input tokens are counted like the provider counts them
//! ([`TokenCounter::count_chat`]); the output is the responder's text cut
//! to `min(outputTokens, max_tokens)` tokens.
//!
//! `POST /v1/messages` (Anthropic's wire format) follows the same order in
//! `anthropic.rs`, reusing the helpers here.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use pressure_llm::provider::ChatRequest;
use pressure_llm::tokens::{ChatMessage, TokenCounter};
use serde_json::{json, Value};
use tokio::time::Instant;

use super::behaviour::Phase;
use super::quota::{go_duration, QuotaHints, Verdict};
use super::record::{Outcome, BAD_REQUEST_MARKER};
use super::sse::{self, Piece, Plan};
use super::state::{Draft, Fault, OutputBill, Shared, Tracker};

/// At most this many content chunks in a stream.
pub(super) const MAX_CONTENT_CHUNKS: usize = 8;
/// A stalled JSON answer sends this many bytes of its body.
pub(super) const STALL_JSON_BYTES: usize = 16;
/// The path of the chat-completions endpoint (as recorded in arrivals).
pub(super) const CHAT_COMPLETIONS: &str = "/v1/chat/completions";

/// The chat-completions endpoint.
pub(crate) async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let now = Instant::now();
    let mut tracker = Tracker::new(shared.clone());
    let phase = shared.phase_at(now);
    let mut draft = Draft::arriving(now, CHAT_COMPLETIONS, &headers, &phase.name);

    // 1. Parse.
    let req = match parse(&body) {
        Ok(req) => req,
        Err(message) => {
            draft.model_of_invalid(&body);
            shared.record(draft, Outcome::BadRequest, 400, 0);
            tracker.finish();
            return invalid_request(&message);
        }
    };
    draft.model = req.model.clone();
    draft.stream = req.stream == Some(true);
    let texts: Vec<String> = req.messages.iter().map(|m| m.text()).collect();

    // 2. The refused-request marker.
    if texts.iter().any(|t| t.contains(BAD_REQUEST_MARKER)) {
        shared.record(draft, Outcome::BadRequest, 400, 0);
        tracker.finish();
        return invalid_request("The request was refused by the mock (bad-request marker).");
    }

    let input = count_input(&shared.counter, &req, &texts);
    let max_out = req.max_output_tokens().map(u64::from);
    let hit = phase.hits(&req.model);

    // 3. The mock's own quota.
    let cost = input + max_out.unwrap_or(u64::from(phase.output_tokens));
    let mut quota_headers = match quota(&shared, &phase, hit, &req.model, cost, now) {
        Ok(hints) => hints,
        Err(refused) => {
            shared.record(draft, Outcome::RateLimited, 429, 0);
            tracker.finish();
            return *refused;
        }
    };

    // 4. The fault draw.
    let fault = if hit {
        shared.draw_fault(&phase)
    } else {
        Fault::None
    };
    match fault {
        Fault::Error | Fault::Overload | Fault::Hang => {
            failed(&shared, draft, &mut tracker, fault, input).await
        }
        Fault::Stall | Fault::None => {
            let stall = fault == Fault::Stall;
            let latency = shared.draw_latency(&phase.latency);
            let full = shared.responder.respond(&req.model, &req.messages);
            let limit = max_out.map_or(u64::from(phase.output_tokens), |m| {
                m.min(u64::from(phase.output_tokens))
            });
            let cut = cut_text(&shared.counter, &req.model, &full, limit);
            let finish = if cut.truncated && max_out.is_some_and(|m| m < u64::from(phase.output_tokens)) {
                "length"
            } else {
                "stop"
            };
            let outcome = if stall { Outcome::Stalled } else { Outcome::Ok };
            let stream = draft.stream;
            let at = shared.record(draft, outcome, 200, input);
            tracker.attach(at);
            let due = now + latency;
            let mut bill = OutputBill::new(shared.clone(), at, cut.tokens, due);
            let answer = Answer {
                id: format!("chatcmpl-mock-{}", at.seq()),
                created: shared.ms_since_start(now) / 1_000,
                model: req.model.clone(),
                text: cut.text,
                finish,
                input,
                output: cut.tokens,
            };
            let include_usage = req
                .stream_options
                .as_ref()
                .and_then(|o| o.include_usage)
                .unwrap_or(false);
            let first_at = now + latency.mul_f64(0.2);

            if stall {
                // Generation goes on without anyone listening: billed when it would have finished.
                drop(bill);
                let pieces = if stream {
                    answer.stream_pieces(now, first_at, due, include_usage, true)
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
                return streamed(quota_headers, stream, plan);
            }
            if stream {
                let plan = Plan {
                    pieces: answer.stream_pieces(now, first_at, due, include_usage, false),
                    stall: false,
                    tracker,
                    bill: Some(bill),
                    shared: shared.clone(),
                };
                return streamed(quota_headers, true, plan);
            }
            tokio::select! {
                _ = tokio::time::sleep_until(due) => {}
                _ = shared.shutdown_signal() => return shutting_down(),
            }
            bill.bill_now();
            tracker.finish();
            quota_headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            (StatusCode::OK, quota_headers, answer.json()).into_response()
        }
    }
}

/// The mock's own quota for `cost` tokens of `model`, when the phase's
/// rate limit hits it: the hint headers to answer with, or the 429 in
/// OpenAI's shape.
pub(super) fn quota(
    shared: &Shared,
    phase: &Phase,
    hit: bool,
    model: &str,
    cost: u64,
    now: Instant,
) -> Result<HeaderMap, Box<Response>> {
    let mut hints_headers = HeaderMap::new();
    if let (true, Some(limit)) = (hit, phase.rate_limit) {
        let verdict = shared
            .quota
            .lock()
            .check(model, limit, cost, shared.ms_since_start(now));
        match verdict {
            Verdict::Admitted(hints) => put_hints(&mut hints_headers, &hints),
            Verdict::Refused {
                kind,
                retry_after_ms,
                hints,
            } => return Err(Box::new(rate_limited(model, kind, retry_after_ms, &hints, cost))),
        }
    }
    Ok(hints_headers)
}

/// The answer of a request that drew a failing fault, in OpenAI's shape: a
/// 500 ([`Fault::Error`]), a 503 ([`Fault::Overload`]), or, for a hang, no
/// answer until the mock shuts down (dropped when the client goes away,
/// which the tracker marks).
pub(super) async fn failed(
    shared: &Shared,
    draft: Draft,
    tracker: &mut Tracker,
    fault: Fault,
    input: u64,
) -> Response {
    match fault {
        Fault::Error => {
            shared.record(draft, Outcome::ServerError, 500, 0);
            tracker.finish();
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "The server had an error while processing your request. Sorry about that!",
                "server_error",
            )
        }
        Fault::Overload => {
            shared.record(draft, Outcome::ServerError, 503, 0);
            tracker.finish();
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "The engine is currently overloaded, please try again later.",
                "server_error",
            )
        }
        _ => {
            let at = shared.record(draft, Outcome::Hung, 0, input);
            tracker.attach(at);
            shared.shutdown_signal().await;
            shutting_down()
        }
    }
}

/// A request header as text, when present and visible ASCII.
pub(super) fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim)
}

/// The request, or the message of a 400.
fn parse(body: &[u8]) -> Result<ChatRequest, String> {
    let req: ChatRequest = serde_json::from_slice(body)
        .map_err(|e| format!("We could not parse the JSON body of your request: {e}"))?;
    if req.model.is_empty() {
        return Err("you must provide a model parameter".into());
    }
    if req.messages.is_empty() {
        return Err("'messages' must contain at least one message".into());
    }
    Ok(req)
}

/// Prompt tokens as the provider counts them (OpenAI's chat framing).
pub(super) fn count_input(counter: &TokenCounter, req: &ChatRequest, texts: &[String]) -> u64 {
    let msgs: Vec<ChatMessage<'_>> = req
        .messages
        .iter()
        .zip(texts)
        .map(|(m, text)| {
            let msg = ChatMessage::new(&m.role, text);
            match m.extra.get("name").and_then(Value::as_str) {
                Some(name) => msg.with_name(name),
                None => msg,
            }
        })
        .collect();
    counter.count_chat(&req.model, &msgs).unwrap_or_else(|_| {
        // No tokenizer: about four characters per token, plus the framing.
        texts.iter().map(|t| t.len() as u64 / 4 + 4).sum::<u64>() + 3
    })
}

/// The responder's text cut to a token budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Cut {
    pub(super) text: String,
    pub(super) tokens: u64,
    pub(super) truncated: bool,
}

/// Cuts `text` to at most `limit` tokens of `model`, at word boundaries.
///
/// The tokenizers split text into words (with their leading space) before
/// merging, and never merge across words, so the sum of per-word counts is
/// the count of the text.
pub(super) fn cut_text(counter: &TokenCounter, model: &str, text: &str, limit: u64) -> Cut {
    let mut bounds: Vec<usize> = Vec::new();
    let mut prev_space = true;
    for (i, c) in text.char_indices() {
        let space = c.is_whitespace();
        if space && !prev_space && i > 0 {
            bounds.push(i);
        }
        prev_space = space;
    }
    bounds.push(text.len());
    let mut start = 0;
    let mut tokens = 0u64;
    for end in bounds {
        let piece = &text[start..end];
        let n = counter
            .count_text(model, piece)
            .unwrap_or_else(|_| (piece.len() as u64).div_ceil(4));
        if tokens + n > limit {
            // Fill the budget with the longest prefix of the word that fits.
            let mut end = start;
            let mut used = tokens;
            let ends = piece.char_indices().skip(1).map(|(j, _)| j);
            for j in ends {
                let prefix = &piece[..j];
                let m = counter
                    .count_text(model, prefix)
                    .unwrap_or_else(|_| (prefix.len() as u64).div_ceil(4));
                if tokens + m > limit {
                    break;
                }
                (end, used) = (start + j, tokens + m);
            }
            return Cut {
                text: text[..end].to_owned(),
                tokens: used,
                truncated: true,
            };
        }
        tokens += n;
        start = end;
    }
    Cut {
        text: text.to_owned(),
        tokens,
        truncated: false,
    }
}

/// What an answer says.
#[derive(Debug)]
struct Answer {
    id: String,
    created: u64,
    model: String,
    text: String,
    finish: &'static str,
    input: u64,
    output: u64,
}

impl Answer {
    fn json(&self) -> Bytes {
        sse::completion(
            &self.id,
            self.created,
            &self.model,
            &self.text,
            self.finish,
            self.input,
            self.output,
        )
    }

    /// The events of a stream: the role chunk at once, content from
    /// `first_at` to `due`, then finish, usage and `[DONE]` at `due`. A
    /// stalling stream keeps only the role chunk and the first content chunk.
    fn stream_pieces(
        &self,
        now: Instant,
        first_at: Instant,
        due: Instant,
        include_usage: bool,
        stall: bool,
    ) -> std::collections::VecDeque<Piece> {
        let (id, created, model) = (self.id.as_str(), self.created, self.model.as_str());
        let mut pieces = std::collections::VecDeque::new();
        pieces.push_back(Piece {
            at: now,
            bytes: sse::chunk(
                id,
                created,
                model,
                json!({"role": "assistant", "content": ""}),
                None,
            ),
            bill: false,
        });
        let parts = split_even(&self.text, MAX_CONTENT_CHUNKS);
        let k = parts.len();
        let span = due.saturating_duration_since(first_at);
        for (j, part) in parts.into_iter().enumerate() {
            let at = if k > 1 {
                first_at + span.mul_f64(j as f64 / (k - 1) as f64)
            } else {
                first_at
            };
            pieces.push_back(Piece {
                at,
                bytes: sse::chunk(id, created, model, json!({ "content": part }), None),
                bill: false,
            });
            if stall {
                return pieces;
            }
        }
        pieces.push_back(Piece {
            at: due,
            bytes: sse::chunk(id, created, model, json!({}), Some(self.finish)),
            bill: true,
        });
        if include_usage {
            pieces.push_back(Piece {
                at: due,
                bytes: sse::usage_chunk(id, created, model, self.input, self.output),
                bill: false,
            });
        }
        pieces.push_back(Piece {
            at: due,
            bytes: Bytes::from_static(sse::DONE),
            bill: false,
        });
        pieces
    }
}

/// Splits `text` at word boundaries into at most `n` parts of similar size.
pub(super) fn split_even(text: &str, n: usize) -> Vec<String> {
    let mut starts: Vec<usize> = vec![0];
    let mut prev_space = true;
    for (i, c) in text.char_indices() {
        let space = c.is_whitespace();
        if space && !prev_space && i > 0 {
            starts.push(i);
        }
        prev_space = space;
    }
    if text.is_empty() {
        return Vec::new();
    }
    let words = starts.len();
    let parts = words.min(n).max(1);
    (0..parts)
        .map(|p| {
            let from = starts[p * words / parts];
            let to = if p + 1 == parts {
                text.len()
            } else {
                starts[(p + 1) * words / parts]
            };
            text[from..to].to_owned()
        })
        .collect()
}

/// A response whose body is played out by `plan`.
pub(super) fn streamed(mut headers: HeaderMap, sse: bool, plan: Plan) -> Response {
    let ct = if sse {
        "text/event-stream"
    } else {
        "application/json"
    };
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(ct));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    (StatusCode::OK, headers, Body::from_stream(plan.into_stream())).into_response()
}

/// An OpenAI-style error answer.
pub(super) fn error(status: StatusCode, message: &str, kind: &str) -> Response {
    let body = json!({"error": {"message": message, "type": kind, "param": null, "code": null}});
    (status, [(CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

pub(super) fn invalid_request(message: &str) -> Response {
    error(StatusCode::BAD_REQUEST, message, "invalid_request_error")
}

/// What a hanging or waiting handler answers when the mock shuts down.
pub(super) fn shutting_down() -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "The mock provider is shutting down.",
        "server_error",
    )
}

/// Sets `name: value`.
pub(super) fn put(headers: &mut HeaderMap, name: &'static str, value: String) {
    if let Ok(v) = HeaderValue::try_from(value) {
        headers.insert(HeaderName::from_static(name), v);
    }
}

/// The `x-ratelimit-*` headers, OpenAI style.
pub(super) fn put_hints(headers: &mut HeaderMap, hints: &QuotaHints) {
    if let Some(r) = hints.requests {
        put(headers, "x-ratelimit-limit-requests", r.limit.to_string());
        put(headers, "x-ratelimit-remaining-requests", r.remaining.to_string());
        put(headers, "x-ratelimit-reset-requests", go_duration(r.reset_ms));
    }
    if let Some(t) = hints.tokens {
        put(headers, "x-ratelimit-limit-tokens", t.limit.to_string());
        put(headers, "x-ratelimit-remaining-tokens", t.remaining.to_string());
        put(headers, "x-ratelimit-reset-tokens", go_duration(t.reset_ms));
    }
}

/// The 429 of the mock's quota, with OpenAI's body and headers.
pub(super) fn rate_limited(
    model: &str,
    kind: &'static str,
    retry_after_ms: u64,
    hints: &QuotaHints,
    cost: u64,
) -> Response {
    let (limit, used, requested) = match (kind, hints.requests, hints.tokens) {
        ("requests", Some(r), _) => (r.limit, r.limit - r.remaining, 1),
        (_, _, Some(t)) => (t.limit, t.limit - t.remaining, cost),
        _ => (0, 0, 0),
    };
    let message = format!(
        "Rate limit reached for {kind} on {model} (pressure mock): Limit {limit}, Used {used}, \
         Requested {requested}. Please try again in {}.",
        go_duration(retry_after_ms)
    );
    let body = json!({"error": {
        "message": message,
        "type": kind,
        "param": null,
        "code": "rate_limit_exceeded",
    }});
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    put(
        &mut headers,
        "retry-after",
        retry_after_ms.div_ceil(1_000).to_string(),
    );
    put(&mut headers, "retry-after-ms", retry_after_ms.to_string());
    put_hints(&mut headers, hints);
    (StatusCode::TOO_MANY_REQUESTS, headers, body.to_string()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_text_respects_the_budget_and_counts_like_the_tokenizer() {
        let counter = TokenCounter::new();
        let text = "This is gpt-4o, the pressure mock provider, answering. The quick brown fox.";
        let whole = counter.count_text("gpt-4o", text).unwrap();
        let all = cut_text(&counter, "gpt-4o", text, 1_000);
        assert_eq!((all.tokens, all.truncated), (whole, false));
        for limit in 1..whole {
            let cut = cut_text(&counter, "gpt-4o", text, limit);
            assert!(cut.truncated && !cut.text.is_empty() && text.starts_with(&cut.text));
            // The budget is filled (a word may be cut inside).
            assert_eq!(cut.tokens, limit, "{limit}: {:?}", cut.text);
            assert_eq!(counter.count_text("gpt-4o", &cut.text).unwrap(), cut.tokens);
        }
        assert_eq!(cut_text(&counter, "gpt-4o", text, 0).tokens, 0);
    }

    #[test]
    fn split_even_keeps_every_byte() {
        let text = "one two three four five six seven eight nine ten";
        let parts = split_even(text, 4);
        assert_eq!(parts.len(), 4);
        assert_eq!(parts.concat(), text);
        assert_eq!(split_even("single", 8), vec!["single".to_owned()]);
        assert!(split_even("", 8).is_empty());
    }

    #[test]
    fn parse_refuses_what_a_provider_refuses() {
        assert!(parse(b"{").is_err());
        assert!(parse(br#"{"messages":[{"role":"user","content":"hi"}]}"#).is_err());
        assert!(parse(br#"{"model":"m"}"#).is_err());
        assert!(parse(br#"{"model":"m","messages":[]}"#).is_err());
        let req =
            parse(br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":7}"#)
                .unwrap();
        assert_eq!(req.max_output_tokens(), Some(7));
    }
}
