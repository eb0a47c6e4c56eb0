//! The provider client against a mock OpenAI-compatible server (axum on
//! 127.0.0.1:0): parsing, streaming, error classification, every timeout
//! phase, the connection pool, the API key and rate-limit headers.

#![allow(clippy::unwrap_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use futures::StreamExt;
use pressure_llm::provider::{
    CallError, ChatRequest, Message, ProviderClient, ProviderConfig, ProviderError, ProviderSettings,
    RateLimitHints, TimeoutsConfig,
};
use pressure_llm::taxonomy::{ErrorKind, TimeoutPhase};
use serde_json::{json, Value};
use tokio::time::Instant;

/// What the mock answers.
#[derive(Clone, Copy, Debug)]
enum Mode {
    Json,
    Sse { chunks: usize },
    RateLimited,
    Quota,
    ContextLength,
    Server500,
    Overloaded,
    SlowHead(Duration),
    HangAfterFirst,
    StreamErrorEvent,
}

/// One request the mock saw.
#[derive(Debug, Clone)]
struct Seen {
    auth: Option<String>,
    body: Value,
}

#[derive(Clone)]
struct Mock {
    mode: Mode,
    seen: Arc<Mutex<Vec<Seen>>>,
}

const SHORT: u64 = 200;

fn ratelimit_headers(b: axum::http::response::Builder) -> axum::http::response::Builder {
    b.header("x-ratelimit-limit-requests", "60")
        .header("x-ratelimit-remaining-requests", "59")
        .header("x-ratelimit-limit-tokens", "150000")
        .header("x-ratelimit-remaining-tokens", "149000")
        .header("x-ratelimit-reset-requests", "1s")
        .header("x-ratelimit-reset-tokens", "6m0s")
}

fn json_response(status: u16, body: Value) -> Response {
    ratelimit_headers(Response::builder())
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn completion_body() -> Value {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000u64, "model": "gpt-mock",
        "system_fingerprint": "fp_1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there!"},
                     "finish_reason": "stop", "logprobs": null}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15,
                  "prompt_tokens_details": {"cached_tokens": 0}}
    })
}

fn sse(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

fn chunk(i: usize, content: &str, finish: Option<&str>) -> Value {
    let mut delta = json!({"content": content});
    if i == 0 {
        delta["role"] = json!("assistant");
    }
    json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1, "model": "gpt-mock",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

fn sse_response(stream: impl futures::Stream<Item = Result<Bytes, Infallible>> + Send + 'static) -> Response {
    ratelimit_headers(Response::builder())
        .status(200)
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

async fn handler(State(m): State<Mock>, headers: HeaderMap, body: Bytes) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    m.seen.lock().unwrap().push(Seen { auth, body });
    match m.mode {
        Mode::Json => json_response(200, completion_body()),
        Mode::SlowHead(d) => {
            tokio::time::sleep(d).await;
            json_response(200, completion_body())
        }
        Mode::Sse { chunks } => {
            let mut events: Vec<Bytes> = (0..chunks)
                .map(|i| sse(&chunk(i, &format!("t{i} "), None)))
                .collect();
            events.push(Bytes::from_static(b": keep-alive comment\n\n"));
            events.push(sse(&chunk(chunks, "", Some("stop"))));
            events.push(sse(
                &json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1,
                "model": "gpt-mock", "choices": [],
                "usage": {"prompt_tokens": 9, "completion_tokens": chunks, "total_tokens": 9 + chunks}}),
            ));
            events.push(Bytes::from_static(b"data: [DONE]\n\n"));
            sse_response(futures::stream::iter(events).then(|b| async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok(b)
            }))
        }
        Mode::HangAfterFirst => sse_response(
            futures::stream::once(async { Ok(sse(&chunk(0, "first", None))) })
                .chain(futures::stream::pending()),
        ),
        Mode::StreamErrorEvent => sse_response(futures::stream::iter(vec![
            Ok(sse(&chunk(0, "partial", None))),
            Ok(sse(
                &json!({"error": {"type": "overloaded_error", "message": "Overloaded"}}),
            )),
        ])),
        Mode::RateLimited => {
            let mut r = json_response(
                429,
                json!({"error": {"message": "Rate limit reached for requests", "type": "requests",
                                 "param": null, "code": "rate_limit_exceeded"}}),
            );
            r.headers_mut().insert("retry-after", "2".parse().unwrap());
            r
        }
        Mode::Quota => json_response(
            429,
            json!({"error": {"message": "You exceeded your current quota", "type": "insufficient_quota",
                             "param": null, "code": "insufficient_quota"}}),
        ),
        Mode::ContextLength => json_response(
            400,
            json!({"error": {"message": "This model's maximum context length is 8192 tokens",
                             "type": "invalid_request_error", "param": "messages",
                             "code": "context_length_exceeded"}}),
        ),
        Mode::Server500 => json_response(
            500,
            json!({"error": {"message": "The server had an error", "type": "server_error"}}),
        ),
        Mode::Overloaded => json_response(
            529,
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
    }
}

