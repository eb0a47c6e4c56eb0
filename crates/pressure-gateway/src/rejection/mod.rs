//! Every refusal the gateway answers itself on its request path, as one
//! value: [`Rejection`].
//!
//! The layers, the proxy, the LLM endpoints and the decision listener
//! return a `Rejection` instead of building a response; one place per
//! listener counts it, logs it ([`record`]) and renders it ([`render`]):
//! the route layer for the proxy listener (`crate::layers::route`), the
//! decision state's `answer` for the decision listener. What a refusal
//! *is* — status, type and code in each dialect, log level, wait, headers,
//! message — is written once per variant, in [`Rejection::describe`]; the
//! renderers only read that [`Description`]. The admin listener's errors
//! are no refusals of traffic (`crate::admin::AdminError`): they describe
//! themselves the same way and go through the same renderer, uncounted.
//!
//! A refusal speaks one of five [`Dialect`]s:
//!
//! * **gateway** — `{"error":{"type","message",...}}` (a 429 adds
//!   `resource`, `dimension`, `retryAfterMs`);
//! * **OpenAI** on the LLM routes (`/v1/*` when `gateway.llm` is set) —
//!   `{"error":{"message","type","param","code"}}`, which every OpenAI SDK
//!   parses;
//! * **decision** on `POST /v1/acquire` of the decision listener
//!   (`crate::decisions`) — a 429 is `{"allowed":false,"waitTimeMs",
//!   "resource","dimension"}`, every other refusal the gateway dialect;
//! * **Anthropic** and **Responses** on the agents' endpoints
//!   (`crate::agents`).
//!
//! Client faults are 4xx (bad request 400, bad token 401, a use case a
//! runtime API key may not call 403, unknown path or
//! resource 404, body too slow 408, permit gone 410, body too large 413,
//! rate limited 429) and upstream faults 5xx (limiter unavailable or too
//! many permits held 503, upstream unreachable or failed 502, upstream too
//! slow 504) — never the other way round.
//!
//! The files: this one (the values and their description), [`render`]
//! (the response in each dialect), [`record`] (metrics and the denial log)
//! and `flood.rs` (the plain 429 the way a flood needs it: the measured
//! twin of the general renderer).

use crate::auth::AuthError;
use crate::metrics::Layer;
use http::{HeaderValue, StatusCode};
use pressure_core::{Denial, Dimension, Limits};
use pressure_llm::pipeline::LlmError;
use std::borrow::Cow;
use std::time::Duration;

mod flood;
pub(crate) mod record;
pub(crate) mod render;
#[cfg(test)]
mod tests;

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

/// A refusal of a request: see the module docs for the statuses.
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
    /// `403`: an API key issued at runtime with a list of use cases, used
    /// for another one (the use case named).
    UseCaseNotAllowed(String),
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
    /// The refusal of one LLM event (`crate::openai::respond_in`), answered
    /// with the event's id in `x-request-id` as its answer would have been:
    /// the endpoint returns it, the route layer renders it.
    Event {
        /// The event's id.
        request_id: HeaderValue,
        /// The refusal.
        rejection: Box<Rejection>,
    },
}

pub(crate) use crate::http::proxy::UpstreamFailure;

/// How loudly a refusal is logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    /// A client's own fault or a limit doing its job.
    Info,
    /// Something downstream or in the store is wrong.
    Warn,
    /// The gateway is wrong.
    Error,
}

