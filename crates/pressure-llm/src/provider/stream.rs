//! [`ChatStream`]: the server-sent events of a streamed chat completion,
//! parsed into [`ChatChunk`]s, with the read timeout between chunks.
//!
//! The stream yields `Ok(chunk)` for every `data: {...}` event in order and
//! ends after `data: [DONE]`. It yields one `Err` and then ends when:
//!
//! * no body bytes arrive for `readMs` (`Timeout { Read }`) or the caller's
//!   deadline passes (`Timeout { Total }`) — a stream that hangs after its
//!   first chunk is cut this way;
//! * the connection breaks, or the body ends without `[DONE]` and without any
//!   `finish_reason` (`Connection`);
//! * an event carries an `error` object (classified by
//!   [`crate::taxonomy::classify`] with the HTTP status, e.g.
//!   `overloaded_error` → `Overloaded`), or is not valid JSON (`Other`).
//!
//! Any bytes (including SSE comments used as keep-alives) reset the read
//! timer. Whatever happened, the stream keeps what it saw: time to first
//! token, the final `usage`, and the text generated so far — what a failed
//! attempt is billed for. The connection slot is released when the stream
//! ends or is dropped.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};

use super::body::{body_error, bound, BodyStream, ResponseHead};
use super::error::CallError;
use super::ratelimit::header_pairs;
use super::ratelimit::RateLimitHints;
use super::sse::SseParser;
use super::types::{ChatChunk, Usage};
use crate::taxonomy::{self, ErrorKind, TimeoutPhase};

/// A streamed chat completion: a [`Stream`] of parsed chunks.
pub struct ChatStream {
    body: Option<BodyStream>,
    permit: Option<OwnedSemaphorePermit>,
    status: u16,
    headers: http::HeaderMap,
    ratelimit: RateLimitHints,
    read_timeout: Duration,
    deadline: Instant,
    timer: Pin<Box<Sleep>>,
    timer_phase: TimeoutPhase,
    parser: SseParser,
    pending: VecDeque<Result<ChatChunk, CallError>>,
    started: Instant,
    first_byte: Duration,
    ttft: Option<Duration>,
    total: Option<Duration>,
    usage: Option<Usage>,
    output: String,
    chunks: u64,
    output_chunks: u64,
    done: bool,
    finish_seen: bool,
    terminated: bool,
    error: Option<CallError>,
}

impl std::fmt::Debug for ChatStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatStream")
            .field("status", &self.status)
            .field("chunks", &self.chunks)
            .field("output_chars", &self.output_chars())
            .field("usage", &self.usage)
            .field("done", &self.done)
            .field("terminated", &self.terminated)
            .finish()
    }
}

impl ChatStream {
    pub(crate) fn new(sent: ResponseHead, read_timeout: Duration, deadline: Instant) -> Self {
        let (at, phase) = bound(TimeoutPhase::Read, read_timeout, deadline);
        Self {
            body: Some(sent.body),
            permit: Some(sent.permit),
            status: sent.status,
            headers: sent.headers,
            ratelimit: sent.ratelimit,
            read_timeout,
            deadline,
            timer: Box::pin(tokio::time::sleep_until(at)),
            timer_phase: phase,
            parser: SseParser::default(),
            pending: VecDeque::new(),
            started: sent.started,
            first_byte: sent.first_byte,
            ttft: None,
            total: None,
            usage: None,
            output: String::new(),
            chunks: 0,
            output_chunks: 0,
            done: false,
            finish_seen: false,
            terminated: false,
            error: None,
        }
    }

    /// The HTTP status of the response (2xx).
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The rate-limit hints of the response headers.
    pub fn ratelimit(&self) -> &RateLimitHints {
        &self.ratelimit
    }

    /// From the start of the call (including pool wait) to the response head.
    pub fn first_byte(&self) -> Duration {
        self.first_byte
    }

    /// Time to first token: from the start of the call to the first chunk
    /// carrying output (content, tool call, refusal or reasoning).
    pub fn ttft(&self) -> Option<Duration> {
        self.ttft
    }

    /// From the start of the call to the stream's end (success or error).
    pub fn total(&self) -> Option<Duration> {
        self.total
    }

    /// The final `usage` chunk's figures, once it arrived.
    pub fn usage(&self) -> Option<&Usage> {
        self.usage.as_ref()
    }

    /// The content generated so far, all choices concatenated in arrival
    /// order (for counting the output tokens of a failed attempt).
    pub fn output_text(&self) -> &str {
        &self.output
    }

    /// Characters of content generated so far.
    pub fn output_chars(&self) -> usize {
        self.output.chars().count()
    }

    /// Data chunks received (including the usage chunk).
    pub fn chunks_received(&self) -> u64 {
        self.chunks
    }

