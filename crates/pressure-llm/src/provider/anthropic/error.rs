//! Anthropic's errors and how the taxonomy files them.
//!
//! Anthropic answers errors as `{"type":"error","error":{"type","message"}}`
//! (and, inside a stream that already answered 200, as an `error` event with
//! the same data). [`taxonomy::classify`](crate::taxonomy::classify) reads
//! both; the provider client and [`ChatStream`](crate::provider::ChatStream)
//! call it for either kind of provider, so retry, fallback and breaker
//! accounting treat Anthropic's errors like their OpenAI counterparts:
//!
//! | HTTP | `error.type` | [`ErrorKind`] | disposition | breaker |
//! |---|---|---|---|---|
//! | 400 | `invalid_request_error` | `BadRequest` | fail | success (the provider is fine) |
//! | 400 / 403 | a message about billing or the credit balance | `QuotaExhausted` | fallback, never retried (like OpenAI's `insufficient_quota`) | ignored |
//! | 401 | `authentication_error` | `Unauthorized` | fallback | failure |
//! | 403 | `permission_error` | `Forbidden` | fallback | failure |
//! | 404 | `not_found_error` | `NotFound` | fallback | failure |
//! | 413 | `request_too_large` | `BadRequest` | fail | success |
//! | 429 | `rate_limit_error` | `RateLimited` (with `retry-after`) | retry | ignored (like OpenAI's 429) |
//! | 500 | `api_error` | `Server { 500 }` | retry | failure |
//! | 504 | `timeout_error` | `Server { 504 }` | retry | failure |
//! | 529 | `overloaded_error` | `Overloaded` (with `retry-after`) | retry | failure (like OpenAI's 5xx) |
//! | 200 (stream) | any of the above | by its `type`: `overloaded_error` → `Overloaded`, `api_error` → `Server { 500 }`, `rate_limit_error` → `RateLimited`, ... | as above | as above |
//!
//! A 400 whose message says the prompt is too long is `ContextLength`
//! (fallback to a bigger model), as for OpenAI.
//!
//! [`ErrorKind`]: crate::taxonomy::ErrorKind

#[cfg(test)]
use serde_json::{json, Value};

/// Anthropic's documented error types with the status each comes with.
#[cfg(test)]
pub(crate) const ERROR_TYPES: &[(&str, u16)] = &[
    ("invalid_request_error", 400),
    ("authentication_error", 401),
    ("billing_error", 402),
    ("permission_error", 403),
    ("not_found_error", 404),
    ("request_too_large", 413),
    ("rate_limit_error", 429),
    ("api_error", 500),
    ("timeout_error", 504),
    ("overloaded_error", 529),
];

/// An Anthropic error body: `{"type":"error","error":{"type","message"}}`.
#[cfg(test)]
pub(crate) fn error_body(error_type: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": error_type, "message": message}})
}