/// Starts a mock; returns its base URL (`http://127.0.0.1:port/v1`) and the requests it saw.
async fn start(mode: Mode) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let app = Router::new()
        .route("/v1/chat/completions", post(handler))
        .with_state(Mock {
            mode,
            seen: seen.clone(),
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/v1"), seen)
}

fn timeouts(ms: u64) -> TimeoutsConfig {
    TimeoutsConfig {
        connect_ms: ms,
        write_ms: ms,
        first_byte_ms: ms,
        read_ms: ms,
        pool_wait_ms: ms,
        max_connections: 4,
    }
}

fn client(base: &str, key_env: Option<&str>, t: TimeoutsConfig) -> ProviderClient {
    ProviderClient::new(ProviderConfig {
        name: "mock".into(),
        settings: ProviderSettings {
            kind: Default::default(),
            model_dir: None,
            base_url: base.into(),
            api_key_env: key_env.map(str::to_owned),
            timeouts: t,
        },
    })
    .unwrap()
}

fn request() -> ChatRequest {
    let mut req = ChatRequest::new(
        "gpt-mock",
        vec![Message::new("system", "Be brief."), Message::new("user", "Hi")],
    );
    req.max_tokens = Some(16);
    req.extra.insert("temperature".into(), json!(0.2));
    req
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

async fn fail(mode: Mode) -> CallError {
    let (base, _) = start(mode).await;
    client(&base, None, timeouts(5_000))
        .complete(&request(), far())
        .await
        .unwrap_err()
}

/// The elapsed time of a timeout, measured from before the call that arms
/// its timer, is at least the timeout (exact: tokio's timers never fire
/// early) and under 10× it: loose enough for a loaded machine, tight enough
/// to tell the timer from the mock's multi-second delays. Which timer fired
/// is asserted by the error's phase.
fn assert_timed(elapsed: Duration, timeout_ms: u64) {
    let t = Duration::from_millis(timeout_ms);
    assert!(elapsed >= t, "fired early: {elapsed:?} < {t:?}");
    assert!(elapsed < t * 10, "fired late: {elapsed:?} >= 10 x {t:?}");
}

/// Waits until `cond` holds; only a hang (10 s) fails.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn json_completion_parses_content_usage_and_sends_the_key() {
    std::env::set_var("PRESSURE_TEST_KEY_JSON", "sk-test-json");
    let (base, seen) = start(Mode::Json).await;
    let c = client(&base, Some("PRESSURE_TEST_KEY_JSON"), timeouts(5_000));
    let mut req = request();
    req.stream = Some(true); // complete() never streams
    let done = c.complete(&req, far()).await.unwrap();
    assert_eq!(done.response.choices[0].message.text(), "Hello there!");
    assert_eq!(done.response.choices[0].finish_reason.as_deref(), Some("stop"));
    assert_eq!(done.response.extra["system_fingerprint"], "fp_1");
    let usage = done.usage.unwrap();
    assert_eq!(
        (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens),
        (12, 3, 15)
    );
    assert!(done.ttft <= done.total);
    assert_eq!(c.available_connections(), 4);

    let seen = seen.lock().unwrap();
    assert_eq!(seen[0].auth.as_deref(), Some("Bearer sk-test-json"));
    let body = &seen[0].body;
    assert_eq!(body["model"], "gpt-mock");
    assert_eq!(body["max_tokens"], 16);
    assert_eq!(body["temperature"], 0.2);
    assert_eq!(body["messages"][1], json!({"role": "user", "content": "Hi"}));
    assert!(body.get("stream").is_none() && body.get("stream_options").is_none());
}

#[tokio::test]
async fn ratelimit_headers_parse() {
    let (base, _) = start(Mode::Json).await;
    let done = client(&base, None, timeouts(5_000))
        .complete(&request(), far())
        .await
        .unwrap();
    let r = done.ratelimit;
    assert_eq!(r.limit_requests, Some(60));
    assert_eq!(r.remaining_requests, Some(59));
    assert_eq!(r.limit_tokens, Some(150_000));
    assert_eq!(r.remaining_tokens, Some(149_000));
    assert_eq!(r.reset_requests, Some(Duration::from_secs(1)));
    assert_eq!(r.reset_tokens, Some(Duration::from_secs(360)));

    let h = RateLimitHints::from_pairs(&[("X-RateLimit-Reset-Tokens", "20ms")]);
    assert_eq!(h.reset_tokens, Some(Duration::from_millis(20)));
    let anthropic = RateLimitHints::from_pairs(&[
        ("date", "Wed, 01 May 2024 12:00:00 GMT"),
        ("anthropic-ratelimit-requests-remaining", "49"),
        ("anthropic-ratelimit-requests-reset", "2024-05-01T12:00:30Z"),
        ("anthropic-ratelimit-tokens-remaining", "9000"),
        ("anthropic-ratelimit-tokens-reset", "not a date"),
        ("anthropic-ratelimit-output-tokens-remaining", "800"),
    ]);
    assert_eq!(anthropic.remaining_requests, Some(49));
    assert_eq!(anthropic.reset_requests, Some(Duration::from_secs(30)));
    assert_eq!(anthropic.remaining_tokens, Some(9000));
    assert_eq!(anthropic.reset_tokens, None);
    assert_eq!(anthropic.remaining_output_tokens, Some(800));
}

#[tokio::test]
async fn stream_yields_chunks_in_order_and_the_final_usage() {
    std::env::set_var("PRESSURE_TEST_KEY_SSE", "sk-test-sse");
    let (base, seen) = start(Mode::Sse { chunks: 5 }).await;
    let c = client(&base, Some("PRESSURE_TEST_KEY_SSE"), timeouts(5_000));
    let mut s = c.stream(&request(), far()).await.unwrap();
    let mut contents = Vec::new();
    while let Some(item) = s.next().await {
        let chunk = item.unwrap();
        assert_eq!(chunk.header.object, "chat.completion.chunk");
        if let Some(text) = chunk.choices.first().and_then(|c| c.delta.content.clone()) {
            contents.push(text);
        }
    }
    assert_eq!(contents, ["t0 ", "t1 ", "t2 ", "t3 ", "t4 ", ""]);
    assert!(s.is_done() && s.error().is_none());
    assert_eq!(
        s.usage().map(|u| (u.prompt_tokens, u.completion_tokens)),
        Some((9, 5))
    );
    assert_eq!(s.output_text(), "t0 t1 t2 t3 t4 ");
    assert_eq!(s.output_chars(), 15);
    assert_eq!(s.chunks_received(), 7);
    assert_eq!(s.output_chunks(), 5);
    assert!(s.ttft().unwrap() >= s.first_byte() && s.ttft() <= s.total());
    assert_eq!(s.ratelimit().remaining_requests, Some(59));
    assert_eq!(c.available_connections(), 4, "the slot is released at the end");

    let seen = seen.lock().unwrap();
    assert_eq!(seen[0].auth.as_deref(), Some("Bearer sk-test-sse"));
    assert_eq!(seen[0].body["stream"], true);
    assert_eq!(seen[0].body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn rate_limited_429_carries_retry_after() {
    let e = fail(Mode::RateLimited).await;
    assert_eq!(
        e.kind,
        ErrorKind::RateLimited {
            retry_after: Some(Duration::from_secs(2))
        }
    );
    assert_eq!(e.status, Some(429));
    assert_eq!(e.message, "Rate limit reached for requests");
    assert_eq!(e.ratelimit.retry_after, Some(Duration::from_secs(2)));
    assert_eq!(e.ratelimit.remaining_requests, Some(59));
}

#[tokio::test]
async fn quota_429_is_not_a_rate_limit() {
    let e = fail(Mode::Quota).await;
    assert_eq!(e.kind, ErrorKind::QuotaExhausted);
    assert_eq!(e.status, Some(429));
}

#[tokio::test]
async fn context_length_400() {
    let e = fail(Mode::ContextLength).await;
    assert_eq!(e.kind, ErrorKind::ContextLength);
    assert_eq!(e.status, Some(400));
    assert!(e.message.contains("maximum context length"));
}

#[tokio::test]
async fn server_500_and_overloaded_529() {
    let e = fail(Mode::Server500).await;
    assert_eq!(
        e.kind,
        ErrorKind::Server {
            status: 500,
            retry_after: None
        }
    );
    let e = fail(Mode::Overloaded).await;
    assert_eq!(e.kind, ErrorKind::Overloaded { retry_after: None });
    assert_eq!(e.status, Some(529));
}

#[tokio::test]
async fn error_event_inside_a_stream_is_classified() {
    let (base, _) = start(Mode::StreamErrorEvent).await;
    let mut s = client(&base, None, timeouts(5_000))
        .stream(&request(), far())
        .await
        .unwrap();
    assert!(s.next().await.unwrap().is_ok());
    let e = s.next().await.unwrap().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Overloaded { retry_after: None });
    assert!(s.next().await.is_none());
    assert_eq!(s.output_text(), "partial");
}

#[tokio::test]
async fn first_byte_timeout_fires() {
    let (base, _) = start(Mode::SlowHead(Duration::from_secs(3))).await;
    let c = client(&base, None, timeouts(SHORT));
    let t0 = Instant::now();
    let e = c.complete(&request(), far()).await.unwrap_err();
    assert_eq!(e.timeout_phase(), Some(TimeoutPhase::FirstByte), "{e}");
    assert_timed(t0.elapsed(), SHORT);
    assert_eq!(c.available_connections(), 4);
}

#[tokio::test]
async fn stream_that_hangs_after_its_first_chunk_is_cut() {
    let (base, _) = start(Mode::HangAfterFirst).await;
    let c = client(&base, None, timeouts(SHORT));
    // From before the call: the read timer is re-armed when the first chunk
    // arrives, which may be before `next()` hands it over.
    let t0 = Instant::now();
    let mut s = c.stream(&request(), far()).await.unwrap();
    let first = s.next().await.unwrap().unwrap();
    assert_eq!(first.choices[0].delta.content.as_deref(), Some("first"));
    let e = s.next().await.unwrap().unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::Timeout {
            phase: TimeoutPhase::Read
        },
        "{e}"
    );
    assert_eq!(e.status, Some(200));
    assert_timed(t0.elapsed(), SHORT);
    assert!(s.next().await.is_none());
    assert!(s.ttft().is_some() && s.usage().is_none());
    assert_eq!(s.output_text(), "first", "what a failed attempt is billed for");
    assert_eq!(c.available_connections(), 4);
}

#[tokio::test]
async fn total_deadline_cuts_every_phase() {
    let (base, _) = start(Mode::SlowHead(Duration::from_secs(3))).await;
    let c = client(&base, None, timeouts(5_000));
    let t0 = Instant::now();
    let e = c
        .complete(&request(), t0 + Duration::from_millis(SHORT))
        .await
        .unwrap_err();
    assert_eq!(e.timeout_phase(), Some(TimeoutPhase::Total), "{e}");
    assert_timed(t0.elapsed(), SHORT);

    let (base, _) = start(Mode::HangAfterFirst).await;
    let c = client(&base, None, timeouts(5_000));
    let t0 = Instant::now();
    let mut s = c
        .stream(&request(), t0 + Duration::from_millis(SHORT))
        .await
        .unwrap();
    assert!(s.next().await.unwrap().is_ok());
    let e = s.next().await.unwrap().unwrap_err();
    assert_eq!(e.timeout_phase(), Some(TimeoutPhase::Total), "{e}");
    assert_timed(t0.elapsed(), SHORT);
}

#[tokio::test]
async fn pool_wait_times_out_behind_a_slow_call() {
    let (base, _) = start(Mode::SlowHead(Duration::from_millis(1_500))).await;
    let mut t = timeouts(5_000);
    t.max_connections = 1;
    t.pool_wait_ms = SHORT;
    let c = client(&base, None, t);
    let slow = tokio::spawn({
        let c = c.clone();
        async move { c.complete(&request(), far()).await }
    });
    until("the slow call holds the only connection", || {
        c.available_connections() == 0
    })
    .await;
    let t0 = Instant::now();
    let e = c.complete(&request(), far()).await.unwrap_err();
    assert_eq!(e.timeout_phase(), Some(TimeoutPhase::PoolWait), "{e}");
    assert_timed(t0.elapsed(), SHORT);
    assert!(slow.await.unwrap().is_ok(), "the in-flight call is unaffected");
    assert_eq!(c.available_connections(), 1);
    let pool = c.pool_stats();
    assert_eq!(
        (pool.in_use, pool.peak, pool.max, pool.wait_timeouts),
        (0, 1, 1, 1)
    );
}

#[tokio::test]
async fn refused_connection_is_a_connection_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let c = client(&format!("http://{addr}/v1"), None, timeouts(5_000));
    let t0 = Instant::now();
    let e = c.complete(&request(), far()).await.unwrap_err();
    // The refusal itself, not the 5 s connect timeout: the kind says so,
    // and it came before that timer could have fired.
    assert_eq!(e.kind, ErrorKind::Connection, "{e}");
    assert_eq!(e.status, None);
    assert!(t0.elapsed() < Duration::from_millis(5_000), "{:?}", t0.elapsed());
    let e = c.stream(&request(), far()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Connection);
}