    /// Chunks that carried output.
    pub fn output_chunks(&self) -> u64 {
        self.output_chunks
    }

    /// True once `data: [DONE]` arrived.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// True once the stream ended (done, failed or cut).
    pub fn is_terminated(&self) -> bool {
        self.terminated
    }

    /// The error the stream ended with, if it failed.
    pub fn error(&self) -> Option<&CallError> {
        self.error.as_ref()
    }

    /// Ends the stream: releases the body and the connection slot.
    fn terminate(&mut self) {
        if !self.terminated {
            self.terminated = true;
            self.total = Some(self.started.elapsed());
            self.body = None;
            self.permit = None;
        }
    }

    /// Ends the stream with an error, after the chunks already parsed.
    fn fail(&mut self, mut err: CallError) {
        if self.terminated {
            return;
        }
        if err.status.is_none() {
            err.status = Some(self.status);
            err.ratelimit = self.ratelimit.clone();
        }
        self.error = Some(err.clone());
        self.pending.push_back(Err(err));
        self.terminate();
    }

    fn rearm_timer(&mut self) {
        let (at, phase) = bound(TimeoutPhase::Read, self.read_timeout, self.deadline);
        self.timer.as_mut().reset(at);
        self.timer_phase = phase;
    }

    /// Handles the events completed by new bytes.
    fn feed(&mut self, bytes: &[u8]) {
        for (name, data) in self.parser.feed(bytes) {
            self.dispatch(name, data);
        }
    }

    /// The body ended: handles a last line without a newline and a pending event.
    fn feed_eof(&mut self) {
        for (name, data) in self.parser.finish() {
            self.dispatch(name, data);
        }
    }

    /// One complete event.
    fn dispatch(&mut self, name: Option<String>, data: String) {
        if self.done || self.terminated {
            return;
        }
        if data.trim() == "[DONE]" {
            self.done = true;
            return;
        }
        let chunk: ChatChunk = match serde_json::from_str(&data) {
            Ok(c) => c,
            Err(e) => {
                return self.fail(CallError::transport(
                    ErrorKind::Other,
                    format!("malformed stream event: {e}"),
                ))
            }
        };
        if name.as_deref() == Some("error") || chunk.extra.contains_key("error") {
            let kind = taxonomy::classify(self.status, &header_pairs(&self.headers), &data);
            let message = chunk
                .extra
                .get("error")
                .and_then(|e| e.get("message").or(Some(e)))
                .and_then(|m| m.as_str())
                .unwrap_or("error event in the stream")
                .to_owned();
            return self.fail(CallError::transport(kind, message));
        }
        self.chunks += 1;
        if chunk.has_output() {
            self.output_chunks += 1;
            if self.ttft.is_none() {
                self.ttft = Some(self.started.elapsed());
            }
        }
        for choice in &chunk.choices {
            if let Some(text) = &choice.delta.content {
                self.output.push_str(text);
            }
            if choice.finish_reason.is_some() {
                self.finish_seen = true;
            }
        }
        if let Some(usage) = &chunk.usage {
            self.usage = Some(usage.clone());
        }
        self.pending.push_back(Ok(chunk));
    }
}

impl Stream for ChatStream {
    type Item = Result<ChatChunk, CallError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(item) = this.pending.pop_front() {
                return Poll::Ready(Some(item));
            }
            if this.terminated {
                return Poll::Ready(None);
            }
            let Some(body) = this.body.as_mut() else {
                this.terminate();
                continue;
            };
            match body.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(bytes))) => {
                    if Instant::now() >= this.deadline && !this.done {
                        this.fail(CallError::timeout(
                            TimeoutPhase::Total,
                            "deadline passed while streaming",
                        ));
                        continue;
                    }
                    this.rearm_timer();
                    this.feed(&bytes);
                }
                Poll::Ready(Some(Err(e))) => {
                    if this.done {
                        this.terminate();
                    } else {
                        this.fail(body_error(&e));
                    }
                }
                Poll::Ready(None) => {
                    this.feed_eof();
                    if !this.done && !this.finish_seen {
                        this.fail(CallError::transport(
                            ErrorKind::Connection,
                            "stream ended before [DONE] and before any finish_reason",
                        ));
                    }
                    this.terminate();
                }
                Poll::Pending => {
                    if this.done {
                        // [DONE] arrived; do not wait for the server to close the body.
                        this.terminate();
                        continue;
                    }
                    if this.timer.as_mut().poll(cx).is_ready() {
                        let phase = this.timer_phase;
                        let message = match phase {
                            TimeoutPhase::Total => "deadline passed while streaming".to_owned(),
                            _ => format!("no stream bytes for {} ms", this.read_timeout.as_millis()),
                        };
                        this.fail(CallError::timeout(phase, message));
                        continue;
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}