/// The facts of a refusal, written once per variant
/// ([`Rejection::describe`], `AdminError::describe`): what every renderer
/// ([`render`]) and the log ([`record`]) read. Cheap to make: the fixed
/// parts are `&'static str`, the rest borrowed from the refusal; only a
/// message with numbers or names in it is formatted (and the plain 429 of
/// a flood never asks for one: `flood.rs`).
#[derive(Debug, Clone)]
pub(crate) struct Description<'a> {
    /// The HTTP status (Anthropic's dialect answers a `503` as `529`).
    pub(crate) status: StatusCode,
    /// The gateway dialect's `type`.
    pub(crate) kind: &'static str,
    /// OpenAI's `type`, `code` and `param` (also what the Anthropic and
    /// Responses dialects derive theirs from).
    pub(crate) openai: OpenAiFields<'a>,
    /// Whether OpenAI's shape is the body on every route but the agents'
    /// (a pipeline failure: what an SDK on any route parses).
    pub(crate) always_openai: bool,
    /// The request field at fault as a JSON path, when the request had
    /// one: Anthropic's message names it, Responses' `param` is it.
    pub(crate) field: Option<&'a str>,
    /// How loudly it is logged.
    pub(crate) level: Level,
    /// `Retry-After` (and, in the LLM dialects, `retry-after-ms`).
    pub(crate) retry_after: Option<Duration>,
    /// Asking again cannot help within the request's deadline:
    /// `x-should-retry: false`, which OpenAI's SDKs obey.
    pub(crate) futile: bool,
    /// `WWW-Authenticate`, for a missing or wrong credential.
    pub(crate) challenge: Option<&'static str>,
    /// `x-request-id`: the LLM event's id ([`Rejection::Event`]).
    pub(crate) request_id: Option<&'a HeaderValue>,
    /// The fields the gateway dialect's body adds to `type` and `message`.
    pub(crate) detail: Detail<'a>,
    /// The human-readable message.
    pub(crate) message: Cow<'a, str>,
}

/// OpenAI's `error.type`, `error.code` and `error.param`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OpenAiFields<'a> {
    /// `type`.
    pub(crate) error_type: &'static str,
    /// `code`.
    pub(crate) code: Option<&'static str>,
    /// `param`.
    pub(crate) param: Option<&'a str>,
}

/// What the gateway dialect's body says besides `type` and `message`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Detail<'a> {
    /// Nothing.
    None,
    /// A limit's 429: `resource`, `dimension`, `retryAfterMs` (and a
    /// spent budget's `spent`, `budget`); its `RateLimit` headers; the
    /// decision dialect's whole body.
    Limited(&'a RateLimited),
    /// `resource`.
    Resource(&'a str),
    /// `code`: why a credential was refused.
    Code(&'static str),
    /// `path` and `problem` of an invalid config.
    Config {
        /// The JSON path.
        path: &'a str,
        /// What is wrong there.
        problem: &'a str,
    },
}

impl<'a> Description<'a> {
    /// A refusal of `status` with the gateway `kind`, OpenAI's `type` and
    /// `code`, and `message`; nothing else (the builders below add it).
    pub(crate) fn new(
        status: StatusCode,
        kind: &'static str,
        (error_type, code): (&'static str, Option<&'static str>),
        message: impl Into<Cow<'a, str>>,
    ) -> Self {
        Self {
            status,
            kind,
            openai: OpenAiFields {
                error_type,
                code,
                param: None,
            },
            always_openai: false,
            field: None,
            level: Level::Info,
            retry_after: None,
            futile: false,
            challenge: None,
            request_id: None,
            detail: Detail::None,
            message: message.into(),
        }
    }

    /// Logged at `level`.
    pub(crate) fn level(mut self, level: Level) -> Self {
        self.level = level;
        self
    }

    /// With `Retry-After`.
    pub(crate) fn retry_after(mut self, wait: Duration) -> Self {
        self.retry_after = Some(wait);
        self
    }

    /// With a `WWW-Authenticate` challenge.
    pub(crate) fn challenge(mut self, challenge: &'static str) -> Self {
        self.challenge = Some(challenge);
        self
    }

    /// Answered with the LLM event's `x-request-id`.
    fn request_id(mut self, id: &'a HeaderValue) -> Self {
        self.request_id = Some(id);
        self
    }

    /// With the gateway body's `detail`.
    pub(crate) fn detail(mut self, detail: Detail<'a>) -> Self {
        self.detail = detail;
        self
    }

    /// With OpenAI's `param`, which is also the field at fault.
    fn param(mut self, param: Option<&'a str>) -> Self {
        self.openai.param = param;
        self.field = param;
        self
    }
}

/// OpenAI's `type` of a client's fault, with its `code`.
pub(crate) const fn client(code: &'static str) -> (&'static str, Option<&'static str>) {
    ("invalid_request_error", Some(code))
}

/// OpenAI's `type` of a server's fault, with its `code`.
pub(crate) const fn server(code: &'static str) -> (&'static str, Option<&'static str>) {
    ("server_error", Some(code))
}

/// The facts of a refused call to the decision listener: a wrong service
/// token, or none.
fn service_token(given: bool) -> Description<'static> {
    let (message, challenge) = if given {
        (
            "invalid service token",
            "Bearer realm=\"pressure-decisions\", error=\"invalid_token\"",
        )
    } else {
        (
            "a service token is required",
            "Bearer realm=\"pressure-decisions\"",
        )
    };
    Description::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        client("invalid_api_key"),
        message,
    )
    .challenge(challenge)
}

