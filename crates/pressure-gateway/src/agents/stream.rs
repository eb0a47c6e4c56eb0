//! A streamed answer in the agent's dialect, as server-sent events.
//!
//! The pipeline's stream is committed at its first output (a failure
//! before it fell back or was refused as a whole); its first chunk says
//! which way it is written:
//!
//! * a level of the agent's own wire: the provider's events verbatim
//!   (each chunk carries one in [`NATIVE_FIELD`]; the chat translation
//!   beside it is the pipeline's, not the client's);
//! * any other level: the chat chunks through the dialect's encoder
//!   (Anthropic's `message_start` … `message_stop`, or the Responses
//!   events), with `x-pressure-dropped` naming what was left out.
//!
//! A failure after the head is the dialect's error event and the end (the
//! provider's own one, when its events are passed on); a
//! pause of [`KEEP_ALIVE`] between events writes a keep-alive (`ping`, or
//! an SSE comment), so an idle proxy does not cut a long thinking pause.
//! (The pipeline's read timeout bounds the pause between the provider's
//! chunks, not the answer.) A client that goes away drops the stream: the
//! pipeline settles the attempt to what was generated.

use super::dialect::Dialect;
use super::dropped_header;
use crate::backend::AnyBackend;
use crate::openai::{set_deployment, DEGRADATION_HEADER};
use crate::rejection::Rejection;
use axum::body::Body;
use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use http::{HeaderValue, Response, StatusCode};
use pressure_llm::pipeline::{AnswerStream, LlmError};
use pressure_llm::provider::{ChatChunk, NativeRequest, NATIVE_FIELD};
use serde_json::{Map, Value};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

/// The longest silence on a stream before a keep-alive is written.
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// The most bytes gathered into one frame from events that are ready
/// together.
const BATCH_BYTES: usize = 64 * 1024;

type Item = Option<Result<ChatChunk, LlmError>>;

/// Where one stream is.
struct State<D: Dialect> {
    stream: AnswerStream<AnyBackend>,
    /// The dialect's encoder, for a translated stream only (a native one
    /// passes the provider's events on).
    encoder: Option<D::Encoder>,
    /// The item read before the head, not yet written.
    pending: Option<Item>,
    /// The provider's own failure event was passed on: the stream's error
    /// that follows says nothing more.
    failed_natively: bool,
    /// The data of the first and the last provider event passed on (what a
    /// failure of ours continues from: the response's id, its numbering).
    first_native: Option<String>,
    last_native: Option<String>,
    ended: bool,
}

impl<D: Dialect> State<D> {
    /// The next bytes to write, `None` at the end: every item the stream
    /// has ready, written as one frame (a burst of provider events is one
    /// write to the client, not one per event).
    async fn next_bytes(&mut self) -> Option<Bytes> {
        let mut out = Vec::new();
        loop {
            if self.ended {
                break;
            }
            let item = match self.pending.take() {
                Some(item) => item,
                None if !out.is_empty() => match self.stream.next().now_or_never() {
                    Some(item) => item,
                    None => break,
                },
                None => match tokio::time::timeout(KEEP_ALIVE, self.stream.next()).await {
                    Ok(item) => item,
                    Err(_) => {
                        D::keep_alive(&mut out);
                        break;
                    }
                },
            };
            self.write(item, &mut out);
            if out.len() >= BATCH_BYTES {
                break;
            }
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }

    /// Writes one item of the stream to `out`.
    fn write(&mut self, item: Item, out: &mut Vec<u8>) {
        match (item, &mut self.encoder) {
            (Some(Ok(mut chunk)), None) => {
                if let Some(event) = chunk.extra.remove(NATIVE_FIELD) {
                    self.failed_natively |= is_failure(&event);
                    let data = write_native(event, out);
                    if self.first_native.is_none() {
                        self.first_native = data;
                    } else {
                        self.last_native = data;
                    }
                }
            }
            (Some(Ok(chunk)), Some(encoder)) => D::chunk(encoder, &chunk, out),
            (Some(Err(_)), _) if self.failed_natively => self.ended = true,
            (Some(Err(e)), encoder) => {
                let rejection = Rejection::Llm(e);
                match encoder {
                    Some(encoder) => D::fail(encoder, &rejection, out),
                    None => {
                        let first = self.first_native.as_deref();
                        let seen = (first, self.last_native.as_deref().or(first));
                        D::fail_native(&rejection, seen, out);
                    }
                }
                self.ended = true;
            }
            (None, encoder) => {
                if let Some(encoder) = encoder {
                    D::finish(encoder, out);
                }
                self.ended = true;
            }
        }
    }
}

/// Whether a provider event ends its stream as a failure (Anthropic's
/// `error`, the Responses API's `error` and `response.failed`).
fn is_failure(event: &Value) -> bool {
    matches!(
        event.get("event").and_then(Value::as_str),
        Some("error" | "response.failed")
    )
}

/// One provider event as it came: its `event:` name, if any, and its data
/// (one `data:` line per line); returns the data, moved out of the event.
fn write_native(event: Value, out: &mut Vec<u8>) -> Option<String> {
    let Value::Object(mut event) = event else {
        return None;
    };
    if let Some(name) = event.get("event").and_then(Value::as_str) {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    let data = match event.remove("data") {
        Some(Value::String(data)) => data,
        _ => String::new(),
    };
    for line in data.split('\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
    Some(data)
}

/// The streamed response of a request for `model`.
pub(super) async fn respond<D: Dialect>(
    mut stream: AnswerStream<AnyBackend>,
    model: &str,
    native: Option<Arc<NativeRequest>>,
    dropped: &[String],
    request_id: &str,
) -> Response<Body> {
    // The prompt as the attempt counted it (no second count).
    let input_estimate = stream.reserved_input_tokens().unwrap_or(0);
    // Ready at once: the pipeline held the stream's first output back.
    let first = stream.next().await;
    let is_native = matches!(&first, Some(Ok(c)) if c.extra.contains_key(NATIVE_FIELD));
    let status = stream.http_status();
    let degradation = stream.degradation().as_str();
    let deployment = stream.model().map(str::to_owned);
    let encoder = (!is_native).then(|| {
        let empty = Map::new();
        let request = native.as_deref().map_or(&empty, |n| &n.body);
        D::encoder(model, request, input_estimate)
    });
    let state = State::<D> {
        encoder,
        stream,
        pending: Some(first),
        failed_natively: false,
        first_native: None,
        last_native: None,
        ended: false,
    };
    let events = futures::stream::unfold(state, |mut st| async move {
        let bytes = st.next_bytes().await?;
        Some((Ok::<_, Infallible>(bytes), st))
    });
    let mut resp = Response::new(Body::from_stream(events));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let h = resp.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(DEGRADATION_HEADER, HeaderValue::from_static(degradation));
    set_deployment(h, deployment.as_deref());
    if !is_native {
        if let Some(v) = dropped_header(dropped, request_id) {
            h.insert(super::DROPPED_HEADER, v);
        }
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_native_event_is_written_as_it_came() {
        let mut out = Vec::new();
        let data = write_native(
            serde_json::json!({"event": "message_start", "data": "{\"type\":\"message_start\"}"}),
            &mut out,
        );
        assert_eq!(data.as_deref(), Some("{\"type\":\"message_start\"}"));
        write_native(serde_json::json!({"event": null, "data": "a\nb"}), &mut out);
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "event: message_start\ndata: {\"type\":\"message_start\"}\n\ndata: a\ndata: b\n\n"
        );
    }
}
