//! Errors of building a [`Proxy`](super::Proxy) and the JSON error
//! responses the proxy answers with (`{"error":{"type":..,"message":..}}`).

use axum::body::Body;
use http::{header, HeaderValue, Response, StatusCode};

/// Why the proxy could not be built from its configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    /// An upstream's `url` is not a usable `http://host[:port][/base]` URL.
    #[error("gateway.upstreams.{upstream}.url: {reason} (got {url:?})")]
    InvalidUrl {
        /// The upstream's name.
        upstream: String,
        /// The configured URL.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An upstream's `pathPrefix` is not an absolute path.
    #[error("gateway.upstreams.{upstream}.pathPrefix: {reason} (got {prefix:?})")]
    InvalidPathPrefix {
        /// The upstream's name.
        upstream: String,
        /// The configured prefix.
        prefix: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Two upstreams claim the same `pathPrefix`, so routing would be ambiguous.
    #[error("gateway.upstreams.{second}.pathPrefix: {prefix:?} is already the prefix of upstream {first}")]
    DuplicatePathPrefix {
        /// The shared prefix.
        prefix: String,
        /// The upstream that claimed it first (by name order).
        first: String,
        /// The upstream that claimed it again.
        second: String,
    },
    /// A timeout is zero, which would fail every request.
    #[error("gateway.timeouts.{field}: must be > 0")]
    InvalidTimeout {
        /// The JSON name of the field (`connectMs`, `totalMs`).
        field: &'static str,
    },
}

/// A JSON error response `{"error":{"type":kind,"message":message}}` with
/// `Content-Type: application/json`.
pub fn error_response(status: StatusCode, kind: &str, message: &str) -> Response<Body> {
    let body = serde_json::json!({ "error": { "type": kind, "message": message } }).to_string();
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The `404` answered for a path no upstream's prefix covers.
pub fn not_found(path: &str) -> Response<Body> {
    error_response(
        StatusCode::NOT_FOUND,
        "not_found",
        &format!("no upstream serves path {path}"),
    )
}

/// `504`: the upstream did not send a response head within `total_ms`.
pub(crate) fn upstream_timeout(upstream: &str, total_ms: u64) -> Response<Body> {
    error_response(
        StatusCode::GATEWAY_TIMEOUT,
        "upstream_timeout",
        &format!("upstream {upstream} did not answer within {total_ms} ms"),
    )
}

/// `502`: no connection to the upstream could be made.
pub(crate) fn upstream_unavailable(upstream: &str, reason: &str) -> Response<Body> {
    error_response(
        StatusCode::BAD_GATEWAY,
        "upstream_unavailable",
        &format!("upstream {upstream} is unavailable: {reason}"),
    )
}

/// `502`: the exchange with the upstream failed after connecting.
pub(crate) fn upstream_error(upstream: &str, reason: &str) -> Response<Body> {
    error_response(
        StatusCode::BAD_GATEWAY,
        "upstream_error",
        &format!("upstream {upstream} failed: {reason}"),
    )
}

/// `413`: the client's body outgrew a limit while it was being streamed.
pub(crate) fn payload_too_large() -> Response<Body> {
    error_response(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        "request body exceeds the allowed size",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn error_bodies_are_json() {
        let response = not_found("/a\"b");
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let bytes = response.into_body().collect().await.expect("body").to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(json["error"]["type"], "not_found");
        assert_eq!(json["error"]["message"], "no upstream serves path /a\"b");
    }

    #[test]
    fn config_errors_name_the_json_path() {
        let err = ProxyError::InvalidTimeout { field: "totalMs" };
        assert_eq!(err.to_string(), "gateway.timeouts.totalMs: must be > 0");
    }
}