#[tokio::test]
async fn a_failed_tls_handshake_is_a_connection_error() {
    // An `https://` base URL at a plain-HTTP server: the TLS handshake
    // fails (the answer to the ClientHello is no TLS record).
    let (base, seen) = start(Mode::Json).await;
    let base = base.replacen("http://", "https://", 1);
    let c = client(&base, None, timeouts(5_000));
    let t0 = Instant::now();
    let e = c.complete(&request(), far()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Connection, "{e}");
    assert_eq!(e.status, None);
    assert!(t0.elapsed() < Duration::from_millis(5_000), "{:?}", t0.elapsed());
    assert!(seen.lock().unwrap().is_empty(), "no request got through");
}

/// A listener on 127.0.0.1 that never accepts, with its accept queue full:
/// Linux drops a SYN to a listener whose queue is full (it answers nothing,
/// so the client's SYN retransmits and its connect hangs for seconds).
/// `listen(0)` queues one connection; the queue is filled with connections
/// the listener never accepts until a connect does not complete. That probe
/// cannot be fooled by a slow machine: a loopback handshake completes in
/// the kernel, and `timeout` polls the connect before its timer, so a
/// completed connect is never taken for a hang. Returns the address, the
/// listener and the connections to keep alive; panics if the host answers
/// every connect (no SYN is ever dropped).
async fn blackhole() -> (SocketAddr, tokio::net::TcpListener, Vec<tokio::net::TcpStream>) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut held = Vec::new();
    for _ in 0..16 {
        match tokio::time::timeout(Duration::from_millis(100), tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(s)) => held.push(s),
            Ok(Err(e)) => panic!("connect to the never-accepting listener failed: {e}"),
            Err(_) => return (addr, listener, held),
        }
    }
    panic!(
        "{} connects to a listener with backlog 0 all completed: this host does not drop SYNs on a full accept queue",
        held.len()
    );
}

