//! [`Dialect`]: how each provider words a refusal (error bodies, statuses)
//! and its quota (`x-ratelimit-*` for OpenAI, `anthropic-ratelimit-*` for
//! Anthropic), so that the one decision step answers in the endpoint's own
//! format.

use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::dates::{http_date, rfc3339_ms};
use crate::quota::{go_duration, QuotaHints};
use crate::wire::{anthropic, json_bytes, openai};

/// Whose wire format an endpoint answers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// OpenAI's (chat completions, embeddings).
    OpenAi,
    /// Anthropic's (messages).
    Anthropic,
}

/// OpenAI's quota headers: (limit, remaining, reset) of requests, then of tokens.
const OPENAI_HINTS: [[&str; 3]; 2] = [
    [
        "x-ratelimit-limit-requests",
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-requests",
    ],
    [
        "x-ratelimit-limit-tokens",
        "x-ratelimit-remaining-tokens",
        "x-ratelimit-reset-tokens",
    ],
];

/// Anthropic's quota headers, in the same order.
const ANTHROPIC_HINTS: [[&str; 3]; 2] = [
    [
        "anthropic-ratelimit-requests-limit",
        "anthropic-ratelimit-requests-remaining",
        "anthropic-ratelimit-requests-reset",
    ],
    [
        "anthropic-ratelimit-tokens-limit",
        "anthropic-ratelimit-tokens-remaining",
        "anthropic-ratelimit-tokens-reset",
    ],
];

/// HTTP 529, Anthropic's "overloaded".
fn overloaded_status() -> StatusCode {
    StatusCode::from_u16(529).unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
}

/// Sets `name: value`.
fn put(headers: &mut HeaderMap, name: &'static str, value: String) {
    if let Ok(v) = HeaderValue::try_from(value) {
        headers.insert(HeaderName::from_static(name), v);
    }
}

impl Dialect {
    /// An error answer of `status`: the body in this dialect's shape, its
    /// `type` being `kind` (and OpenAI's `code`, `code`).
    fn error(self, status: StatusCode, kind: &str, message: &str, code: Option<&str>) -> Response {
        let body = match self {
            Dialect::OpenAi => json_bytes(&openai::OpenAiErrorBody {
                error: openai::OpenAiErrorDetail {
                    message,
                    kind,
                    param: None,
                    code,
                },
            }),
            Dialect::Anthropic => json_bytes(&anthropic::AnthropicErrorBody {
                kind: "error",
                error: anthropic::AnthropicErrorDetail { kind, message },
            }),
        };
        (status, [(CONTENT_TYPE, "application/json")], body).into_response()
    }

    /// `400 invalid_request_error` saying `message`.
    pub(crate) fn invalid_request(self, message: &str) -> Response {
        self.error(StatusCode::BAD_REQUEST, "invalid_request_error", message, None)
    }

    /// The provider's own failure, at once: the status recorded and the
    /// answer (a 500, or "overloaded": OpenAI's 503, Anthropic's 529).
    pub(crate) fn failure(self, overloaded: bool) -> (u16, Response) {
        let (status, kind, message) = match (self, overloaded) {
            (Dialect::OpenAi, false) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "The server had an error while processing your request. Sorry about that!",
            ),
            (Dialect::OpenAi, true) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "The engine is currently overloaded, please try again later.",
            ),
            (Dialect::Anthropic, false) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "api_error",
                "Internal server error",
            ),
            (Dialect::Anthropic, true) => (overloaded_status(), "overloaded_error", "Overloaded"),
        };
        (status.as_u16(), self.error(status, kind, message, None))
    }

    /// What a hanging or waiting handler answers when the mock shuts down.
    pub(crate) fn shutting_down(self) -> Response {
        const MESSAGE: &str = "The mock provider is shutting down.";
        match self {
            Dialect::OpenAi => self.error(StatusCode::SERVICE_UNAVAILABLE, "server_error", MESSAGE, None),
            Dialect::Anthropic => self.error(overloaded_status(), "overloaded_error", MESSAGE, None),
        }
    }

    /// The quota headers of an admitted or refused request: OpenAI's
    /// `x-ratelimit-*` (resets as Go durations), or Anthropic's
    /// `anthropic-ratelimit-*` with a `date` header of the same clock
    /// (resets are RFC 3339 times, which a client reads against `date`).
    pub(crate) fn put_hints(self, headers: &mut HeaderMap, hints: &QuotaHints) {
        // `date` has whole seconds: resets count from the same truncated second.
        let date_s = unix_ms() / 1_000;
        let names = match self {
            Dialect::OpenAi => &OPENAI_HINTS,
            Dialect::Anthropic => {
                put(headers, "date", http_date(date_s));
                &ANTHROPIC_HINTS
            }
        };
        for (dim, &[limit, remaining, reset]) in [hints.requests, hints.tokens].into_iter().zip(names) {
            let Some(d) = dim else { continue };
            put(headers, limit, d.limit.to_string());
            put(headers, remaining, d.remaining.to_string());
            let at = match self {
                Dialect::OpenAi => go_duration(d.reset_ms),
                Dialect::Anthropic => rfc3339_ms(date_s * 1_000 + d.reset_ms),
            };
            put(headers, reset, at);
        }
    }

    /// The 429 of the mock's quota: `kind` (`requests` or `tokens`) refused
    /// `cost` tokens of `model`, which would fit in `retry_after_ms`.
    pub(crate) fn rate_limited(
        self,
        model: &str,
        kind: &'static str,
        retry_after_ms: u64,
        hints: &QuotaHints,
        cost: u64,
    ) -> Response {
        let mut headers = HeaderMap::new();
        self.put_hints(&mut headers, hints);
        // Whole seconds, rounded up, as both providers send it.
        put(
            &mut headers,
            "retry-after",
            retry_after_ms.div_ceil(1_000).to_string(),
        );
        let mut response = match self {
            Dialect::OpenAi => {
                put(&mut headers, "retry-after-ms", retry_after_ms.to_string());
                let message = openai_rate_limit_message(model, kind, retry_after_ms, hints, cost);
                let code = Some("rate_limit_exceeded");
                self.error(StatusCode::TOO_MANY_REQUESTS, kind, &message, code)
            }
            Dialect::Anthropic => {
                let message = format!(
                    "This request would exceed the rate limit for {kind} on {model} (pressure mock). \
                     Please try again in {retry_after_ms} ms."
                );
                self.error(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", &message, None)
            }
        };
        response.headers_mut().extend(headers);
        response
    }
}

/// OpenAI's 429 message: the limit, what was used and asked, and the wait.
fn openai_rate_limit_message(
    model: &str,
    kind: &'static str,
    retry_after_ms: u64,
    hints: &QuotaHints,
    cost: u64,
) -> String {
    let (limit, used, requested) = match (kind, hints.requests, hints.tokens) {
        ("requests", Some(r), _) => (r.limit, r.limit - r.remaining, 1),
        (_, _, Some(t)) => (t.limit, t.limit - t.remaining, cost),
        _ => (0, 0, 0),
    };
    format!(
        "Rate limit reached for {kind} on {model} (pressure mock): Limit {limit}, Used {used}, \
         Requested {requested}. Please try again in {}.",
        go_duration(retry_after_ms)
    )
}

/// Unix time in milliseconds: an HTTP `date` is wall-clock time by
/// definition; nothing is timed by it.
pub(crate) fn unix_ms() -> u64 {
    #[allow(clippy::disallowed_methods)]
    let now = std::time::SystemTime::now();
    now.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
