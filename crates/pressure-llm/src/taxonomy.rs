//! The error taxonomy: what went wrong with one LLM call, and what to do about it.
//!
//! Every failed attempt is reduced to an [`ErrorKind`], either by the transport
//! (timeouts, refused connections) or by [`classify`] from the provider's HTTP
//! status, headers and error body (OpenAI- and Anthropic-style). The kind alone
//! decides the [`Disposition`]: retry the same (provider, model), fall back to
//! the next level of the chain, or fail the event.
//!
//! # Dispositions
//!
//! | Kind | Disposition | Why |
//! |---|---|---|
//! | `Timeout` (connect, write, first byte, read, pool wait, upstream 408) | Retry | transient by nature |
//! | `Timeout { phase: Total }` | Fail | the event's one deadline covers every retry and fallback: nothing is left |
//! | `RateLimited` (429) | Retry | the window refills; `retry-after` says when |
//! | `Conflict` (409) | Retry | lock contention on the provider's side; the official SDKs retry it |
//! | `Overloaded` (529, `overloaded_error`) | Retry | capacity comes back; the breaker stops a storm |
//! | `Server` 500, 502, 503, 504 and other 5xx | Retry | transient provider failure |
//! | `Server` 501, 505 | Fallback | "not implemented" will not change on retry; another model may implement it |
//! | `Connection` (refused/reset before any byte) | Retry | nothing was processed, nothing billed |
//! | `QuotaExhausted` (429 `insufficient_quota`, 402, billing errors) | Fallback | the account's spend cap will not refill within an event; another provider/account may answer |
//! | `ContextLength` | Fallback | the same prompt always overflows this model; a bigger-context model (or the non-LLM handler) may take it |
//! | `ContentRefusal` | Fail | a policy decision about the *input*; repeating it is pointless and shopping the same prompt around models until one complies launders a safety refusal. The caller may route it to the manual queue |
//! | `BadRequest` (400, 413, 422) | Fail | our request is malformed; every model would get the same bytes |
//! | `Unauthorized` (401), `Forbidden` (403), `NotFound` (404) | Fallback | a credential, permission or model name of *this* (provider, model) is wrong — a configuration error that deserves an alert, but the backup has its own key and model, so failing the event would waste availability |
//! | `Other` | Fail | unknown: never spend retries on what we do not understand |
//!
//! Retry never happens for 400, 401, 403, 404, context length, a content
//! refusal or a spend-cap 429 (docs/architecture.md#the-llm-stack).
//!
//! Anthropic's errors land in the same kinds (`overloaded_error` / 529 →
//! `Overloaded`, `rate_limit_error` → `RateLimited`, `api_error` → `Server`,
//! a billing or credit-balance refusal → `QuotaExhausted`, ...), also when
//! they arrive as an error event inside a 200 stream; the full table is in
//! the Anthropic provider's `error` module (`provider/anthropic/error.rs`).

use std::fmt;
use std::time::Duration;

/// Which phase of a call ran out of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeoutPhase {
    /// Establishing the TCP/TLS connection.
    Connect,
    /// Waiting for the first byte of the response after the request was sent.
    FirstByte,
    /// Waiting between chunks of a (streamed) response body.
    Read,
    /// Sending the request body.
    Write,
    /// Waiting for a free connection in the local pool.
    PoolWait,
    /// The provider (or a proxy in front of it) reported a timeout: HTTP 408.
    Upstream,
    /// The event's total deadline passed.
    Total,
}

impl TimeoutPhase {
    /// A stable lower-case label for logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::FirstByte => "first_byte",
            Self::Read => "read",
            Self::Write => "write",
            Self::PoolWait => "pool_wait",
            Self::Upstream => "upstream",
            Self::Total => "total",
        }
    }
}

