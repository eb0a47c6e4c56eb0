//! Every refusal the gateway answers itself, as one value: [`Rejection`].
//!
//! The layers, the proxy and the OpenAI endpoint return a `Rejection`
//! instead of building a response; the outermost layer counts it, logs it
//! and renders it here, in one of two [`Dialect`]s:
//!
//! * **gateway** — `{"error":{"type","message",...}}` (a 429 adds
//!   `resource`, `dimension`, `retryAfterMs`);
//! * **OpenAI** on the LLM routes (`/v1/*` when `gateway.llm` is set) —
//!   `{"error":{"message","type","param","code"}}`, which every OpenAI SDK
//!   parses;
//! * **decision** on `POST /v1/acquire` of the decision listener
//!   (`crate::decisions`) — a 429 is `{"allowed":false,"waitTimeMs",
//!   "resource","dimension"}`, every other refusal the gateway dialect.
//!
//! Client faults are 4xx (bad request 400, bad token 401, unknown path or
//! resource 404, body too slow 408, permit gone 410, body too large 413,
//! rate limited 429) and upstream faults 5xx (limiter unavailable or too
//! many permits held 503, upstream unreachable or failed 502, upstream too
//! slow 504) — never the other way round.

use crate::config::ConfigError;
use crate::layers::tenant::jwt::AuthError;
use crate::metrics::{GatewayMetrics, Layer};
use axum::body::Body;
use http::{header, HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use pressure_core::{Denial, Dimension, Limits};
use pressure_llm::pipeline::LlmError;
use serde_json::{json, Map, Value};
use std::borrow::Cow;
use std::time::Duration;

mod flood;

/// Which error shape a route speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dialect {
    /// `{"error":{"type","message",...}}`.
    #[default]
    Gateway,
    /// `{"error":{"message","type","param","code"}}`.
    OpenAi,
    /// The decision API's `POST /v1/acquire`: a 429 is `{"allowed":false,
    /// "waitTimeMs","resource","dimension"}`; the rest as [`Dialect::Gateway`].
    Decision,
    /// Anthropic's Messages API: `{"type":"error","error":{"type",
    /// "message"}}`, the type from the status (`overloaded_error` is a 529,
    /// as Anthropic answers it).
    Anthropic,
    /// OpenAI's Responses API: OpenAI's shape, and a spent budget is
    /// `insufficient_quota` in `code` too (what Codex CLI stops on; it waits
    /// out a rate limit's `retry-after`, however long).
    Responses,
}

impl Dialect {
    /// Whether it is one of the LLM dialects (OpenAI's, Anthropic's,
    /// Responses'), whose SDKs read `retry-after-ms`.
    fn is_llm(self) -> bool {
        matches!(self, Self::OpenAi | Self::Anthropic | Self::Responses)
    }
}

/// Anthropic's error `type` for an answer of `status`.
fn anthropic_error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 408 | 409 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 | 405 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

/// `Retry-After: n` without an allocation for the waits most 429s carry
/// (up to a minute; longer ones are formatted).
fn seconds_value(secs: u64) -> HeaderValue {
    const SMALL: [&str; 61] = [
        "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16", "17",
        "18", "19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31", "32", "33", "34",
        "35", "36", "37", "38", "39", "40", "41", "42", "43", "44", "45", "46", "47", "48", "49", "50", "51",
        "52", "53", "54", "55", "56", "57", "58", "59", "60",
    ];
    match usize::try_from(secs).ok().and_then(|i| SMALL.get(i)) {
        Some(s) => HeaderValue::from_static(s),
        None => HeaderValue::from(secs),
    }
}

/// `RateLimit-Policy`.
static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// `"name";q=QUOTA;w=WINDOW` (no `w` for concurrency) and
/// `"name";r=0;t=SECS`: the draft-ietf-httpapi-ratelimit-headers fields of
/// a 429.
fn rate_limit_fields(r: &RateLimited, quota: u64, window: u64) -> (Option<HeaderValue>, Option<HeaderValue>) {
    let name = r.dimension.as_str();
    let (mut q, mut w, mut t) = (itoa::Buffer::new(), itoa::Buffer::new(), itoa::Buffer::new());
    let (q, w, t) = (
        q.format(quota),
        w.format(window),
        t.format(retry_after_secs(r.wait)),
    );
    // Sized exactly: a full `String` becomes `Bytes` without another
    // allocation.
    let w_len = if window > 0 { 3 + w.len() } else { 0 };
    let mut policy = String::with_capacity(1 + name.len() + 4 + q.len() + w_len);
    policy.push('"');
    policy.push_str(name);
    policy.push_str("\";q=");
    policy.push_str(q);
    if window > 0 {
        policy.push_str(";w=");
        policy.push_str(w);
    }
    let mut now = String::with_capacity(1 + name.len() + 8 + t.len());
    now.push('"');
    now.push_str(name);
    now.push_str("\";r=0;t=");
    now.push_str(t);
    (
        HeaderValue::from_maybe_shared(bytes::Bytes::from(policy)).ok(),
        HeaderValue::from_maybe_shared(bytes::Bytes::from(now)).ok(),
    )
}

