//! The bytes of an answer: the OpenAI JSON body, the server-sent events of
//! a stream, and the timed body that plays them out.
//!
//! A body is a [`Plan`]: byte pieces each due at an instant. The body
//! sends each piece when it is due, bills the output when the last content
//! piece goes out, and marks the request complete after its last piece. A
//! stalling body sends its pieces and then nothing until shutdown. Dropping
//! the body early (the client went away) leaves the billing to
//! [`OutputBill`]'s detached task and marks the arrival `client_gone`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use futures::Stream;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::state::{OutputBill, Shared, Tracker};

/// The `usage` object of an answer.
pub(crate) fn usage(input: u64, output: u64) -> Value {
    json!({
        "prompt_tokens": input,
        "completion_tokens": output,
        "total_tokens": input + output,
    })
}

/// A non-streamed `chat.completion`.
pub(crate) fn completion(
    id: &str,
    created: u64,
    model: &str,
    text: &str,
    finish: &str,
    input: u64,
    output: u64,
) -> Bytes {
    let body = json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": finish,
        }],
        "usage": usage(input, output),
    });
    Bytes::from(body.to_string())
}

/// One `data:` event of a `chat.completion.chunk`.
pub(crate) fn chunk(id: &str, created: u64, model: &str, delta: Value, finish: Option<&str>) -> Bytes {
    event(&json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }))
}

/// The final usage chunk (empty `choices`), sent when `include_usage` was asked.
pub(crate) fn usage_chunk(id: &str, created: u64, model: &str, input: u64, output: u64) -> Bytes {
    event(&json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage(input, output),
    }))
}

/// The stream's last event.
pub(crate) const DONE: &[u8] = b"data: [DONE]\n\n";

fn event(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

/// One piece of a body.
#[derive(Debug)]
pub(crate) struct Piece {
    /// When it is sent.
    pub(crate) at: Instant,
    /// The bytes.
    pub(crate) bytes: Bytes,
    /// Bill the output once this piece is sent (the end of generation).
    pub(crate) bill: bool,
}

/// A timed body; see the module docs.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) pieces: VecDeque<Piece>,
    /// Send nothing after the pieces until shutdown.
    pub(crate) stall: bool,
    pub(crate) tracker: Tracker,
    pub(crate) bill: Option<OutputBill>,
    pub(crate) shared: Arc<Shared>,
}

impl Plan {
    /// The body as a stream of byte chunks.
    pub(crate) fn into_stream(self) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
        futures::stream::unfold(self, |mut plan| async move {
            let Some(piece) = plan.pieces.pop_front() else {
                if plan.stall {
                    plan.shared.shutdown_signal().await;
                }
                return None;
            };
            if piece.at > Instant::now() {
                tokio::select! {
                    _ = tokio::time::sleep_until(piece.at) => {}
                    _ = plan.shared.shutdown_signal() => return None,
                }
            }
            if piece.bill {
                if let Some(bill) = plan.bill.as_mut() {
                    bill.bill_now();
                }
            }
            if plan.pieces.is_empty() && !plan.stall {
                plan.tracker.finish();
            }
            Some((Ok(piece.bytes), plan))
        })
    }
}