/// What went wrong with one attempt of an LLM call.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A timeout in the given phase.
    Timeout {
        /// The phase that ran out of time.
        phase: TimeoutPhase,
    },
    /// HTTP 429 that is a rate limit (requests or tokens per window).
    RateLimited {
        /// The provider's `retry-after-ms` / `retry-after`, if it sent one.
        retry_after: Option<Duration>,
    },
    /// A spend cap was hit: 429 `insufficient_quota`, 402, billing errors,
    /// Anthropic's "credit balance is too low".
    QuotaExhausted,
    /// HTTP 409: a conflict on the provider's side, retried by the official SDKs.
    Conflict,
    /// The provider is overloaded: HTTP 529 or an `overloaded_error` body.
    Overloaded {
        /// The provider's `retry-after-ms` / `retry-after`, if it sent one.
        retry_after: Option<Duration>,
    },
    /// Any other HTTP 5xx.
    Server {
        /// The HTTP status, 500..=599.
        status: u16,
        /// The provider's `retry-after-ms` / `retry-after` (common with 503).
        retry_after: Option<Duration>,
    },
    /// HTTP 400 (also 413 and 422): the request itself is wrong.
    BadRequest,
    /// HTTP 401: missing or invalid credentials.
    Unauthorized,
    /// HTTP 403: the credentials lack permission.
    Forbidden,
    /// HTTP 404: unknown model or endpoint.
    NotFound,
    /// The prompt plus `max_tokens` exceed the model's context window.
    ContextLength,
    /// The provider's content filter or policy refused the request.
    ContentRefusal,
    /// The connection was refused or reset before any response byte arrived.
    Connection,
    /// Anything else (unknown 4xx, an unrecognised error in a 2xx stream, ...).
    Other,
}

/// What the pipeline does after an attempt failed with a given [`ErrorKind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Disposition {
    /// Try the same (provider, model) again after a backoff.
    Retry,
    /// Do not retry here; move to the next level of the fallback chain.
    Fallback,
    /// Give up on the event: no retry and no fallback can help.
    Fail,
}

impl ErrorKind {
    /// The disposition of this kind; see the table in the module docs.
    pub fn disposition(&self) -> Disposition {
        match self {
            Self::Timeout {
                phase: TimeoutPhase::Total,
            } => Disposition::Fail,
            Self::Timeout { .. }
            | Self::RateLimited { .. }
            | Self::Conflict
            | Self::Overloaded { .. }
            | Self::Connection => Disposition::Retry,
            Self::Server {
                status: 501 | 505, ..
            } => Disposition::Fallback,
            Self::Server { .. } => Disposition::Retry,
            Self::QuotaExhausted
            | Self::ContextLength
            | Self::Unauthorized
            | Self::Forbidden
            | Self::NotFound => Disposition::Fallback,
            Self::ContentRefusal | Self::BadRequest | Self::Other => Disposition::Fail,
        }
    }

    /// True when [`disposition`](Self::disposition) is [`Disposition::Retry`].
    pub fn is_transient(&self) -> bool {
        self.disposition() == Disposition::Retry
    }

    /// How long the provider asked us to wait, if it said so.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after }
            | Self::Overloaded { retry_after }
            | Self::Server { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A stable lower-case label for logs and metrics ("errors by type").
    pub fn label(&self) -> &'static str {
        match self {
            Self::Timeout { .. } => "timeout",
            Self::RateLimited { .. } => "rate_limited",
            Self::QuotaExhausted => "quota_exhausted",
            Self::Conflict => "conflict",
            Self::Overloaded { .. } => "overloaded",
            Self::Server { .. } => "server",
            Self::BadRequest => "bad_request",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::NotFound => "not_found",
            Self::ContextLength => "context_length",
            Self::ContentRefusal => "content_refusal",
            Self::Connection => "connection",
            Self::Other => "other",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout { phase } => write!(f, "timeout ({})", phase.label()),
            Self::Server { status, .. } => write!(f, "server error {status}"),
            other => f.write_str(other.label()),
        }
    }
}

impl std::error::Error for ErrorKind {}

