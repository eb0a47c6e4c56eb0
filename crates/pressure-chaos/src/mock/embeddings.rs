//! `POST /v1/embeddings`: deterministic vectors, billed and recorded like a
//! chat call, under the same scenarios.
//!
//! Decided in the chat endpoint's order:
//!
//! 1. Parse and check ([`EmbeddingRequest::validate`]: no `model`, an empty
//!    or malformed `input`, `dimensions` < 1, an unknown `encoding_format`)
//!    → 400 `invalid_request_error`, not billed; a text input containing
//!    [`BAD_REQUEST_MARKER`] → 400, not billed.
//! 2. The phase's quota, costing the input tokens (no output): over it →
//!    429 with `retry-after`, not billed.
//! 3. The fault draw: `errorShare` → 500 (not billed); `hangShare` → no
//!    answer (input billed); `stallShare` → the head and the first bytes of
//!    the body, then silence (input billed); else the answer after the
//!    latency draw (input billed).
//!
//! The vector of an input ([`embedding_vector`]) is a pure function of the
//! model, the input (its text, or its token ids) and the length: seeded by
//! the 64-bit FNV-1a hash of those, drawn with SplitMix64 (both fixed
//! algorithms, so vectors never change between runs or versions), scaled
//! to unit length. The length is the request's `dimensions`, else
//! [`default_dimensions`] of the model. `encoding_format: "base64"` answers
//! each vector as base64 of its little-endian `f32`s, like OpenAI.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use pressure_llm::provider::{EmbeddingRequest, InputItem};
use serde_json::{json, Value};
use tokio::time::Instant;

use super::handler::{failed, invalid_request, quota, shutting_down};
use super::record::{Outcome, BAD_REQUEST_MARKER};
use super::sse::{Piece, Plan};
use super::state::{Draft, Fault, Shared, Tracker};

/// The endpoint, as arrivals record it.
pub(super) const EMBEDDINGS: &str = "/v1/embeddings";

/// A stalled answer sends this many bytes of its body.
const STALL_BYTES: usize = 16;

/// The vector length of `model` when the request gives no `dimensions`:
/// 3072 for a model whose name holds `large` (like
/// `text-embedding-3-large`), else 1536 (`text-embedding-3-small`).
pub fn default_dimensions(model: &str) -> u32 {
    if model.contains("large") {
        3072
    } else {
        1536
    }
}

