//! A refusal's response in each [`Dialect`], read from its
//! [`Description`]: the body ([`body`]), the head (status and headers) and
//! both together ([`respond`]). [`Rejection::render`] takes the plain 429
//! of a flood the short way (`flood.rs`, the same bytes), everything else
//! through here.

use super::{flood, retry_after_secs, Description, Detail, Dialect, RateLimited, Rejection};
use axum::body::Body;
use http::{header, HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use serde_json::{json, Map, Value};

impl Rejection {
    /// The response, in `dialect`.
    pub fn render(&self, dialect: Dialect) -> Response<Body> {
        match self {
            // A plain 429 outside the LLM dialects: made of the flood's
            // parts (`flood.rs`), without a description.
            Self::RateLimited(r)
                if matches!(dialect, Dialect::Gateway | Dialect::Decision) && r.budget.is_none() =>
            {
                let (head, body) = flood::parts(
                    r,
                    dialect,
                    |h| write_head(&self.describe(), dialect, h),
                    || self.body(dialect),
                );
                let mut resp = Response::new(whole(body));
                *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                *resp.headers_mut() = head;
                resp
            }
            _ => respond(&self.describe(), dialect),
        }
    }

    /// The JSON body in `dialect`: what [`render`](Self::render) answers
    /// with, and what a stream that fails after its head writes as its
    /// last event (`crate::openai::sse`, `crate::agents`).
    pub fn body(&self, dialect: Dialect) -> String {
        match (dialect, self) {
            // The flood path: written directly, the same bytes as
            // `gateway_body` gives.
            (Dialect::Gateway, Self::RateLimited(r)) if r.budget.is_none() => flood::rate_limited_body(r),
            _ => body(&self.describe(), dialect),
        }
    }

    /// The status in `dialect`: Anthropic answers an overload (every
    /// `503` of ours) with `529`, which its clients retry as such.
    pub fn status_in(&self, dialect: Dialect) -> StatusCode {
        status_in(&self.describe(), dialect)
    }
}

/// The response of `d` in `dialect`.
pub(crate) fn respond(d: &Description<'_>, dialect: Dialect) -> Response<Body> {
    let mut resp = Response::new(whole(body(d, dialect)));
    *resp.status_mut() = status_in(d, dialect);
    write_head(d, dialect, resp.headers_mut());
    resp
}

/// `body` as a response body, shrunk to its length (in place; the flood's
/// bodies are sized exactly): a full buffer becomes `Bytes` without
/// another allocation.
fn whole(body: String) -> Body {
    Body::from(bytes::Bytes::from(body.into_bytes().into_boxed_slice()))
}

/// The status of `d` in `dialect` (see [`Rejection::status_in`]).
fn status_in(d: &Description<'_>, dialect: Dialect) -> StatusCode {
    if dialect == Dialect::Anthropic && d.status == StatusCode::SERVICE_UNAVAILABLE {
        return StatusCode::from_u16(529).unwrap_or(d.status);
    }
    d.status
}

/// The JSON body of `d` in `dialect`.
pub(crate) fn body(d: &Description<'_>, dialect: Dialect) -> String {
    match (dialect, d.detail) {
        (Dialect::Anthropic, _) => anthropic_body(d).to_string(),
        (Dialect::Responses, _) => responses_body(d).to_string(),
        (Dialect::Decision, Detail::Limited(r)) => decision_denied_body(r).to_string(),
        // LLM errors speak OpenAI's shape on every route.
        (Dialect::OpenAi, _) => openai_body(d).to_string(),
        _ if d.always_openai => openai_body(d).to_string(),
        (Dialect::Gateway | Dialect::Decision, _) => gateway_body(d).to_string(),
    }
}

/// The headers of `d` in `dialect`.
pub(super) fn write_head(d: &Description<'_>, dialect: Dialect, h: &mut HeaderMap) {
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(wait) = d.retry_after {
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
    if d.futile {
        h.insert("x-should-retry", HeaderValue::from_static("false"));
    }
    if let Some(challenge) = d.challenge {
        h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
    }
    if let Detail::Limited(r) = d.detail {
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
    // Last, where the endpoint used to add it to its own rendering.
    if let Some(id) = d.request_id {
        h.insert(REQUEST_ID.clone(), id.clone());
    }
}

/// `{"error":{"type","message",...}}`, keys sorted.
pub(super) fn gateway_body(d: &Description<'_>) -> Value {
    let mut error = Map::new();
    error.insert("type".into(), Value::from(d.kind));
    error.insert("message".into(), Value::from(d.message.as_ref()));
    match d.detail {
        Detail::Limited(r) => {
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
        Detail::Resource(resource) => {
            error.insert("resource".into(), Value::from(resource));
        }
        Detail::Code(code) => {
            error.insert("code".into(), Value::from(code));
        }
        Detail::Config { path, problem } => {
            error.insert("path".into(), Value::from(path));
            error.insert("problem".into(), Value::from(problem));
        }
        Detail::None => {}
    }
    json!({ "error": error })
}

/// `{"error":{"message","type","param","code"}}`.
fn openai_body(d: &Description<'_>) -> Value {
    let o = d.openai;
    json!({"error": {"message": d.message, "type": o.error_type, "param": o.param, "code": o.code}})
}

/// Anthropic's error shape: `{"type":"error","error":{"type","message"}}`
/// (a field at fault is named in the message, as Anthropic does).
fn anthropic_body(d: &Description<'_>) -> Value {
    let ty = anthropic_error_type(status_in(d, Dialect::Anthropic));
    let message = match d.field {
        Some(field) if !d.message.starts_with(field) => format!("{field}: {}", d.message),
        _ => d.message.to_string(),
    };
    json!({"type": "error", "error": {"type": ty, "message": message}})
}

/// OpenAI's shape, with a spent budget's `code` `insufficient_quota`
/// (see [`Dialect::Responses`]) and a JSON-path `param` where the request
/// had one.
fn responses_body(d: &Description<'_>) -> Value {
    let mut body = openai_body(d);
    if let Some(error) = body.get_mut("error").and_then(Value::as_object_mut) {
        if d.openai.error_type == "insufficient_quota" {
            error.insert("code".into(), Value::from("insufficient_quota"));
        }
        if let Some(field) = d.field {
            error.insert("param".into(), Value::from(field));
        }
    }
    body
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
pub(super) fn seconds_value(secs: u64) -> HeaderValue {
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

/// `x-request-id` (`crate::openai::REQUEST_ID_HEADER`).
static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
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
