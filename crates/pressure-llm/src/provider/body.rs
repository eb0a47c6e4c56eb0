//! The response side of one provider call: the head that arrived in time
//! ([`ResponseHead`]), its body read within the read timeout and the
//! deadline ([`next_chunk`], [`ResponseHead::read_all`]), and what a body
//! that is not the expected answer says ([`Answered::undecodable`],
//! [`error_message`]). Shared by the provider client, its streams and its
//! embeddings call.

use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use http::HeaderMap;
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{timeout_at, Instant};

use super::error::CallError;
use super::ratelimit::{header_pairs, RateLimitHints};
use crate::taxonomy::{self, ErrorKind, TimeoutPhase};

/// At most this much of an error body is read and classified.
pub(crate) const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// A non-streamed completion larger than this is refused.
pub(crate) const RESPONSE_BODY_LIMIT: usize = 32 * 1024 * 1024;

/// A failure while reading a response body.
pub(crate) type BodyError = hyper::Error;

/// The response body as a stream of byte chunks.
pub(crate) type BodyStream = Pin<Box<dyn Stream<Item = Result<Bytes, BodyError>> + Send>>;

/// A response head that arrived in time, with its body still to read.
pub(crate) struct ResponseHead {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) ratelimit: RateLimitHints,
    pub(crate) body: BodyStream,
    pub(crate) permit: OwnedSemaphorePermit,
    pub(crate) started: Instant,
    pub(crate) first_byte: Duration,
}

/// A 2xx answer read whole, its connection slot freed.
pub(crate) struct Answered {
    pub(crate) bytes: Vec<u8>,
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) ratelimit: RateLimitHints,
    pub(crate) first_byte: Duration,
    /// From the request to the end of the body.
    pub(crate) total: Duration,
}

impl ResponseHead {
    /// Reads the whole body, within [`RESPONSE_BODY_LIMIT`], `read` between
    /// chunks and the deadline, and frees the connection slot.
    pub(crate) async fn read_all(mut self, read: Duration, deadline: Instant) -> Result<Answered, CallError> {
        let mut bytes = Vec::new();
        while let Some(chunk) = next_chunk(&mut self.body, read, deadline)
            .await
            .map_err(|e| e.with_response(self.status, &self.ratelimit))?
        {
            bytes.extend_from_slice(&chunk);
            if bytes.len() > RESPONSE_BODY_LIMIT {
                return Err(CallError::transport(
                    ErrorKind::Other,
                    format!("response body exceeds {RESPONSE_BODY_LIMIT} bytes"),
                )
                .with_response(self.status, &self.ratelimit));
            }
        }
        drop(self.permit);
        Ok(Answered {
            bytes,
            status: self.status,
            headers: self.headers,
            ratelimit: self.ratelimit,
            first_byte: self.first_byte,
            total: self.started.elapsed(),
        })
    }
}

impl Answered {
    /// The error of a body that did not decode (`what: e`): classified as
    /// the error answer it may be, else a malformed one.
    pub(crate) fn undecodable(self, what: &str, e: impl std::fmt::Display) -> CallError {
        let text = String::from_utf8_lossy(&self.bytes);
        let kind = taxonomy::classify(self.status, &header_pairs(&self.headers), &text);
        let message = match kind {
            ErrorKind::Other => format!("{what}: {e}"),
            _ => error_message(&text, self.status),
        };
        CallError {
            kind,
            status: Some(self.status),
            message,
            ratelimit: self.ratelimit,
            param: None,
        }
    }
}

impl CallError {
    /// Attaches the status and rate-limit hints of the response the error happened in.
    pub(crate) fn with_response(mut self, status: u16, ratelimit: &RateLimitHints) -> Self {
        self.status = Some(status);
        self.ratelimit = ratelimit.clone();
        self
    }
}

/// The instant a phase of length `d` ends, capped by `deadline`; the phase
/// is reported as `Total` when the deadline is the nearer bound.
pub(crate) fn bound(phase: TimeoutPhase, d: Duration, deadline: Instant) -> (Instant, TimeoutPhase) {
    match Instant::now().checked_add(d) {
        Some(at) if at < deadline => (at, phase),
        _ => (deadline, TimeoutPhase::Total),
    }
}

/// The next body chunk, within `read` and the deadline.
pub(crate) async fn next_chunk(
    body: &mut BodyStream,
    read: Duration,
    deadline: Instant,
) -> Result<Option<Bytes>, CallError> {
    let (at, phase) = bound(TimeoutPhase::Read, read, deadline);
    match timeout_at(at, body.next()).await {
        Err(_) => Err(CallError::timeout(
            phase,
            format!("no body bytes for {} ms", read.as_millis()),
        )),
        Ok(None) => Ok(None),
        Ok(Some(Ok(bytes))) => Ok(Some(bytes)),
        Ok(Some(Err(e))) => Err(body_error(&e)),
    }
}

/// Up to `limit` bytes of an (error) body; a read failure or timeout ends it early.
pub(crate) async fn read_bounded(
    body: &mut BodyStream,
    limit: usize,
    read: Duration,
    deadline: Instant,
) -> Vec<u8> {
    let mut buf = Vec::new();
    while buf.len() < limit {
        match next_chunk(body, read, deadline).await {
            Ok(Some(chunk)) => {
                let take = chunk.len().min(limit - buf.len());
                buf.extend_from_slice(&chunk[..take]);
            }
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(error = %e, "reading an error body failed; classifying what arrived");
                break;
            }
        }
    }
    buf
}

/// A failure while reading a response body: the connection broke mid-body.
pub(crate) fn body_error(e: &BodyError) -> CallError {
    CallError::transport(
        ErrorKind::Connection,
        format!("connection lost while reading the body: {}", error_chain(e)),
    )
}

/// An error with all its sources, `a: b: c`.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        let text = inner.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = inner.source();
    }
    s
}

/// The provider's `error.message` (or `message`), else the start of the body.
pub(crate) fn error_message(body: &str, status: u16) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let message = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("message"))
            .or_else(|| v.get("error").filter(|e| e.is_string()))
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    match message {
        Some(m) => m,
        None if body.trim().is_empty() => format!("HTTP {status} with an empty body"),
        None => body.chars().take(512).collect(),
    }
}