/// A denial by a limit: what the 429 says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimited {
    /// The resource that refused.
    pub resource: String,
    /// The layer that charged it.
    pub layer: Layer,
    /// The dimension that needed the longest wait.
    pub dimension: Dimension,
    /// The earliest time the same request could fit.
    pub wait: Duration,
    /// `(quota, window seconds)` of that dimension, for `RateLimit-Policy`
    /// (window 0 for concurrency).
    pub policy: Option<(u64, u64)>,
    /// The tenant, when the tenant layer refused.
    pub namespace_id: Option<String>,
    /// Set when `dimension` is a calendar budget (`requestsPerDay`, …):
    /// the 429 is `budget_exceeded`.
    pub budget: Option<Spent>,
}

/// A spent calendar budget, as a 429 reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spent {
    /// What the period has used (a refused request: the whole budget).
    pub spent: u64,
    /// The budget of the period.
    pub budget: u64,
    /// Whether the period ends after the request's deadline
    /// (`gateway.timeouts.totalMs`): the answer then carries
    /// `x-should-retry: false`, which OpenAI's SDKs obey.
    pub beyond_deadline: bool,
}

impl RateLimited {
    /// The 429 of `denial` on `resource` (limited by `limits`).
    pub fn new(
        resource: &str,
        limits: &Limits,
        denial: &Denial,
        layer: Layer,
        namespace_id: Option<&str>,
    ) -> Self {
        Self {
            resource: resource.to_owned(),
            layer,
            dimension: denial.dimension,
            wait: denial.wait,
            policy: policy(limits, denial.dimension),
            namespace_id: namespace_id.map(str::to_owned),
            budget: None,
        }
    }

    /// The same 429 as a spent budget when its dimension is a calendar
    /// one, for a request whose deadline is `deadline` from now. A refused
    /// demand of one request means the period used all of it.
    pub fn with_budget(mut self, limits: &Limits, deadline: Duration) -> Self {
        if self.dimension.calendar().is_some() {
            let budget = limits.get(self.dimension).unwrap_or(0);
            self.budget = Some(Spent {
                spent: budget,
                budget,
                beyond_deadline: self.wait > deadline,
            });
        }
        self
    }
}

/// A refusal: see the module docs for the statuses.
#[derive(Debug)]
pub enum Rejection {
    /// `429`: a limit is exhausted.
    RateLimited(Box<RateLimited>),
    /// `503`: the limiter could not decide (the store is unavailable in
    /// `closed` mode, or failed); never dressed up as a 429.
    LimiterUnavailable {
        /// The resource being charged.
        resource: String,
        /// The layer.
        layer: Layer,
        /// When to try again.
        retry_after: Duration,
        /// What failed.
        reason: String,
    },
    /// `401`: a credential is missing (auth required) or invalid: a bad
    /// JWT or an unknown API key (the body's `code` says which).
    Unauthorized(AuthError),
    /// `400`: a request the gateway cannot accept.
    BadRequest(Cow<'static, str>),
    /// `400` on the LLM endpoint, with OpenAI's `param` and `code`.
    InvalidRequest {
        /// What is wrong.
        message: String,
        /// The offending parameter.
        param: Option<String>,
        /// OpenAI's code, e.g. `missing_required_parameter`.
        code: &'static str,
    },
    /// `404`: no upstream serves the path.
    NotFound(String),
    /// `408`: the client stopped sending its body, or did not complete it
    /// in time.
    RequestTimeout {
        /// The bound on the whole body that ran out, milliseconds; none:
        /// the body idled for `timeouts.bodyReadMs`.
        whole_ms: Option<u64>,
    },
    /// `413`: the body is larger than `limits.maxBodyBytes`.
    PayloadTooLarge {
        /// The limit, bytes.
        max: u64,
    },
    /// `502`: no connection to the upstream.
    UpstreamUnavailable {
        /// Its name.
        upstream: String,
        /// Why.
        reason: String,
        /// The cause, for `pressure_gateway_upstream_failures_total`.
        kind: UpstreamFailure,
    },
    /// `502`: the exchange with the upstream failed.
    UpstreamError {
        /// Its name.
        upstream: String,
        /// Why.
        reason: String,
        /// The cause, for `pressure_gateway_upstream_failures_total`.
        kind: UpstreamFailure,
    },
    /// `504`: the upstream sent no response head in time.
    UpstreamTimeout {
        /// Its name.
        upstream: String,
        /// The bound, milliseconds.
        after_ms: u64,
    },
    /// An LLM pipeline failure, with the status its taxonomy gives. A `429`
    /// or `503` carries `Retry-After` (and OpenAI's `retry-after-ms`): the
    /// pipeline's hint ([`LlmError::retry_after`]: limiter wait, breaker
    /// open time, provider `retry-after`), or `LLM_DEFAULT_RETRY_AFTER`.
    Llm(LlmError),
    /// `500`: the gateway itself failed.
    Internal(String),
    /// `404`: the decision API was asked about a resource the config does
    /// not name.
    UnknownResource(String),
    /// `410`: the decision API's permit expired (not renewed within its
    /// lease TTL) or was released.
    PermitGone,
    /// `401`: a call to the decision listener without its service token
    /// (`gateway.decisions.tokenEnv`), or with a wrong one.
    ServiceToken {
        /// Whether a token was given at all.
        given: bool,
    },
    /// `503`: the decision listener holds `gateway.decisions.maxPermits`
    /// permits already.
    TooManyPermits {
        /// The bound.
        max: usize,
    },
    /// `401`: a call to the admin listener without its token
    /// (`gateway.admin.tokenEnv`), or with a wrong one.
    AdminToken {
        /// Whether a token was given at all.
        given: bool,
    },
    /// `404` on the admin listener: no such route, or nothing behind it
    /// (the message says which).
    AdminNotFound(&'static str),
    /// `404` on the admin listener: a page of the LLM stack, on a gateway
    /// without `gateway.llm` (the message says which page).
    NoLlm(&'static str),
    /// `405` on the admin listener.
    MethodNotAllowed,
    /// `503`: the manual queue's store failed.
    QueueUnavailable(String),
    /// `400`: a reload found the config invalid (names its JSON path).
    InvalidConfig(ConfigError),
}

/// Why an upstream exchange failed, as counted in
/// `pressure_gateway_upstream_failures_total{upstream,kind}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UpstreamFailure {
    /// Nothing listens there (`ECONNREFUSED`).
    ConnectRefused,
    /// Connecting took longer than `timeouts.connectMs`.
    ConnectTimeout,
    /// Any other connect failure (unreachable, DNS, …).
    ConnectError,
    /// No response head within `timeouts.totalMs` (a `504`).
    Timeout,
    /// The upstream closed or reset the connection before its response
    /// head was complete.
    Reset,
    /// The upstream answered something that is not a valid HTTP/1.1
    /// response (or an unasked-for `101`).
    BadResponse,
    /// Anything else.
    Error,
}

impl UpstreamFailure {
    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ConnectRefused => "connect_refused",
            Self::ConnectTimeout => "connect_timeout",
            Self::ConnectError => "connect_error",
            Self::Timeout => "timeout",
            Self::Reset => "reset",
            Self::BadResponse => "bad_response",
            Self::Error => "error",
        }
    }
}

