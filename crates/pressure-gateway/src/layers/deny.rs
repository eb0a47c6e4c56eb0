//! The refusal: `429 Too Many Requests` with `Retry-After` (whole seconds,
//! rounded up), IETF `RateLimit-Policy` / `RateLimit` headers (draft
//! structured fields), a JSON body, and one structured log line.

use crate::metrics::{GatewayMetrics, Layer};
use axum::body::Body;
use http::{HeaderValue, Response, StatusCode};
use pressure_core::{Denial, Dimension, Limits};
use std::time::Duration;

/// The quota and window (seconds) of `dim` in `limits`, for the policy header.
fn policy(limits: &Limits, dim: Dimension) -> Option<(u64, u64)> {
    match dim {
        Dimension::RequestsPerSecond => limits.requests_per_second.map(|q| (q, 1)),
        Dimension::RequestsPerMinute => limits.requests_per_minute.map(|q| (q, 60)),
        Dimension::TokensPerMinute => limits.tokens_per_minute.map(|q| (q, 60)),
        Dimension::InputTokensPerMinute => limits.input_tokens_per_minute.map(|q| (q, 60)),
        Dimension::OutputTokensPerMinute => limits.output_tokens_per_minute.map(|q| (q, 60)),
        Dimension::MaxConcurrentRequests => limits.max_concurrent_requests.map(|q| (q, 0)),
    }
}

/// `Retry-After` seconds: the wait rounded up, at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    wait.as_nanos().div_ceil(1_000_000_000).max(1) as u64
}

/// Builds the 429 for a denial on `resource`, counts it and logs it.
pub fn too_many_requests(
    resource: &str,
    limits: &Limits,
    denial: &Denial,
    layer: Layer,
    namespace_id: Option<&str>,
    metrics: &GatewayMetrics,
) -> Response<Body> {
    metrics.denied(resource, layer);
    let wait_ms = denial.wait.as_millis() as u64;
    tracing::info!(
        target: "pressure::denial",
        resource,
        layer = layer.as_str(),
        wait_time_ms = wait_ms,
        namespace_id = namespace_id.unwrap_or(""),
        dimension = denial.dimension.as_str(),
        "request denied"
    );
    let secs = retry_after_secs(denial.wait);
    let name = denial.dimension.as_str();
    let body = serde_json::json!({
        "error": {
            "type": "rate_limited",
            "message": format!("{resource}: {name} exhausted; retry in {secs} s"),
            "resource": resource,
            "dimension": name,
            "retryAfterMs": wait_ms,
        }
    });
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let h = resp.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
    if let Some((quota, window)) = policy(limits, denial.dimension) {
        let policy = if window > 0 {
            format!("\"{name}\";q={quota};w={window}")
        } else {
            format!("\"{name}\";q={quota}")
        };
        if let Ok(v) = HeaderValue::from_str(&policy) {
            h.insert("ratelimit-policy", v);
        }
        if let Ok(v) = HeaderValue::from_str(&format!("\"{name}\";r=0;t={secs}")) {
            h.insert("ratelimit", v);
        }
    }
    resp
}

/// A JSON error response (401, 503, …), in the gateway's one error shape.
pub use crate::proxy::error_response as json_error;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1_000)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1_001)), 2);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
    }
}