/// The `error.type` of an Anthropic error body, if it is one.
#[cfg(test)]
pub(crate) fn error_type(body: &str) -> Option<String> {
    let v: Value = serde_json::from_str(body).ok()?;
    v.pointer("/error/type")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::taxonomy::{classify, Disposition, ErrorKind, TimeoutPhase};

    const NONE: &[(&str, &str)] = &[];

    fn kind(status: u16, ty: &str, message: &str) -> ErrorKind {
        classify(status, NONE, &error_body(ty, message).to_string())
    }

    #[test]
    fn every_documented_error_type_with_its_status() {
        use Disposition::*;
        let expect: &[(&str, ErrorKind, Disposition)] = &[
            ("invalid_request_error", ErrorKind::BadRequest, Fail),
            ("authentication_error", ErrorKind::Unauthorized, Fallback),
            ("billing_error", ErrorKind::QuotaExhausted, Fallback),
            ("permission_error", ErrorKind::Forbidden, Fallback),
            ("not_found_error", ErrorKind::NotFound, Fallback),
            ("request_too_large", ErrorKind::BadRequest, Fail),
            (
                "rate_limit_error",
                ErrorKind::RateLimited { retry_after: None },
                Retry,
            ),
            (
                "api_error",
                ErrorKind::Server {
                    status: 500,
                    retry_after: None,
                },
                Retry,
            ),
            (
                "timeout_error",
                ErrorKind::Server {
                    status: 504,
                    retry_after: None,
                },
                Retry,
            ),
            (
                "overloaded_error",
                ErrorKind::Overloaded { retry_after: None },
                Retry,
            ),
        ];
        assert_eq!(expect.len(), ERROR_TYPES.len());
        for ((ty, status), (ty2, k, d)) in ERROR_TYPES.iter().zip(expect) {
            assert_eq!(ty, ty2);
            let got = kind(*status, ty, "m");
            assert_eq!(&got, k, "{status} {ty}");
            assert_eq!(got.disposition(), *d, "{status} {ty}");
        }
        // 529 is overloaded, never "unknown", even with an empty body.
        assert_eq!(
            classify(529, NONE, ""),
            ErrorKind::Overloaded { retry_after: None }
        );
    }

    #[test]
    fn retry_after_is_honoured_on_429_and_529() {
        let h = [("retry-after", "7")];
        let body = error_body(
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit",
        );
        assert_eq!(
            classify(429, &h, &body.to_string()),
            ErrorKind::RateLimited {
                retry_after: Some(Duration::from_secs(7))
            }
        );
        let body = error_body("overloaded_error", "Overloaded");
        let k = classify(529, &h, &body.to_string());
        assert_eq!(
            k,
            ErrorKind::Overloaded {
                retry_after: Some(Duration::from_secs(7))
            }
        );
        assert_eq!(k.retry_after(), Some(Duration::from_secs(7)));
    }

    #[test]
    fn spend_limits_are_never_retried() {
        for (status, ty, message) in [
            (400, "invalid_request_error", "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."),
            (400, "invalid_request_error", "You have reached your specified API usage limits. You will regain access on 2025-06-01 at 00:00 UTC."),
            (403, "permission_error", "Your account has a billing issue; update your payment method."),
            (402, "billing_error", "Payment required"),
        ] {
            let k = kind(status, ty, message);
            assert_eq!(k, ErrorKind::QuotaExhausted, "{status} {message}");
            assert_eq!(k.disposition(), Disposition::Fallback);
            assert!(!k.is_transient());
        }
        // A rate limit whose message links the billing page stays a rate limit.
        let k = kind(
            429,
            "rate_limit_error",
            "Add a payment method at https://console.anthropic.com/settings/billing",
        );
        assert_eq!(k, ErrorKind::RateLimited { retry_after: None });
    }

    #[test]
    fn errors_inside_a_stream_are_filed_by_type() {
        assert_eq!(
            kind(200, "overloaded_error", "Overloaded"),
            ErrorKind::Overloaded { retry_after: None }
        );
        assert_eq!(
            kind(200, "api_error", "Internal server error"),
            ErrorKind::Server {
                status: 500,
                retry_after: None
            }
        );
        assert_eq!(
            kind(200, "rate_limit_error", "slow down"),
            ErrorKind::RateLimited { retry_after: None }
        );
        assert_eq!(
            kind(200, "timeout_error", "t"),
            ErrorKind::Timeout {
                phase: TimeoutPhase::Upstream
            }
        );
        assert_eq!(kind(200, "invalid_request_error", "bad"), ErrorKind::BadRequest);
        assert_eq!(kind(200, "something_else", "?"), ErrorKind::Other);
        assert_eq!(
            kind(
                400,
                "invalid_request_error",
                "prompt is too long: 208310 tokens > 200000 maximum"
            ),
            ErrorKind::ContextLength
        );
    }

    #[test]
    fn error_type_of_a_body() {
        assert_eq!(
            error_type(&error_body("api_error", "x").to_string()).as_deref(),
            Some("api_error")
        );
        assert_eq!(error_type("nope"), None);
    }
}