/// How loudly a rejection is logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// A client's own fault or a limit doing its job.
    Info,
    /// Something downstream or in the store is wrong.
    Warn,
    /// The gateway is wrong.
    Error,
}

impl Rejection {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
            Self::LimiterUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::BadRequest(_) | Self::InvalidRequest { .. } => StatusCode::BAD_REQUEST,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::RequestTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UpstreamUnavailable { .. } | Self::UpstreamError { .. } => StatusCode::BAD_GATEWAY,
            Self::UpstreamTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            Self::Llm(e) => StatusCode::from_u16(e.describe().status).unwrap_or(StatusCode::BAD_GATEWAY),
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::UnknownResource(_) => StatusCode::NOT_FOUND,
            Self::PermitGone => StatusCode::GONE,
            Self::ServiceToken { .. } => StatusCode::UNAUTHORIZED,
            Self::TooManyPermits { .. } | Self::QueueUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::AdminToken { .. } => StatusCode::UNAUTHORIZED,
            Self::AdminNotFound(_) | Self::NoLlm(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::InvalidConfig(_) => StatusCode::BAD_REQUEST,
        }
    }

    /// How loudly it is logged.
    pub fn level(&self) -> Level {
        match self {
            Self::LimiterUnavailable { .. }
            | Self::UpstreamUnavailable { .. }
            | Self::UpstreamError { .. }
            | Self::UpstreamTimeout { .. }
            | Self::TooManyPermits { .. } => Level::Warn,
            Self::Internal(_) => Level::Error,
            // The LLM endpoint logs its own event line.
            _ => Level::Info,
        }
    }

    /// The machine-readable type of the gateway dialect.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::RateLimited(r) if r.budget.is_some() => "budget_exceeded",
            Self::RateLimited(_) => "rate_limited",
            Self::LimiterUnavailable { .. } => "limiter_unavailable",
            Self::Unauthorized(_) => "unauthorized",
            Self::BadRequest(_) | Self::InvalidRequest { .. } => "bad_request",
            Self::NotFound(_) => "not_found",
            Self::RequestTimeout { .. } => "request_timeout",
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::UpstreamUnavailable { .. } => "upstream_unavailable",
            Self::UpstreamError { .. } => "upstream_error",
            Self::UpstreamTimeout { .. } => "upstream_timeout",
            Self::Llm(e) => e.label(),
            Self::Internal(_) => "internal_error",
            Self::UnknownResource(_) => "unknown_resource",
            Self::PermitGone => "permit_gone",
            Self::ServiceToken { .. } => "unauthorized",
            Self::TooManyPermits { .. } => "too_many_permits",
            Self::AdminToken { .. } => "unauthorized",
            Self::AdminNotFound(_) => "not_found",
            Self::NoLlm(_) => "no_llm",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::QueueUnavailable(_) => "queue_unavailable",
            Self::InvalidConfig(_) => "invalid_config",
        }
    }

    /// The human-readable message.
    pub fn message(&self) -> String {
        match self {
            Self::RateLimited(r) if let Some(b) = r.budget => format!(
                "{}: {} budget of {} is spent ({} used); it resets in {} s",
                r.resource,
                r.dimension.as_str(),
                b.budget,
                b.spent,
                retry_after_secs(r.wait)
            ),
            Self::RateLimited(r) => format!(
                "{}: {} exhausted; retry in {} s",
                r.resource,
                r.dimension.as_str(),
                retry_after_secs(r.wait)
            ),
            Self::LimiterUnavailable { .. } => "the limiter could not decide; try again".into(),
            Self::Unauthorized(e) => e.to_string(),
            Self::BadRequest(m) => m.to_string(),
            Self::InvalidRequest { message, .. } => message.clone(),
            Self::NotFound(path) => format!("no upstream serves path {path}"),
            Self::RequestTimeout { whole_ms: None } => "the request body was not received in time".into(),
            Self::RequestTimeout { whole_ms: Some(ms) } => {
                format!("the request body was not complete within {ms} ms; the upstream was not contacted")
            }
            Self::PayloadTooLarge { max } => format!("request body exceeds {max} bytes"),
            Self::UpstreamUnavailable { upstream, reason, .. } => {
                format!("upstream {upstream} is unavailable: {reason}")
            }
            Self::UpstreamError { upstream, reason, .. } => format!("upstream {upstream} failed: {reason}"),
            Self::UpstreamTimeout { upstream, after_ms } => {
                format!("upstream {upstream} did not answer within {after_ms} ms")
            }
            Self::Llm(e) => e.to_string(),
            Self::Internal(m) => m.clone(),
            Self::UnknownResource(id) => format!("no configured resource is named {id:?}"),
            Self::PermitGone => "the permit expired or was released".into(),
            Self::ServiceToken { given: true } => "invalid service token".into(),
            Self::ServiceToken { given: false } => "a service token is required".into(),
            Self::TooManyPermits { max } => format!("the decision listener already holds {max} permits"),
            Self::AdminToken { given: true } => "invalid bearer token".into(),
            Self::AdminToken { given: false } => {
                "a bearer token is required (a browser: open /dashboard?token=<token>)".into()
            }
            Self::AdminNotFound(m) | Self::NoLlm(m) => (*m).to_owned(),
            Self::MethodNotAllowed => "this admin route does not answer that method".into(),
            Self::QueueUnavailable(m) => m.clone(),
            Self::InvalidConfig(e) => e.to_string(),
        }
    }

    /// `Retry-After`, when the refusal has one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited(r) => Some(r.wait),
            Self::LimiterUnavailable { retry_after, .. } => Some(*retry_after),
            Self::TooManyPermits { .. } => Some(Duration::from_secs(1)),
            Self::Llm(e) => {
                let status = e.describe().status;
                (status == 429 || status == 503).then(|| e.retry_after().unwrap_or(LLM_DEFAULT_RETRY_AFTER))
            }
            _ => None,
        }
    }

    /// Counts it in `metrics` and logs it (one structured line; denials at
    /// `info` under the target `pressure::denial`, at most `denial_lines`
    /// per resource per second, see `crate::denial_log`; 0: no bound).
    pub fn record(&self, metrics: &GatewayMetrics, denial_lines: u32) {
        match self {
            Self::RateLimited(r) => {
                metrics.denied(&r.resource, r.layer);
                if !metrics.denial_logs().denied.admit(
                    &r.resource,
                    r.layer,
                    denial_lines,
                    tokio::time::Instant::now(),
                ) {
                    return;
                }
                tracing::info!(
                    target: "pressure::denial",
                    resource = r.resource.as_str(),
                    layer = r.layer.as_str(),
                    wait_time_ms = u64::try_from(r.wait.as_millis()).unwrap_or(u64::MAX),
                    namespace_id = r.namespace_id.as_deref().unwrap_or(""),
                    dimension = r.dimension.as_str(),
                    "request denied"
                );
            }
            Self::LimiterUnavailable {
                resource,
                layer,
                reason,
                ..
            } => {
                metrics.limiter_unavailable(*layer);
                if !metrics.denial_logs().unavailable.admit(
                    resource,
                    *layer,
                    denial_lines,
                    tokio::time::Instant::now(),
                ) {
                    return;
                }
                tracing::warn!(
                    target: "pressure::denial",
                    resource = resource.as_str(),
                    layer = layer.as_str(),
                    reason = reason.as_str(),
                    "limiter unavailable"
                );
            }
            Self::Unauthorized(e) => metrics.unauthorized(e.reason()),
            Self::ServiceToken { .. } => metrics.unauthorized("service_token"),
            Self::TooManyPermits { max } => {
                tracing::warn!(max_permits = max, "decision listener: too many permits held");
            }
            Self::UpstreamUnavailable {
                upstream,
                reason,
                kind,
            } => {
                metrics.upstream_error("unavailable");
                metrics.traffic().upstream_failure(upstream, kind.as_str());
                tracing::warn!(
                    upstream = upstream.as_str(),
                    error = reason.as_str(),
                    "cannot connect to upstream"
                );
            }
            Self::UpstreamError {
                upstream,
                reason,
                kind,
            } => {
                metrics.upstream_error("error");
                metrics.traffic().upstream_failure(upstream, kind.as_str());
                tracing::warn!(
                    upstream = upstream.as_str(),
                    error = reason.as_str(),
                    "upstream exchange failed"
                );
            }
            Self::UpstreamTimeout { upstream, after_ms } => {
                metrics.upstream_error("timeout");
                metrics
                    .traffic()
                    .upstream_failure(upstream, UpstreamFailure::Timeout.as_str());
                tracing::warn!(
                    upstream = upstream.as_str(),
                    total_ms = after_ms,
                    "upstream did not answer in time"
                );
            }
            Self::Internal(m) => tracing::error!(error = m.as_str(), "internal error"),
            _ => {}
        }
    }

    /// The JSON body in `dialect`: what [`render`](Self::render) answers
    /// with, and what a stream that fails after its head writes as its
    /// last event (`crate::openai::sse`).
    pub fn body(&self, dialect: Dialect) -> String {
        match (dialect, self) {
            (Dialect::Anthropic, _) => self.anthropic_body().to_string(),
            (Dialect::Responses, _) => self.responses_body().to_string(),
            // The flood path: written directly, the same bytes as below.
            (Dialect::Gateway, Self::RateLimited(r)) if r.budget.is_none() => flood::rate_limited_body(r),
            (Dialect::Decision, Self::RateLimited(r)) => decision_denied_body(r).to_string(),
            // LLM errors speak OpenAI's shape on every route.
            (_, Self::Llm(_)) | (Dialect::OpenAi, _) => self.openai_body().to_string(),
            (Dialect::Gateway | Dialect::Decision, _) => self.gateway_body().to_string(),
        }
    }

    /// The response, in `dialect`.
    pub fn render(&self, dialect: Dialect) -> Response<Body> {
        let (body, head) = match self {
            // A plain 429 outside the OpenAI dialect: made of the flood's
            // parts (`flood.rs`).
            Self::RateLimited(r)
                if matches!(dialect, Dialect::Gateway | Dialect::Decision) && r.budget.is_none() =>
            {
                let (head, body) = flood::parts(r, dialect, |h| self.head(dialect, h), || self.body(dialect));
                (body, Some(head))
            }
            _ => (self.body(dialect), None),
        };
        // Shrunk to its length (in place; the flood's bodies are sized
        // exactly): a full buffer becomes `Bytes` without another
        // allocation.
        let body = bytes::Bytes::from(body.into_bytes().into_boxed_slice());
        let mut resp = Response::new(Body::from(body));
        *resp.status_mut() = self.status_in(dialect);
        match head {
            Some(head) => *resp.headers_mut() = head,
            None => self.head(dialect, resp.headers_mut()),
        }
        resp
    }

    /// The headers of [`render`](Self::render).
    fn head(&self, dialect: Dialect, h: &mut HeaderMap) {
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(wait) = self.retry_after() {
            h.insert(header::RETRY_AFTER, seconds_value(retry_after_secs(wait)));
            if dialect.is_llm() {
                // What OpenAI's and Anthropic's SDKs read first; whole
                // milliseconds, at least 1.
                let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
                h.insert("retry-after-ms", HeaderValue::from(ms));
            }
        }
        // A spent account or budget does not come back by retrying (not
        // within the request's deadline): OpenAI's SDKs honour this header.
        let futile = match self {
            Self::Llm(e) => e.should_retry() == Some(false),
            Self::RateLimited(r) => r.budget.is_some_and(|b| b.beyond_deadline),
            _ => false,
        };
        if futile {
            h.insert("x-should-retry", HeaderValue::from_static("false"));
        }
        match self {
            Self::Unauthorized(_) => {
                h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            Self::ServiceToken { given } => {
                let challenge = if *given {
                    "Bearer realm=\"pressure-decisions\", error=\"invalid_token\""
                } else {
                    "Bearer realm=\"pressure-decisions\""
                };
                h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
            }
            Self::AdminToken { given } => {
                let challenge = if *given {
                    "Bearer realm=\"pressure-admin\", error=\"invalid_token\""
                } else {
                    "Bearer realm=\"pressure-admin\""
                };
                h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
            }
            Self::RateLimited(r) => {
                if let Some((quota, window)) = r.policy {
                    let (policy, now) = rate_limit_fields(r, quota, window);
                    if let Some(v) = policy {
                        h.insert(RATELIMIT_POLICY.clone(), v);
                    }
                    if let Some(v) = now {
                        h.insert(RATELIMIT.clone(), v);
                    }
                }
            }
            _ => {}
        }
    }

    fn gateway_body(&self) -> Value {
        let mut error = Map::new();
        error.insert("type".into(), Value::from(self.kind()));
        error.insert("message".into(), Value::from(self.message()));
        match self {
            Self::RateLimited(r) => {
                error.insert("resource".into(), Value::from(r.resource.as_str()));
                error.insert("dimension".into(), Value::from(r.dimension.as_str()));
                error.insert(
                    "retryAfterMs".into(),
                    Value::from(u64::try_from(r.wait.as_millis()).unwrap_or(u64::MAX)),
                );
                if let Some(b) = r.budget {
                    error.insert("spent".into(), Value::from(b.spent));
                    error.insert("budget".into(), Value::from(b.budget));
                }
            }
            Self::LimiterUnavailable { resource, .. } | Self::UnknownResource(resource) => {
                error.insert("resource".into(), Value::from(resource.as_str()));
            }
            Self::Unauthorized(e) => {
                error.insert("code".into(), Value::from(e.reason()));
            }
            Self::InvalidConfig(e) => {
                error.insert("path".into(), Value::from(e.path.as_str()));
                error.insert("problem".into(), Value::from(e.problem.as_str()));
            }
            _ => {}
        }
        json!({ "error": error })
    }

    /// The status in `dialect`: Anthropic answers an overload (every
    /// `503` of ours) with `529`, which its clients retry as such.
    pub fn status_in(&self, dialect: Dialect) -> StatusCode {
        let status = self.status();
        if dialect == Dialect::Anthropic && status == StatusCode::SERVICE_UNAVAILABLE {
            return StatusCode::from_u16(529).unwrap_or(status);
        }
        status
    }

    /// Anthropic's error shape: `{"type":"error","error":{"type","message"}}`
    /// (a field at fault is named in the message, as Anthropic does).
    fn anthropic_body(&self) -> Value {
        let ty = anthropic_error_type(self.status_in(Dialect::Anthropic));
        let message = match self {
            Self::InvalidRequest {
                param: Some(param),
                message,
                ..
            } if !message.starts_with(param.as_str()) => format!("{param}: {message}"),
            Self::Llm(e) if let Some(param) = e.param_path() => {
                let message = e.to_string();
                if message.starts_with(param) {
                    message
                } else {
                    format!("{param}: {message}")
                }
            }
            _ => self.message(),
        };
        json!({"type": "error", "error": {"type": ty, "message": message}})
    }

    /// OpenAI's shape, with a spent budget's `code` `insufficient_quota`
    /// (see [`Dialect::Responses`]) and a JSON-path `param` where the
    /// request had one.
    fn responses_body(&self) -> Value {
        let mut body = self.openai_body();
        let spent = match self {
            Self::Llm(e) => e.describe().error_type == "insufficient_quota",
            Self::RateLimited(r) => r.budget.is_some(),
            _ => false,
        };
        if let Some(error) = body.get_mut("error").and_then(Value::as_object_mut) {
            if spent {
                error.insert("code".into(), Value::from("insufficient_quota"));
            }
            if let Self::Llm(e) = self {
                if let Some(param) = e.param_path() {
                    error.insert("param".into(), Value::from(param));
                }
            }
        }
        body
    }

    fn openai_body(&self) -> Value {
        let (ty, code, param): (&str, Option<&str>, Option<&str>) = match self {
            Self::Llm(e) => {
                let d = e.describe();
                (d.error_type, d.code, d.param)
            }
            Self::InvalidRequest { param, code, .. } => {
                ("invalid_request_error", Some(code), param.as_deref())
            }
            Self::RateLimited(r) if r.budget.is_some() => (
                "insufficient_quota",
                Some("budget_exceeded"),
                Some(r.dimension.as_str()),
            ),
            Self::RateLimited(_) => ("rate_limit_error", Some("rate_limit_exceeded"), None),
            Self::LimiterUnavailable { .. } => ("server_error", Some("limiter_unavailable"), None),
            Self::Unauthorized(_) => ("invalid_request_error", Some("invalid_api_key"), None),
            Self::BadRequest(_) => ("invalid_request_error", Some("bad_request"), None),
            Self::NotFound(_) => ("invalid_request_error", Some("not_found"), None),
            Self::RequestTimeout { .. } => ("invalid_request_error", Some("request_timeout"), None),
            Self::PayloadTooLarge { .. } => ("invalid_request_error", Some("request_too_large"), None),
            Self::UpstreamUnavailable { .. } | Self::UpstreamError { .. } => {
                ("server_error", Some("upstream_error"), None)
            }
            Self::UpstreamTimeout { .. } => ("server_error", Some("upstream_timeout"), None),
            Self::Internal(_) => ("server_error", None, None),
            Self::UnknownResource(_) => ("invalid_request_error", Some("unknown_resource"), None),
            Self::PermitGone => ("invalid_request_error", Some("permit_gone"), None),
            Self::ServiceToken { .. } => ("invalid_request_error", Some("invalid_api_key"), None),
            Self::TooManyPermits { .. } => ("server_error", Some("too_many_permits"), None),
            Self::AdminToken { .. } => ("invalid_request_error", Some("invalid_api_key"), None),
            Self::AdminNotFound(_) | Self::NoLlm(_) => ("invalid_request_error", Some("not_found"), None),
            Self::MethodNotAllowed => ("invalid_request_error", Some("method_not_allowed"), None),
            Self::QueueUnavailable(_) => ("server_error", Some("queue_unavailable"), None),
            Self::InvalidConfig(_) => ("invalid_request_error", Some("invalid_config"), None),
        };
        json!({"error": {"message": self.message(), "type": ty, "param": param, "code": code}})
    }
}

