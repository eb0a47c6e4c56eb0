//! The OpenAI-compatible endpoint `POST /v1/chat/completions`, served by the
//! gateway itself through the LLM pipeline ([`LlmClient`]) when `gateway.llm`
//! is configured.
//!
//! [`LlmRoute`] sits where the proxy sits, *inside* the release, pre-auth
//! and tenant layers: a request to the endpoint is limited like any other
//! (a `perRoute` entry on `/v1/chat/completions` floors it, and a tenant's
//! `gateway:tenant:<id>` quota is charged by its LLM and its HTTP traffic
//! alike); every other request goes on to the proxy.
//!
//! * The body is an OpenAI chat request; its `model` names a use case
//!   (`gateway.llm.useCases`). Malformed JSON, a body that is not an object,
//!   or a missing `model`/`messages` answer `400` with an OpenAI-style error
//!   (`{"error":{"message","type","param","code"}}`) before any provider is
//!   touched; an unknown use case answers `404`; a prompt that fits no model
//!   of the chain `400 context_length_exceeded`.
//! * `"stream": true` answers with server-sent events (`text/event-stream`):
//!   `data: {chunk}` per chunk and `data: [DONE]` at the end; the chain may
//!   fall back only before the first chunk, and a failure after it ends the
//!   stream with one `data: {"error": {...}}` event (no `[DONE]`). The
//!   degradation header is sent with the head. A failure before the first
//!   chunk answers with an ordinary JSON error. (SSE responses release their
//!   pressure permits at the response head, DESIGN §5.)
//! * An answer: `200` with the completion plus a top-level
//!   `"pressure": {"degradation", "level", "attempts"}` field, or `202`
//!   `{"id": ticket, "object": "chat.completion.queued", "pressure": ...}`
//!   when the manual queue took it; both carry the header
//!   `x-pressure-degradation: primary|backup|rules|manual_queue`.
//! * A failure: the status and body of [`LlmError::openai_error`].
//!
//! [`encode_metrics`] renders the client's counters and breaker states for
//! the admin `/metrics` page.

use crate::backend::AnyBackend;
use crate::metrics::{header, sample};
use axum::body::Body;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::StreamExt;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use pressure_core::clock::duration_to_millis;
use pressure_llm::pipeline::{Answer, AnswerStream, LlmClient, LlmError, Reply};
use pressure_llm::provider::{ChatRequest, PoolStats};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::{self, Write as _};
use std::sync::Arc;
use std::task::{Context, Poll};

/// The path of the endpoint.
pub const CHAT_COMPLETIONS_PATH: &str = "/v1/chat/completions";

/// The header naming the chain level that answered.
pub const DEGRADATION_HEADER: &str = "x-pressure-degradation";

/// The gateway's LLM client, shared by every server thread.
pub type Llm = Arc<LlmClient<AnyBackend>>;

/// Serves `POST /v1/chat/completions` with the LLM client; every other
/// request goes to `inner`.
#[derive(Clone)]
pub struct LlmRoute<S> {
    llm: Llm,
    inner: S,
}

impl<S> LlmRoute<S> {
    /// The endpoint on `llm` in front of `inner`.
    pub fn new(llm: Llm, inner: S) -> Self {
        Self { llm, inner }
    }
}

impl<S> fmt::Debug for LlmRoute<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmRoute")
            .field("llm", &self.llm)
            .finish_non_exhaustive()
    }
}

/// Whether `req` is a call of the endpoint.
pub fn is_chat_completions<B>(req: &Request<B>) -> bool {
    req.method() == Method::POST && req.uri().path() == CHAT_COMPLETIONS_PATH
}

impl<S> tower::Service<Request<Body>> for LlmRoute<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        if is_chat_completions(&req) {
            let llm = Arc::clone(&self.llm);
            Box::pin(async move { Ok(chat_completions(&llm, req).await) })
        } else {
            Box::pin(self.inner.call(req))
        }
    }
}

/// A JSON response with `status`.
fn json_response(status: u16, body: &Value) -> Response<Body> {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// An OpenAI-style error: `{"error": {"message", "type", "param", "code"}}`.
pub fn openai_error(
    status: u16,
    ty: &str,
    message: &str,
    param: Option<&str>,
    code: Option<&str>,
) -> Response<Body> {
    json_response(
        status,
        &json!({"error": {"message": message, "type": ty, "param": param, "code": code}}),
    )
}

fn invalid_request(message: &str, param: Option<&str>, code: &str) -> Response<Body> {
    openai_error(400, "invalid_request_error", message, param, Some(code))
}

/// Whether a body error is the body-limit layer's cut.
fn is_too_large(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cur = e.source();
    }
    false
}

