//! The optional access log: one JSON line per request on the proxy
//! listener, written through `tracing` on the target [`TARGET`]
//! (`pressure::access`) so that it can be filtered or routed like any other
//! target (`RUST_LOG=pressure::access=info`, or off with
//! `pressure::access=off`).
//!
//! Off by default; on with `gateway.accessLog.enabled: true` or
//! `pressure gateway --access-log`. The line is written when the response
//! body has ended, or was dropped (the client went away), with:
//!
//! | field | value |
//! |---|---|
//! | `time` | the request's arrival, RFC 3339 UTC |
//! | `request_id` | the client's `x-request-id` when it is safe (1–128 of `A-Za-z0-9._:-`), else a generated one; echoed on the response and forwarded upstream |
//! | `method` | the request method |
//! | `path` | the normalised path, **without the query** (queries carry tokens) |
//! | `route` | the route label of the traffic metrics (`none` without one) |
//! | `upstream` | the upstream's name, `llm`, or `none` |
//! | `status` | the response status (`499`: the client went away before the head) |
//! | `duration_ms` | arrival to end of the response body, milliseconds (µs precision) |
//! | `bytes_sent` | response body bytes handed to the connection |
//! | `tenant` | the tenant of a valid JWT or API key (absent without one) |
//! | `key_id` | the API key that named the tenant: its `name`, or the first 8 hex digits of its SHA-256 (absent without one; never the key) |
//! | `resource` | the resources charged, `,`-separated (absent when none) |
//!
//! Request bodies, headers and tokens are never logged.

use crate::charged::Charged;
use http::{HeaderMap, HeaderValue, Method};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// The tracing target of access log lines.
pub(crate) const TARGET: &str = "pressure::access";

/// The request id header, read from the client and echoed on the response.
pub(crate) const REQUEST_ID: &str = "x-request-id";

/// Longest client-sent request id kept.
pub(crate) const MAX_REQUEST_ID: usize = 128;

/// Whether a client-sent request id is safe to log and echo.
pub(crate) fn is_safe_request_id(v: &[u8]) -> bool {
    !v.is_empty()
        && v.len() <= MAX_REQUEST_ID
        && v.iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// A new request id: 32 hex digits, a random per-process prefix and a
/// counter, so ids are unique within a process and unlikely to collide
/// across a fleet.
pub(crate) fn new_request_id() -> String {
    static PREFIX: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(|| {
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    });
    format!("{prefix:016x}{:016x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The request id of a request with `headers`: the client's when safe,
/// else a new one.
pub(crate) fn request_id(headers: &HeaderMap) -> String {
    match headers.get(REQUEST_ID) {
        Some(v) if is_safe_request_id(v.as_bytes()) => String::from_utf8_lossy(v.as_bytes()).into_owned(),
        _ => new_request_id(),
    }
}

/// What the line of one request says, gathered at its arrival; the rest
/// (status, duration, bytes) comes at its end.
#[derive(Debug)]
pub(crate) struct AccessRecord {
    time: time::OffsetDateTime,
    request_id: String,
    method: Method,
    path: String,
    route: String,
    upstream: String,
    charged: Option<Charged>,
}

impl AccessRecord {
    /// The record of a request that arrived now.
    pub(crate) fn new(request_id: String, method: Method, path: &str) -> Self {
        Self {
            time: time::OffsetDateTime::now_utc(),
            request_id,
            method,
            path: path.to_owned(),
            route: crate::metrics::traffic::NONE.to_owned(),
            upstream: crate::metrics::traffic::NONE.to_owned(),
            charged: None,
        }
    }

    /// Replaces the path (with the normalised one).
    pub(crate) fn set_path(&mut self, path: &str) {
        path.clone_into(&mut self.path);
    }

    /// Sets the route decision and the record the inner layers fill.
    pub(crate) fn routed(&mut self, route: &str, upstream: &str, charged: Charged) {
        route.clone_into(&mut self.route);
        upstream.clone_into(&mut self.upstream);
        self.charged = Some(charged);
    }

    /// The request id, as a header value.
    pub(crate) fn request_id_header(&self) -> Option<HeaderValue> {
        HeaderValue::from_str(&self.request_id).ok()
    }

    /// Writes the line.
    pub(crate) fn emit(&self, status: u16, took: Duration, bytes_sent: u64) {
        let time = self
            .time
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
        let (resource, tenant) = self.charged.as_ref().map(Charged::summary).unwrap_or_default();
        let key_id = self.charged.as_ref().and_then(Charged::api_key_label);
        let duration_ms = took.as_micros() as f64 / 1000.0;
        tracing::info!(
            target: TARGET,
            time = time.as_str(),
            request_id = self.request_id.as_str(),
            method = self.method.as_str(),
            path = self.path.as_str(),
            route = self.route.as_str(),
            upstream = self.upstream.as_str(),
            status,
            duration_ms,
            bytes_sent,
            tenant = tenant.as_deref(),
            key_id = key_id.as_deref(),
            resource = (!resource.is_empty()).then_some(resource.as_str()),
            "access"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_are_kept_only_when_safe() {
        let mut h = HeaderMap::new();
        h.insert(REQUEST_ID, HeaderValue::from_static("abc-123_x.y:z"));
        assert_eq!(request_id(&h), "abc-123_x.y:z");
        h.insert(REQUEST_ID, HeaderValue::from_static("a b"));
        assert_ne!(request_id(&h), "a b");
        h.insert(REQUEST_ID, HeaderValue::from_static("{\"x\":1}"));
        assert_eq!(request_id(&h).len(), 32);
        let long = "a".repeat(MAX_REQUEST_ID + 1);
        assert!(!is_safe_request_id(long.as_bytes()));
        assert!(!is_safe_request_id(b""));
    }

    #[test]
    fn generated_ids_differ() {
        let a = new_request_id();
        let b = new_request_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(is_safe_request_id(a.as_bytes()));
    }
}