impl axum::response::IntoResponse for Rejection {
    /// Gateway dialect (the admin listener, which counts and logs nothing).
    fn into_response(self) -> axum::response::Response {
        self.render(Dialect::Gateway)
    }
}

/// The decision dialect's 429 body: what a caller of `POST /v1/acquire`
/// reads (`allowed`, how long to wait, which resource and dimension).
fn decision_denied_body(r: &RateLimited) -> Value {
    json!({
        "allowed": false,
        "waitTimeMs": u64::try_from(r.wait.as_millis()).unwrap_or(u64::MAX),
        "resource": r.resource,
        "dimension": r.dimension.as_str(),
    })
}

/// The quota and window (seconds) of `dim` in `limits`, for the policy
/// header: a UTC calendar day is 86 400 s; a calendar month has no fixed
/// length, so, like concurrency, it states no window (0).
fn policy(limits: &Limits, dim: Dimension) -> Option<(u64, u64)> {
    let window = match (dim.window(), dim.calendar()) {
        (Some(w), _) => w.as_secs(),
        (None, Some(pressure_core::Calendar::Day)) => 86_400,
        _ => 0,
    };
    limits.get(dim).map(|q| (q, window))
}

/// `Retry-After` of an LLM `429`/`503` whose pipeline had no better hint
/// (e.g. every level declined): long enough that an SDK's retry does not
/// re-run the chain at once.
pub(crate) const LLM_DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// `Retry-After` seconds: the wait rounded up, at least 1.
pub(crate) fn retry_after_secs(wait: Duration) -> u64 {
    // Rounded up: the whole seconds, and one more for a started one.
    wait.as_secs()
        .saturating_add(u64::from(wait.subsec_nanos() > 0))
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn body(r: Response<Body>) -> Value {
        let bytes = r.into_body().collect().await.expect("body").to_bytes();
        serde_json::from_slice(&bytes).expect("json")
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1_000)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1_001)), 2);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_nanos(2_000_000_001)), 3);
        assert_eq!(retry_after_secs(Duration::MAX), u64::MAX);
    }

    #[tokio::test]
    async fn the_direct_429_body_is_the_tree_renderers_bytes() {
        let cases = [
            ("gateway:route:webhooks-github", 960),
            ("gateway:tenant:\"quoted\" \\ back\nline ü", 0),
            ("", u64::from(u32::MAX)),
        ];
        // Every dimension: their names go into the body unescaped.
        let all = cases
            .iter()
            .flat_map(|&case| Dimension::ALL.iter().map(move |&dimension| (case, dimension)));
        for ((resource, wait_ms), dimension) in all {
            let r = Rejection::RateLimited(Box::new(RateLimited {
                resource: resource.to_owned(),
                layer: Layer::PreAuth,
                dimension,
                wait: Duration::from_millis(wait_ms),
                policy: Some((5, 60)),
                namespace_id: None,
                budget: None,
            }));
            let fast = r.render(Dialect::Gateway);
            assert_eq!(fast.status(), 429);
            let bytes = fast.into_body().collect().await.expect("body").to_bytes();
            assert_eq!(
                std::str::from_utf8(&bytes).expect("utf-8"),
                r.gateway_body().to_string(),
                "{resource:?}"
            );
        }
    }

    #[tokio::test]
    async fn one_rejection_two_dialects() {
        let r = Rejection::PayloadTooLarge { max: 10 };
        let g = r.render(Dialect::Gateway);
        assert_eq!(g.status(), 413);
        let g = body(g).await;
        assert_eq!(g["error"]["type"], "payload_too_large");
        let o = body(r.render(Dialect::OpenAi)).await;
        assert_eq!(o["error"]["type"], "invalid_request_error");
        assert_eq!(o["error"]["code"], "request_too_large");
        assert!(o["error"].get("param").is_some());
    }

    #[tokio::test]
    async fn rate_limited_has_headers_and_fields() {
        let limits = Limits::default().requests_per_second(5);
        let r = Rejection::RateLimited(Box::new(RateLimited {
            resource: "gateway:route:x".into(),
            layer: Layer::PreAuth,
            dimension: Dimension::RequestsPerSecond,
            wait: Duration::from_millis(960),
            policy: policy(&limits, Dimension::RequestsPerSecond),
            namespace_id: None,
            budget: None,
        }));
        let budget = Limits::default()
            .cost_micro_usd_per_day(500)
            .cost_micro_usd_per_month(9_000);
        assert_eq!(
            policy(&budget, Dimension::CostMicroUsdPerDay),
            Some((500, 86_400))
        );
        assert_eq!(policy(&budget, Dimension::CostMicroUsdPerMonth), Some((9_000, 0)));
        let resp = r.render(Dialect::Gateway);
        assert_eq!(resp.status(), 429);
        assert_eq!(resp.headers()["retry-after"], "1");
        assert_eq!(
            resp.headers()["ratelimit-policy"],
            "\"requestsPerSecond\";q=5;w=1"
        );
        assert_eq!(resp.headers()["ratelimit"], "\"requestsPerSecond\";r=0;t=1");
        let b = body(resp).await;
        assert_eq!(b["error"]["resource"], "gateway:route:x");
        assert_eq!(b["error"]["retryAfterMs"], 960);
    }

    #[test]
    fn each_429_has_its_own_rate_limit_fields_whatever_came_before() {
        let fields = |dimension, quota, window, wait_ms| {
            let r = Rejection::RateLimited(Box::new(RateLimited {
                resource: "r".into(),
                layer: Layer::PreAuth,
                dimension,
                wait: Duration::from_millis(wait_ms),
                policy: Some((quota, window)),
                namespace_id: None,
                budget: None,
            }));
            let resp = r.render(Dialect::Gateway);
            let h = resp.headers();
            (h["ratelimit-policy"].clone(), h["ratelimit"].clone())
        };
        let rps = Dimension::RequestsPerSecond;
        let rpm = Dimension::RequestsPerMinute;
        // Alike twice, then one thing at a time different, then back.
        for (dimension, quota, window, wait_ms, policy, now) in [
            (
                rps,
                5,
                1,
                400,
                "\"requestsPerSecond\";q=5;w=1",
                "\"requestsPerSecond\";r=0;t=1",
            ),
            (
                rps,
                5,
                1,
                900,
                "\"requestsPerSecond\";q=5;w=1",
                "\"requestsPerSecond\";r=0;t=1",
            ),
            (
                rps,
                5,
                1,
                1_200,
                "\"requestsPerSecond\";q=5;w=1",
                "\"requestsPerSecond\";r=0;t=2",
            ),
            (
                rps,
                6,
                1,
                1_200,
                "\"requestsPerSecond\";q=6;w=1",
                "\"requestsPerSecond\";r=0;t=2",
            ),
            (
                rps,
                6,
                2,
                1_200,
                "\"requestsPerSecond\";q=6;w=2",
                "\"requestsPerSecond\";r=0;t=2",
            ),
            (
                rpm,
                6,
                2,
                1_200,
                "\"requestsPerMinute\";q=6;w=2",
                "\"requestsPerMinute\";r=0;t=2",
            ),
            (
                rps,
                5,
                1,
                400,
                "\"requestsPerSecond\";q=5;w=1",
                "\"requestsPerSecond\";r=0;t=1",
            ),
        ] {
            let (p, n) = fields(dimension, quota, window, wait_ms);
            assert_eq!((p.to_str().ok(), n.to_str().ok()), (Some(policy), Some(now)));
        }
    }

    #[tokio::test]
    async fn the_decision_dialect_says_allowed_false() {
        let limits = Limits::default().requests_per_minute(2);
        let r = Rejection::RateLimited(Box::new(RateLimited {
            resource: "jobs".into(),
            layer: Layer::Decision,
            dimension: Dimension::RequestsPerMinute,
            wait: Duration::from_millis(1500),
            policy: policy(&limits, Dimension::RequestsPerMinute),
            namespace_id: None,
            budget: None,
        }));
        let resp = r.render(Dialect::Decision);
        assert_eq!(resp.status(), 429);
        assert_eq!(resp.headers()["retry-after"], "2");
        assert_eq!(
            resp.headers()["ratelimit-policy"],
            "\"requestsPerMinute\";q=2;w=60"
        );
        let b = body(resp).await;
        assert_eq!(
            b,
            json!({"allowed": false, "waitTimeMs": 1500, "resource": "jobs", "dimension": "requestsPerMinute"})
        );
        let unknown = Rejection::UnknownResource("nope".into()).render(Dialect::Decision);
        assert_eq!(unknown.status(), 404);
        let b = body(unknown).await;
        assert_eq!(b["error"]["type"], "unknown_resource");
        assert_eq!(b["error"]["resource"], "nope");
        assert_eq!(Rejection::PermitGone.status(), 410);
        let token = Rejection::ServiceToken { given: true }.render(Dialect::Decision);
        assert_eq!(token.status(), 401);
        assert!(token.headers().contains_key("www-authenticate"));
    }

    #[test]
    fn client_faults_are_4xx_upstream_faults_5xx() {
        assert_eq!(Rejection::RequestTimeout { whole_ms: None }.status(), 408);
        assert_eq!(Rejection::BadRequest("x".into()).status(), 400);
        assert_eq!(
            Rejection::UpstreamTimeout {
                upstream: "u".into(),
                after_ms: 1
            }
            .status(),
            504
        );
        assert_eq!(
            Rejection::LimiterUnavailable {
                resource: "r".into(),
                layer: Layer::PreAuth,
                retry_after: Duration::from_secs(1),
                reason: "down".into()
            }
            .status(),
            503
        );
    }

    #[test]
    fn retry_after_values_are_the_number() {
        for secs in [0u64, 1, 9, 10, 59, 60, 61, 3600, u64::MAX] {
            assert_eq!(seconds_value(secs).to_str().expect("ascii"), secs.to_string());
        }
    }
}