/// The facts of a refused credential: `401` with its reason as `code`
/// (OpenAI's `code` is `invalid_api_key`, or `key_expired`).
fn unauthorized(e: &AuthError) -> Description<'static> {
    let code = match e {
        AuthError::KeyExpired => "key_expired",
        _ => "invalid_api_key",
    };
    Description::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        client(code),
        e.to_string(),
    )
    .challenge("Bearer")
    .detail(Detail::Code(e.reason()))
}

/// The facts of an upstream's fault: `(kind, OpenAI code)`, logged as a
/// warning.
fn upstream_fault(
    status: StatusCode,
    (kind, code): (&'static str, &'static str),
    message: String,
) -> Description<'static> {
    Description::new(status, kind, server(code), message).level(Level::Warn)
}

/// The message of a body that did not arrive in time: it idled, or its
/// whole took longer than `whole_ms`.
fn body_timeout(whole_ms: Option<u64>) -> Cow<'static, str> {
    match whole_ms {
        None => Cow::Borrowed("the request body was not received in time"),
        Some(ms) => Cow::Owned(format!(
            "the request body was not complete within {ms} ms; the upstream was not contacted"
        )),
    }
}

impl Rejection {
    /// The facts of this refusal: the one table every renderer reads.
    pub(crate) fn describe(&self) -> Description<'_> {
        use Description as D;
        use StatusCode as S;
        match self {
            Self::RateLimited(r) => rate_limited(r),
            Self::LimiterUnavailable {
                resource,
                retry_after,
                ..
            } => D::new(
                S::SERVICE_UNAVAILABLE,
                "limiter_unavailable",
                server("limiter_unavailable"),
                "the limiter could not decide; try again",
            )
            .level(Level::Warn)
            .retry_after(*retry_after)
            .detail(Detail::Resource(resource)),
            Self::Unauthorized(e) => unauthorized(e),
            Self::UseCaseNotAllowed(use_case) => D::new(
                S::FORBIDDEN,
                "forbidden",
                ("permission_error", Some("use_case_not_allowed")),
                format!("this API key may not use the use case {use_case:?}"),
            )
            .detail(Detail::Code("use_case_not_allowed")),
            Self::BadRequest(m) => D::new(S::BAD_REQUEST, "bad_request", client("bad_request"), m.as_ref()),
            Self::InvalidRequest { message, param, code } => {
                D::new(S::BAD_REQUEST, "bad_request", client(code), message.as_str()).param(param.as_deref())
            }
            Self::NotFound(path) => D::new(
                S::NOT_FOUND,
                "not_found",
                client("not_found"),
                format!("no upstream serves path {path}"),
            ),
            Self::RequestTimeout { whole_ms } => D::new(
                S::REQUEST_TIMEOUT,
                "request_timeout",
                client("request_timeout"),
                body_timeout(*whole_ms),
            ),
            Self::PayloadTooLarge { max } => D::new(
                S::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                client("request_too_large"),
                format!("request body exceeds {max} bytes"),
            ),
            Self::UpstreamUnavailable { upstream, reason, .. } => upstream_fault(
                S::BAD_GATEWAY,
                ("upstream_unavailable", "upstream_error"),
                format!("upstream {upstream} is unavailable: {reason}"),
            ),
            Self::UpstreamError { upstream, reason, .. } => upstream_fault(
                S::BAD_GATEWAY,
                ("upstream_error", "upstream_error"),
                format!("upstream {upstream} failed: {reason}"),
            ),
            Self::UpstreamTimeout { upstream, after_ms } => upstream_fault(
                S::GATEWAY_TIMEOUT,
                ("upstream_timeout", "upstream_timeout"),
                format!("upstream {upstream} did not answer within {after_ms} ms"),
            ),
            Self::Llm(e) => llm(e),
            Self::Internal(m) => D::new(
                S::INTERNAL_SERVER_ERROR,
                "internal_error",
                ("server_error", None),
                m.as_str(),
            )
            .level(Level::Error),
            Self::UnknownResource(id) => D::new(
                S::NOT_FOUND,
                "unknown_resource",
                client("unknown_resource"),
                format!("no configured resource is named {id:?}"),
            )
            .detail(Detail::Resource(id)),
            Self::PermitGone => D::new(
                S::GONE,
                "permit_gone",
                client("permit_gone"),
                "the permit expired or was released",
            ),
            Self::ServiceToken { given } => service_token(*given),
            Self::TooManyPermits { max } => D::new(
                S::SERVICE_UNAVAILABLE,
                "too_many_permits",
                server("too_many_permits"),
                format!("the decision listener already holds {max} permits"),
            )
            .level(Level::Warn)
            .retry_after(Duration::from_secs(1)),
            Self::Event {
                request_id,
                rejection,
            } => rejection.describe().request_id(request_id),
        }
    }

    /// The refusal of the LLM event `request_id` (when it is a valid
    /// header value; else as it is).
    pub(crate) fn of_event(self, request_id: Option<HeaderValue>) -> Self {
        match request_id {
            Some(request_id) => Self::Event {
                request_id,
                rejection: Box::new(self),
            },
            None => self,
        }
    }

    /// The HTTP status (in the gateway's and OpenAI's dialects; see
    /// [`status_in`](Self::status_in)).
    pub fn status(&self) -> StatusCode {
        self.describe().status
    }

    /// The human-readable message.
    pub fn message(&self) -> String {
        self.describe().message.into_owned()
    }
}