/// 64-bit FNV-1a.
fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(seed, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// The next SplitMix64 output.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The mock's vector of one input: deterministic, of length `dims`, unit
/// length (see the module docs).
pub fn embedding_vector(model: &str, item: InputItem<'_>, dims: u32) -> Vec<f32> {
    let mut h = fnv1a(0xcbf2_9ce4_8422_2325, model.as_bytes());
    h = fnv1a(h, &dims.to_le_bytes());
    h = match item {
        InputItem::Text(t) => fnv1a(fnv1a(h, b"t"), t.as_bytes()),
        InputItem::Tokens(ids) => ids
            .iter()
            .fold(fnv1a(h, b"i"), |h, id| fnv1a(h, &id.to_le_bytes())),
    };
    let mut state = h;
    let raw: Vec<f64> = (0..dims)
        .map(|_| {
            // 53 random bits as a float in [-1, 1).
            #[allow(clippy::cast_precision_loss)]
            let unit = (splitmix(&mut state) >> 11) as f64 / (1u64 << 53) as f64;
            unit * 2.0 - 1.0
        })
        .collect();
    let norm = raw.iter().map(|x| x * x).sum::<f64>().sqrt();
    #[allow(clippy::cast_possible_truncation)]
    raw.iter()
        .map(|x| if norm > 0.0 { (x / norm) as f32 } else { 0.0 })
        .collect()
}

/// The `embedding` field: floats, or base64 of little-endian `f32`s.
fn encode(vector: &[f32], base64: bool) -> Value {
    if base64 {
        let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
        Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
    } else {
        json!(vector)
    }
}

/// The embeddings endpoint.
pub(crate) async fn embeddings(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let now = Instant::now();
    let mut tracker = Tracker::new(shared.clone());
    let phase = shared.phase_at(now);
    let mut draft = Draft::arriving(now, EMBEDDINGS, &headers, &phase.name);

    // 1. Parse and check.
    let parsed = serde_json::from_slice::<EmbeddingRequest>(&body)
        .map_err(|e| format!("We could not parse the JSON body of your request: {e}"))
        .and_then(|r| r.validate().map(|()| r).map_err(|e| e.message));
    let req = match parsed {
        Ok(req) => req,
        Err(message) => {
            draft.model_of_invalid(&body);
            shared.record(draft, Outcome::BadRequest, 400, 0);
            tracker.finish();
            return invalid_request(&message);
        }
    };
    draft.model = req.model.clone();
    let items = req.input.items();
    if items
        .iter()
        .any(|i| matches!(i, InputItem::Text(t) if t.contains(BAD_REQUEST_MARKER)))
    {
        shared.record(draft, Outcome::BadRequest, 400, 0);
        tracker.finish();
        return invalid_request("The request was refused by the mock (bad-request marker).");
    }
    let input: u64 = items
        .iter()
        .map(|i| match i {
            InputItem::Text(t) => shared
                .counter
                .count_text(&req.model, t)
                .unwrap_or_else(|_| (t.len() as u64).div_ceil(4)),
            InputItem::Tokens(ids) => ids.len() as u64,
        })
        .sum();
    let hit = phase.hits(&req.model);

    // 2. The mock's own quota, on the input tokens.
    let mut out_headers = match quota(&shared, &phase, hit, &req.model, input, now) {
        Ok(hints) => hints,
        Err(refused) => {
            shared.record(draft, Outcome::RateLimited, 429, 0);
            tracker.finish();
            return *refused;
        }
    };

    // 3. The fault draw.
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
            let dims = req.dimensions.unwrap_or_else(|| default_dimensions(&req.model));
            let base64 = req.encoding_format.as_deref() == Some("base64");
            let data: Vec<Value> = items
                .iter()
                .enumerate()
                .map(|(index, item)| {
                    json!({
                        "object": "embedding",
                        "index": index,
                        "embedding": encode(&embedding_vector(&req.model, *item, dims), base64),
                    })
                })
                .collect();
            let answer = Bytes::from(
                json!({
                    "object": "list",
                    "data": data,
                    "model": req.model,
                    "usage": { "prompt_tokens": input, "total_tokens": input },
                })
                .to_string(),
            );
            let latency = shared.draw_latency(&phase.latency);
            let stall = fault == Fault::Stall;
            let outcome = if stall { Outcome::Stalled } else { Outcome::Ok };
            let at = shared.record(draft, outcome, 200, input);
            tracker.attach(at);
            if stall {
                let plan = Plan {
                    pieces: [Piece {
                        at: now + latency.mul_f64(0.2),
                        bytes: answer.slice(..STALL_BYTES.min(answer.len())),
                        bill: false,
                    }]
                    .into(),
                    stall: true,
                    tracker,
                    bill: None,
                    shared: shared.clone(),
                };
                out_headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                out_headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
                return (StatusCode::OK, out_headers, Body::from_stream(plan.into_stream())).into_response();
            }
            tokio::select! {
                _ = tokio::time::sleep_until(now + latency) => {}
                _ = shared.shutdown_signal() => return shutting_down(),
            }
            tracker.finish();
            out_headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            (StatusCode::OK, out_headers, answer).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn length(v: &[f32]) -> f64 {
        v.iter()
            .map(|x| f64::from(*x) * f64::from(*x))
            .sum::<f64>()
            .sqrt()
    }

    #[test]
    fn vectors_are_deterministic_unit_length_and_input_dependent() {
        let a = embedding_vector("m", InputItem::Text("hello"), 64);
        assert_eq!(a, embedding_vector("m", InputItem::Text("hello"), 64));
        assert_eq!(a.len(), 64);
        assert!((length(&a) - 1.0).abs() < 1e-5, "{}", length(&a));
        assert_ne!(a, embedding_vector("m", InputItem::Text("hellp"), 64));
        assert_ne!(a, embedding_vector("other", InputItem::Text("hello"), 64));
        let t = embedding_vector("m", InputItem::Tokens(&[1, 2, 3]), 8);
        assert_eq!(t.len(), 8);
        assert_ne!(t, embedding_vector("m", InputItem::Tokens(&[1, 2, 4]), 8));
        assert_eq!(default_dimensions("text-embedding-3-large"), 3072);
        assert_eq!(default_dimensions("text-embedding-3-small"), 1536);
    }

    #[test]
    fn base64_is_little_endian_f32() {
        let Value::String(s) = encode(&[1.0, -2.0], true) else {
            panic!("a string");
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(s)
            .expect("base64");
        assert_eq!(bytes, [1.0f32.to_le_bytes(), (-2.0f32).to_le_bytes()].concat());
        assert_eq!(encode(&[0.5], false), json!([0.5]));
    }
}