/// Structured `type`/`code` values meaning a spend cap, matched quoted in the body.
const QUOTA_CODES: &[&str] = &[
    "\"insufficient_quota\"",
    "\"billing_hard_limit_reached\"",
    "\"billing_not_active\"",
    "\"billing_error\"",
];
/// Structured values meaning the context window overflowed.
const CONTEXT_CODES: &[&str] = &["\"context_length_exceeded\""];
/// Structured values meaning a content filter or policy refusal.
const REFUSAL_CODES: &[&str] = &[
    "\"content_filter\"",
    "\"content_policy_violation\"",
    "\"responsibleaipolicyviolation\"",
];
/// Structured values meaning the provider is overloaded.
const OVERLOADED_CODES: &[&str] = &["\"overloaded_error\""];
/// Free-text phrases of context-length errors from providers without a code
/// (Anthropic, vLLM), only consulted for 4xx bodies.
const CONTEXT_PHRASES: &[&str] = &[
    "maximum context length",
    "prompt is too long",
    "exceed context limit",
    "context length exceeded",
];
/// Free-text phrases of spend-cap errors without a code (Anthropic), 4xx only.
const QUOTA_PHRASES: &[&str] = &["credit balance", "reached your specified api usage limits"];
/// A phrase meaning a spend cap in a 400 or 403 (Anthropic words its
/// billing refusals as `invalid_request_error` / `permission_error`). Not
/// consulted for a 429: OpenAI's rate-limit messages link the billing page.
const BILLING_PHRASE: &str = "billing";
/// Anthropic's error `type`s, which say what failed when the status does
/// not: an `error` event inside a 200 stream, or an unexpected status. A
/// known status (400, 401, 403, 404, 429, 5xx, ...) wins over them.
const ANTHROPIC_TYPES: &[(&str, AnthropicType)] = &[
    ("\"rate_limit_error\"", AnthropicType::RateLimit),
    ("\"api_error\"", AnthropicType::Api),
    ("\"timeout_error\"", AnthropicType::Timeout),
    ("\"authentication_error\"", AnthropicType::Authentication),
    ("\"permission_error\"", AnthropicType::Permission),
    ("\"not_found_error\"", AnthropicType::NotFound),
    ("\"request_too_large\"", AnthropicType::Invalid),
    ("\"invalid_request_error\"", AnthropicType::Invalid),
];

/// What an Anthropic error type stands for (see [`ANTHROPIC_TYPES`]).
#[derive(Clone, Copy)]
enum AnthropicType {
    RateLimit,
    Api,
    Timeout,
    Authentication,
    Permission,
    NotFound,
    Invalid,
}

impl AnthropicType {
    fn kind(self, retry_after: Option<Duration>) -> ErrorKind {
        match self {
            Self::RateLimit => ErrorKind::RateLimited { retry_after },
            Self::Api => ErrorKind::Server {
                status: 500,
                retry_after,
            },
            Self::Timeout => ErrorKind::Timeout {
                phase: TimeoutPhase::Upstream,
            },
            Self::Authentication => ErrorKind::Unauthorized,
            Self::Permission => ErrorKind::Forbidden,
            Self::NotFound => ErrorKind::NotFound,
            Self::Invalid => ErrorKind::BadRequest,
        }
    }
}