/// The request header whose value (when it is 1–128 characters of
/// `[A-Za-z0-9._:-]`) becomes the event's id; otherwise one is generated.
/// Echoed on the response and sent to the provider as `x-pressure-request-id`.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The caller's `x-request-id`, when it is a safe id.
fn caller_request_id<B>(req: &Request<B>) -> Option<String> {
    let v = req.headers().get(REQUEST_ID_HEADER)?.to_str().ok()?;
    let ok = (1..=128).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    ok.then(|| v.to_owned())
}

/// Handles one call of the endpoint: one JSON log line per event (target
/// `pressure::llm`) with its id, use case, the level that answered, the
/// attempts and the time taken; the response carries `x-request-id`.
pub async fn chat_completions(llm: &LlmClient<AnyBackend>, req: Request<Body>) -> Response<Body> {
    let request_id = caller_request_id(&req).unwrap_or_else(|| llm.new_request_id());
    let started = tokio::time::Instant::now();
    let mut resp = chat_completions_as(llm, req, &request_id, started).await;
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        resp.headers_mut().insert(REQUEST_ID_HEADER, v);
    }
    resp
}

/// Logs the outcome of one event.
fn log_event(
    request_id: &str,
    use_case: &str,
    started: tokio::time::Instant,
    outcome: Result<&Answer, &LlmError>,
) {
    let elapsed_ms = duration_to_millis(started.elapsed());
    match outcome {
        Ok(a) => tracing::info!(
            target: "pressure::llm",
            request_id,
            use_case,
            degradation = a.degradation.as_str(),
            level = a.level,
            model = a.model.as_deref().unwrap_or("-"),
            attempts = a.attempts,
            status = a.http_status(),
            elapsed_ms,
            "llm answer"
        ),
        Err(e) => tracing::warn!(
            target: "pressure::llm",
            request_id,
            use_case,
            degradation = "none",
            error = e.label(),
            status = e.openai_error().0,
            elapsed_ms,
            "llm request failed: {e}"
        ),
    }
}

async fn chat_completions_as(
    llm: &LlmClient<AnyBackend>,
    req: Request<Body>,
    request_id: &str,
    started: tokio::time::Instant,
) -> Response<Body> {
    // The body-limit layer bounds the body (413 on a declared length above
    // the limit, a cut stream otherwise).
    let bytes = match axum::body::to_bytes(req.into_body(), usize::MAX).await {
        Ok(b) => b,
        Err(e) if is_too_large(&e) => {
            return openai_error(
                413,
                "invalid_request_error",
                "request body too large",
                None,
                Some("request_too_large"),
            )
        }
        Err(e) => {
            return invalid_request(
                &format!("could not read the request body: {e}"),
                None,
                "invalid_body",
            )
        }
    };
    let value: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            return invalid_request(
                &format!("the request body is not valid JSON: {e}"),
                None,
                "invalid_json",
            )
        }
    };
    let Some(object) = value.as_object() else {
        return invalid_request("the request body must be a JSON object", None, "invalid_json");
    };
    for field in ["model", "messages"] {
        if object.get(field).is_none_or(Value::is_null) {
            return invalid_request(
                &format!("missing required parameter: '{field}'"),
                Some(field),
                "missing_required_parameter",
            );
        }
    }
    let chat: ChatRequest = match serde_json::from_value(value) {
        Ok(c) => c,
        Err(e) => return invalid_request(&format!("invalid request: {e}"), None, "invalid_value"),
    };
    let use_case = chat.model.clone();
    if chat.stream == Some(true) {
        return match llm.stream_as(&use_case, chat, request_id.to_owned()).await {
            Ok(stream) => {
                let elapsed_ms = duration_to_millis(started.elapsed());
                tracing::info!(
                    target: "pressure::llm",
                    request_id,
                    use_case,
                    degradation = stream.degradation().as_str(),
                    status = stream.http_status(),
                    elapsed_ms,
                    "llm stream started"
                );
                sse_response(stream)
            }
            Err(e) => {
                log_event(request_id, &use_case, started, Err(&e));
                error_response(&e)
            }
        };
    }
    let result = llm.complete_as(&use_case, chat, request_id.to_owned()).await;
    log_event(request_id, &use_case, started, result.as_ref());
    match result {
        Ok(answer) => answer_response(&answer),
        Err(e) => error_response(&e),
    }
}