#[tokio::test]
async fn connect_timeout_fires() {
    let (addr, _listener, held) = blackhole().await;
    assert!(!held.is_empty(), "the accept queue holds at least one connection");
    let c = client(&format!("http://{addr}/v1"), None, timeouts(SHORT));
    let t0 = Instant::now();
    let e = c.complete(&request(), far()).await.unwrap_err();
    assert_eq!(e.timeout_phase(), Some(TimeoutPhase::Connect), "{e}");
    assert_timed(t0.elapsed(), SHORT);
}

#[tokio::test]
async fn write_timeout_fires_when_the_server_does_not_read() {
    // Accepts connections and never reads: a large body fills the socket buffers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let c = client(&format!("http://{addr}/v1"), None, timeouts(SHORT));
    let mut req = request();
    req.messages
        .push(Message::new("user", "x".repeat(32 * 1024 * 1024)));
    let t0 = Instant::now();
    let e = c.complete(&req, far()).await.unwrap_err();
    assert_eq!(e.timeout_phase(), Some(TimeoutPhase::Write), "{e}");
    // The clock here also covers serializing the 32 MiB body (slow in a debug
    // build on a loaded machine), which the write timer does not: only the
    // lower bound is tight.
    let elapsed = t0.elapsed();
    assert!(
        elapsed >= Duration::from_millis(SHORT),
        "fired early: {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_secs(10),
        "never fired in time: {elapsed:?}"
    );
}