/// Classifies a provider's error response.
///
/// `status` is the HTTP status (a 200 is allowed: Anthropic reports
/// `overloaded_error` inside a stream), `headers` the response headers (names
/// matched case-insensitively), `body` the raw error body. Structured
/// `type`/`code` values in the body win over the status (a 429 with
/// `insufficient_quota` is a spend cap, not a rate limit); a few well-known
/// free-text phrases are consulted for 4xx bodies only ("credit balance",
/// and "billing" in a 400 or 403, are spend caps). When the status says
/// nothing (a 2xx stream's error event, an unexpected status such as 418),
/// Anthropic's error `type` decides: `rate_limit_error` → rate limited,
/// `api_error` → server error (500), `timeout_error` → upstream timeout,
/// `authentication_error` / `permission_error` / `not_found_error` → 401 /
/// 403 / 404, `invalid_request_error` / `request_too_large` → bad request;
/// `overloaded_error` (and HTTP 529) is overloaded whatever the status. The body is matched
/// textually, without a JSON parser: a structured value must appear quoted
/// (`"context_length_exceeded"`), which keeps a message that merely mentions
/// the word from matching.
///
/// `retry-after-ms` (milliseconds, may be fractional) wins over `retry-after`
/// (seconds, may be fractional); an HTTP-date `retry-after` is ignored.
///
/// Transport failures (timeouts, refused connections) have no status: the
/// client builds [`ErrorKind::Timeout`] / [`ErrorKind::Connection`] directly.
pub fn classify<K: AsRef<str>, V: AsRef<str>>(status: u16, headers: &[(K, V)], body: &str) -> ErrorKind {
    let lower = body.to_ascii_lowercase();
    let has = |needles: &[&str]| needles.iter().any(|n| lower.contains(n));
    let retry_after = retry_after(headers);
    let client_error = (400..500).contains(&status);

    let billing = matches!(status, 400 | 403) && lower.contains(BILLING_PHRASE);
    if has(QUOTA_CODES) || (client_error && has(QUOTA_PHRASES)) || billing {
        return ErrorKind::QuotaExhausted;
    }
    if has(CONTEXT_CODES) || (client_error && has(CONTEXT_PHRASES)) {
        return ErrorKind::ContextLength;
    }
    if has(REFUSAL_CODES) {
        return ErrorKind::ContentRefusal;
    }
    if has(OVERLOADED_CODES) || status == 529 {
        return ErrorKind::Overloaded { retry_after };
    }
    match status {
        400 | 413 | 422 => ErrorKind::BadRequest,
        401 => ErrorKind::Unauthorized,
        402 => ErrorKind::QuotaExhausted,
        403 => ErrorKind::Forbidden,
        404 => ErrorKind::NotFound,
        408 => ErrorKind::Timeout {
            phase: TimeoutPhase::Upstream,
        },
        409 => ErrorKind::Conflict,
        429 => ErrorKind::RateLimited { retry_after },
        500..=599 => ErrorKind::Server { status, retry_after },
        _ => ANTHROPIC_TYPES
            .iter()
            .find(|(needle, _)| lower.contains(needle))
            .map_or(ErrorKind::Other, |(_, t)| t.kind(retry_after)),
    }
}

/// Reads `retry-after-ms` (preferred) or `retry-after` (seconds) from the headers.
///
/// Negative, non-finite or unparsable values (including HTTP-dates) are ignored.
pub fn retry_after<K: AsRef<str>, V: AsRef<str>>(headers: &[(K, V)]) -> Option<Duration> {
    let find = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.as_ref().trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_ref().trim())
    };
    let parse = |v: &str, scale: f64| {
        v.parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .and_then(|x| Duration::try_from_secs_f64(x * scale).ok())
    };
    find("retry-after-ms")
        .and_then(|v| parse(v, 1e-3))
        .or_else(|| find("retry-after").and_then(|v| parse(v, 1.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_HEADERS: &[(&str, &str)] = &[];

    #[test]
    fn quota_wins_over_rate_limit() {
        let body = r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#;
        assert_eq!(classify(429, NO_HEADERS, body), ErrorKind::QuotaExhausted);
        assert_eq!(
            classify(429, NO_HEADERS, r#"{"error":{"type":"rate_limit_error"}}"#),
            ErrorKind::RateLimited { retry_after: None }
        );
    }

    #[test]
    fn mention_without_quotes_does_not_match() {
        let body = r#"{"error":{"message":"not a content_filter problem","type":"server_error"}}"#;
        assert_eq!(
            classify(500, NO_HEADERS, body),
            ErrorKind::Server {
                status: 500,
                retry_after: None
            }
        );
    }

    #[test]
    fn retry_after_ms_wins_and_garbage_is_ignored() {
        let h = [("Retry-After", "7"), ("retry-after-ms", "1500.5")];
        assert_eq!(retry_after(&h), Some(Duration::from_micros(1_500_500)));
        assert_eq!(
            retry_after(&[("retry-after", "2.5")]),
            Some(Duration::from_millis(2500))
        );
        assert_eq!(
            retry_after(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")]),
            None
        );
        assert_eq!(retry_after(&[("retry-after", "-1")]), None);
        assert_eq!(
            retry_after(&[("retry-after-ms", "NaN"), ("retry-after", "3")]),
            Some(Duration::from_secs(3))
        );
    }

    #[test]
    fn total_timeout_fails_other_timeouts_retry() {
        assert_eq!(
            ErrorKind::Timeout {
                phase: TimeoutPhase::Total
            }
            .disposition(),
            Disposition::Fail
        );
        assert_eq!(
            ErrorKind::Timeout {
                phase: TimeoutPhase::FirstByte
            }
            .disposition(),
            Disposition::Retry
        );
    }
}