/// A streamed answer as server-sent events: `data: {chunk}` per chunk, then
/// `data: [DONE]`; a mid-stream failure ends it with `data: {"error": ...}`
/// (no `[DONE]`). The degradation header is set before the first byte.
pub fn sse_response(stream: AnswerStream<AnyBackend>) -> Response<Body> {
    let status = stream.http_status();
    let degradation = stream.degradation().as_str();
    let events = futures::stream::unfold(Some(stream), |state| async move {
        let mut stream = state?;
        let event = match stream.next().await {
            Some(Ok(chunk)) => match serde_json::to_string(&chunk) {
                Ok(json) => return Some((Ok::<_, Infallible>(sse_event(&json)), Some(stream))),
                Err(e) => sse_event(
                    &json!({"error": {"message": format!("a chunk could not be encoded: {e}"),
                                      "type": "server_error", "param": null, "code": null}})
                    .to_string(),
                ),
            },
            Some(Err(e)) => sse_event(&e.openai_error().1.to_string()),
            None => Bytes::from_static(b"data: [DONE]\n\n"),
        };
        Some((Ok(event), None))
    });
    let mut resp = Response::new(Body::from_stream(events));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let headers = resp.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(DEGRADATION_HEADER, HeaderValue::from_static(degradation));
    resp
}

fn sse_event(json: &str) -> Bytes {
    Bytes::from(format!("data: {json}\n\n"))
}

/// The response of a failed event.
pub fn error_response(err: &LlmError) -> Response<Body> {
    let (status, body) = err.openai_error();
    json_response(status, &body)
}

/// The response of an answer: the completion (200) or the queue ticket
/// (202), with the `pressure` field and the degradation header.
pub fn answer_response(answer: &Answer) -> Response<Body> {
    let pressure = json!({
        "degradation": answer.degradation.as_str(),
        "level": answer.level,
        "attempts": answer.attempts,
    });
    let body = match &answer.reply {
        Reply::Completion(resp) => match serde_json::to_value(resp) {
            Ok(Value::Object(mut map)) => {
                map.insert("pressure".into(), pressure);
                Value::Object(map)
            }
            _ => {
                return openai_error(
                    500,
                    "server_error",
                    "the completion could not be encoded",
                    None,
                    None,
                )
            }
        },
        Reply::Queued { ticket } => json!({
            "id": ticket,
            "object": "chat.completion.queued",
            "pressure": pressure,
        }),
    };
    let mut resp = json_response(answer.http_status(), &body);
    resp.headers_mut().insert(
        DEGRADATION_HEADER,
        HeaderValue::from_static(answer.degradation.as_str()),
    );
    resp
}

/// One counter family without labels.
type Plain = (&'static str, &'static str, u64);