#[tokio::test]
async fn missing_key_and_bad_config_are_rejected() {
    let cfg = |env: Option<&str>, url: &str| ProviderConfig {
        name: "p".into(),
        settings: ProviderSettings {
            kind: Default::default(),
            model_dir: None,
            base_url: url.into(),
            api_key_env: env.map(str::to_owned),
            timeouts: TimeoutsConfig::default(),
        },
    };
    let e = ProviderClient::new(cfg(
        Some("PRESSURE_TEST_KEY_UNSET_XYZ"),
        "https://api.openai.com/v1",
    ))
    .unwrap_err();
    assert!(matches!(e, ProviderError::MissingApiKey { .. }), "{e}");
    let e = ProviderClient::new(cfg(None, "ftp://x")).unwrap_err();
    assert!(matches!(e, ProviderError::InvalidBaseUrl { .. }), "{e}");
    let c = ProviderClient::new(cfg(None, "https://api.openai.com/v1/")).unwrap();
    assert_eq!(c.url(), "https://api.openai.com/v1/chat/completions");

    let parsed: ProviderConfig = serde_json::from_value(json!({
        "name": "openai", "baseUrl": "https://api.openai.com/v1", "apiKeyEnv": "OPENAI_API_KEY",
        "timeouts": {"connectMs": 500, "readMs": 1000}
    }))
    .unwrap();
    assert_eq!(parsed.settings.timeouts.connect_ms, 500);
    assert_eq!(parsed.settings.timeouts.read_ms, 1000);
    assert_eq!(parsed.settings.timeouts.first_byte_ms, 30_000);
    assert_eq!(parsed.settings.timeouts.pool_wait_ms, 1_000);
    assert_eq!(parsed.settings.timeouts.max_connections, 64);
    assert!(serde_json::from_value::<ProviderConfig>(json!({
        "name": "x", "baseUrl": "http://x", "timeouts": {"connectMS": 1}
    }))
    .is_err());
    // One flat object: the settings' keys beside `name`, nothing else.
    assert!(serde_json::from_value::<ProviderConfig>(json!({
        "name": "x", "baseUrl": "http://x", "baseURL": "http://y"
    }))
    .is_err());
    assert_eq!(
        serde_json::to_value(&parsed).unwrap(),
        json!({"name": "openai", "baseUrl": "https://api.openai.com/v1", "apiKeyEnv": "OPENAI_API_KEY",
               "timeouts": serde_json::to_value(parsed.settings.timeouts).unwrap()})
    );
}

#[tokio::test]
async fn wire_types_pass_unknown_fields_through() {
    let raw = json!({
        "model": "m", "n": 2,
        "messages": [
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
            {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url",
                "image_url": {"url": "data:"}}]}
        ]
    });
    let req: ChatRequest = serde_json::from_value(raw).unwrap();
    assert_eq!(req.extra["n"], 2);
    assert!(req.messages[0].extra.contains_key("tool_calls"));
    assert_eq!(req.messages[2].text(), "look");
    let back = serde_json::to_value(&req).unwrap();
    assert_eq!(back["messages"][1]["tool_call_id"], "c1");
    assert_eq!(back["messages"][2]["content"][1]["type"], "image_url");
}