/// The facts of a limit's 429: a spent calendar budget is
/// `budget_exceeded` (OpenAI's `insufficient_quota`, the dimension as
/// `param`), anything else `rate_limited`.
fn rate_limited(r: &RateLimited) -> Description<'_> {
    let secs = retry_after_secs(r.wait);
    let d = match r.budget {
        Some(b) => Description::new(
            StatusCode::TOO_MANY_REQUESTS,
            "budget_exceeded",
            ("insufficient_quota", Some("budget_exceeded")),
            format!(
                "{}: {} budget of {} is spent ({} used); it resets in {secs} s",
                r.resource,
                r.dimension.as_str(),
                b.budget,
                b.spent,
            ),
        ),
        None => Description::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            ("rate_limit_error", Some("rate_limit_exceeded")),
            format!(
                "{}: {} exhausted; retry in {secs} s",
                r.resource,
                r.dimension.as_str()
            ),
        ),
    };
    let mut d = d.retry_after(r.wait).detail(Detail::Limited(r));
    if r.budget.is_some() {
        d.openai.param = Some(r.dimension.as_str());
    }
    d.futile = r.budget.is_some_and(|b| b.beyond_deadline);
    d
}

/// The facts of a pipeline failure, from its own description
/// ([`LlmError::describe`]); a `429` or `503` says when to ask again.
fn llm(e: &LlmError) -> Description<'_> {
    let facts = e.describe();
    let status = StatusCode::from_u16(facts.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut d = Description::new(status, e.label(), (facts.error_type, facts.code), e.to_string());
    d.openai.param = facts.param;
    d.field = e.param_path();
    d.always_openai = true;
    d.futile = e.should_retry() == Some(false);
    if matches!(facts.status, 429 | 503) {
        d.retry_after = Some(e.retry_after().unwrap_or(LLM_DEFAULT_RETRY_AFTER));
    }
    d
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