/// One per-provider pool family: name, type, help and its value.
type PoolFamily = (&'static str, &'static str, &'static str, fn(&PoolStats) -> u64);

/// Appends the LLM client's counters and breaker states to a `/metrics`
/// page (Prometheus text 0.0.4):
///
/// | series | type | labels |
/// |---|---|---|
/// | `pressure_llm_requests_total` | counter | |
/// | `pressure_llm_attempts_total` | counter | |
/// | `pressure_llm_retries_total` | counter | |
/// | `pressure_llm_spent_micro_usd_total` | counter | |
/// | `pressure_llm_failed_spent_micro_usd_total` | counter | |
/// | `pressure_llm_breaker_rejections_total` | counter | |
/// | `pressure_llm_limiter_rejections_total` | counter | |
/// | `pressure_llm_errors_total` | counter | `kind` |
/// | `pressure_llm_attempt_errors_total` | counter | `kind` |
/// | `pressure_llm_answers_total` | counter | `degradation` |
/// | `pressure_llm_breaker_state` | gauge (0 closed, 1 half-open, 2 open) | `provider`, `model` |
/// | `pressure_llm_pool_in_use`, `_peak`, `_max` | gauge | `provider` |
/// | `pressure_llm_pool_wait_timeouts_total` | counter | `provider` |
/// | `pressure_llm_ttft_seconds` | histogram | `provider`, `model` |
/// | `pressure_llm_latency_seconds` | histogram | `provider`, `model` |
pub fn encode_metrics(llm: &LlmClient<AnyBackend>, out: &mut String) {
    // Writing into a `String` cannot fail.
    let _ = try_encode_metrics(llm, out);
}

fn try_encode_metrics(llm: &LlmClient<AnyBackend>, out: &mut String) -> fmt::Result {
    let s = llm.snapshot();
    let plain: [Plain; 7] = [
        (
            "pressure_llm_requests_total",
            "LLM events started (chat completion requests).",
            s.requests,
        ),
        (
            "pressure_llm_attempts_total",
            "Provider calls made (all levels, retries included).",
            s.attempts,
        ),
        (
            "pressure_llm_retries_total",
            "Provider calls made after a backoff on the same level.",
            s.retries,
        ),
        (
            "pressure_llm_spent_micro_usd_total",
            "Micro-dollars spent on all provider calls.",
            s.spent_micro_usd,
        ),
        (
            "pressure_llm_failed_spent_micro_usd_total",
            "Micro-dollars spent on failed provider calls.",
            s.failed_spent_micro_usd,
        ),
        (
            "pressure_llm_breaker_rejections_total",
            "Model levels skipped because their circuit breaker was open.",
            s.breaker_rejections,
        ),
        (
            "pressure_llm_limiter_rejections_total",
            "Model levels skipped because the limiter had no capacity in time.",
            s.limiter_rejections,
        ),
    ];
    for (name, help, v) in plain {
        header(out, name, "counter", help)?;
        writeln!(out, "{name} {v}")?;
    }
    let mut served = s.served.clone();
    for d in ["primary", "backup", "rules", "manual_queue"] {
        served.entry(d.to_owned()).or_insert(0);
    }
    let labelled: [(&str, &str, &str, &BTreeMap<String, u64>); 3] = [
        (
            "pressure_llm_errors_total",
            "LLM events that failed, by error kind.",
            "kind",
            &s.errors,
        ),
        (
            "pressure_llm_attempt_errors_total",
            "Failed provider calls, by error kind (rate_limited gives the 429 share).",
            "kind",
            &s.attempt_errors,
        ),
        (
            "pressure_llm_answers_total",
            "LLM answers by the chain level that served them.",
            "degradation",
            &served,
        ),
    ];
    for (name, help, label, values) in labelled {
        header(out, name, "counter", help)?;
        for (value, n) in values {
            sample(out, name, &[(label, value)], n)?;
        }
    }
    // Every configured model has a series (closed until its breaker exists).
    let mut states: BTreeMap<(String, String), i64> = llm
        .config()
        .models
        .iter()
        .map(|m| ((m.provider.clone(), m.model.clone()), 0))
        .collect();
    for b in llm.breakers().snapshot() {
        states.insert((b.provider, b.model), b.snapshot.state.as_gauge());
    }
    let name = "pressure_llm_breaker_state";
    header(
        out,
        name,
        "gauge",
        "Circuit breaker state per (provider, model): 0 closed, 1 half-open, 2 open.",
    )?;
    for ((provider, model), v) in states {
        sample(out, name, &[("provider", &provider), ("model", &model)], v)?;
    }
    let pools = llm.provider_pools();
    let families: [PoolFamily; 4] = [
        (
            "pressure_llm_pool_in_use",
            "gauge",
            "Provider connection slots in use now.",
            |p| p.in_use as u64,
        ),
        (
            "pressure_llm_pool_peak",
            "gauge",
            "Most provider connection slots in use at once.",
            |p| p.peak as u64,
        ),
        (
            "pressure_llm_pool_max",
            "gauge",
            "Provider connection slots (maxConnections).",
            |p| p.max as u64,
        ),
        (
            "pressure_llm_pool_wait_timeouts_total",
            "counter",
            "Calls that found no free provider connection within poolWaitMs.",
            |p| p.wait_timeouts,
        ),
    ];
    for (name, kind, help, value) in families {
        header(out, name, kind, help)?;
        for (provider, p) in &pools {
            sample(out, name, &[("provider", provider)], value(p))?;
        }
    }
    let histograms = [
        (
            "pressure_llm_ttft_seconds",
            "Time to first token of successful provider calls.",
            &s.ttft,
        ),
        (
            "pressure_llm_latency_seconds",
            "Total latency of successful provider calls.",
            &s.latency,
        ),
    ];
    for (name, help, series) in histograms {
        header(out, name, "histogram", help)?;
        let (bucket, sum, count) = (
            format!("{name}_bucket"),
            format!("{name}_sum"),
            format!("{name}_count"),
        );
        for ((provider, model), h) in series {
            let labels = [("provider", provider.as_str()), ("model", model.as_str())];
            for (le, n) in h.cumulative() {
                let le = le.to_string();
                sample(out, &bucket, &[labels[0], labels[1], ("le", &le)], n)?;
            }
            sample(out, &bucket, &[labels[0], labels[1], ("le", "+Inf")], h.count)?;
            sample(out, &sum, &labels, h.sum_seconds())?;
            sample(out, &count, &labels, h.count)?;
        }
    }
    Ok(())
}
