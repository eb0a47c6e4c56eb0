//! Traces over OTLP (`docs/tracing.md`): an OTLP receiver in the test
//! (HTTP/protobuf and gRPC, decoding the exports with the reference
//! messages of `opentelemetry-proto`) collects the gateway's spans; the
//! span trees of a proxied request and of a 429 are checked, with the
//! client's trace continued and the upstream receiving `traceparent`. A
//! receiver that hangs, or is down, changes no answer: every request is
//! answered with the same status, and the spans it could not take are
//! counted as dropped in `/metrics`.

use super::support::{bounded, dead_port, get_request, Reply, TestGateway, TestUpstream};
use axum::body::Bytes as AxumBytes;
use axum::routing::{any, post};
use axum::Router;
use http::{HeaderMap, StatusCode};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_PARENT: &str = "00f067aa0ba902b7";

/// Spans received so far.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<Span>>>);

impl Received {
    fn push(&self, req: ExportTraceServiceRequest) {
        let mut spans = self.0.lock().expect("spans");
        for rs in req.resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| r.attributes.iter())
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref()?.value.clone());
            assert_eq!(service, Some(AnyValue::StringValue("gw-under-test".into())));
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
    }

    fn spans(&self) -> Vec<Span> {
        self.0.lock().expect("spans").clone()
    }

    /// Waits (bounded by the test) until `n` spans of `trace` came.
    async fn wait_for(&self, trace: &[u8], n: usize) -> Vec<Span> {
        loop {
            let of: Vec<Span> = self.spans().into_iter().filter(|s| s.trace_id == trace).collect();
            if of.len() >= n {
                return of;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The OTLP receiver: `POST /v1/traces` (HTTP/protobuf) and gRPC's
/// `TraceService/Export` (a length-prefixed message, the status in the
/// trailers), both into `received`.
async fn receiver(received: Received) -> TestUpstream {
    let http_rx = received.clone();
    let grpc_rx = received;
    let router = Router::new()
        .route(
            "/v1/traces",
            post(move |headers: HeaderMap, body: AxumBytes| {
                let rx = http_rx.clone();
                async move {
                    assert_eq!(headers["content-type"], "application/x-protobuf");
                    rx.push(ExportTraceServiceRequest::decode(body).expect("an OTLP export"));
                    ([("content-type", "application/x-protobuf")], Vec::<u8>::new())
                }
            }),
        )
        .route(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            post(move |body: AxumBytes| {
                let rx = grpc_rx.clone();
                async move {
                    assert_eq!(body[0], 0, "uncompressed");
                    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]);
                    let len = usize::try_from(len).expect("len");
                    rx.push(ExportTraceServiceRequest::decode(&body[5..5 + len]).expect("an OTLP export"));
                    // An empty response message; the status in the head
                    // (a trailers-only answer would do as well).
                    (
                        [("content-type", "application/grpc"), ("grpc-status", "0")],
                        vec![0u8, 0, 0, 0, 0],
                    )
                }
            }),
        );
    TestUpstream::start(router).await
}

/// An upstream that records the `traceparent` of each request.
async fn recording_upstream(seen: Arc<Mutex<Vec<Option<String>>>>) -> TestUpstream {
    TestUpstream::start(Router::new().fallback(any(move |headers: HeaderMap| {
        let seen = Arc::clone(&seen);
        async move {
            let tp = headers
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            seen.lock().expect("seen").push(tp);
            "ok"
        }
    })))
    .await
}

fn config(upstream: &TestUpstream, tracing: Value) -> Value {
    json!({
        "upstreams": { "demo": { "url": upstream.url(), "pathPrefix": "/" } },
        "pressure": {
            "perRoute": [{
                "resource": "gateway:route:limited",
                "pathPrefix": "/limited",
                "limits": { "requestsPerMinute": 1 },
            }],
        },
        "tracing": tracing,
    })
}

fn attr(span: &Span, key: &str) -> Option<AnyValue> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.clone())
}

fn str_attr(span: &Span, key: &str) -> Option<String> {
    match attr(span, key)? {
        AnyValue::StringValue(s) => Some(s),
        other => panic!("{key} is {other:?}"),
    }
}

fn int_attr(span: &Span, key: &str) -> Option<i64> {
    match attr(span, key)? {
        AnyValue::IntValue(i) => Some(i),
        other => panic!("{key} is {other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// `GET path` with the client's `traceparent` (trace `CLIENT_TRACE`).
async fn traced_get(gw: &TestGateway, path: &str, trace: &str) -> Reply {
    let mut req = get_request(&gw.url(path));
    let tp = format!("00-{trace}-{CLIENT_PARENT}-01");
    req.headers_mut()
        .insert("traceparent", tp.parse().expect("header"));
    req.headers_mut()
        .insert("tracestate", "vendor=abc".parse().expect("header"));
    Reply::read(gw.send(req).await).await
}

async fn proxied_and_refused(protocol: &str, path: &str) {
    let received = Received::default();
    let rx = receiver(received.clone()).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let up = recording_upstream(Arc::clone(&seen)).await;
    let gw = TestGateway::start(config(
        &up,
        json!({
            "endpoint": format!("{}{path}", rx.url()),
            "protocol": protocol,
            "serviceName": "gw-under-test",
        }),
    ))
    .await;

    // A proxied request: the server span continues the client's trace,
    // the upstream call is its child, and the upstream got the child's
    // traceparent.
    let ok = traced_get(&gw, "/orders/1?x=1", CLIENT_TRACE).await;
    assert_eq!(ok.status, StatusCode::OK);
    let trace = unhex(CLIENT_TRACE);
    let spans = received.wait_for(&trace, 2).await;
    let server = spans.iter().find(|s| s.kind == 2).expect("a server span");
    let client = spans.iter().find(|s| s.kind == 3).expect("a client span");
    assert_eq!(server.parent_span_id, unhex(CLIENT_PARENT));
    assert_eq!(server.trace_state, "vendor=abc");
    assert_eq!(client.parent_span_id, server.span_id);
    assert_eq!(str_attr(server, "http.request.method").as_deref(), Some("GET"));
    assert_eq!(str_attr(server, "url.path").as_deref(), Some("/orders/1"));
    assert_eq!(str_attr(server, "url.query").as_deref(), Some("x=1"));
    assert_eq!(int_attr(server, "http.response.status_code"), Some(200));
    assert_eq!(int_attr(client, "http.response.status_code"), Some(200));
    assert_eq!(str_attr(client, "pressure.upstream").as_deref(), Some("demo"));
    assert!(server.start_time_unix_nano <= client.start_time_unix_nano);
    assert!(client.end_time_unix_nano <= server.end_time_unix_nano);
    assert!(server.events.iter().any(|e| e.name == "pressure.admission"));
    let upstream_saw = seen.lock().expect("seen").clone();
    assert_eq!(
        upstream_saw,
        vec![Some(format!("00-{CLIENT_TRACE}-{}-01", hex(&client.span_id)))]
    );

    // A 429: the server span alone (no upstream call), its admission
    // event naming the layer, resource, dimension and wait.
    let limited_trace = "11111111111111111111111111111111";
    let first = traced_get(&gw, "/limited/a", limited_trace).await;
    assert_eq!(first.status, StatusCode::OK);
    let second_trace = "22222222222222222222222222222222";
    let refused = traced_get(&gw, "/limited/a", second_trace).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    let spans = received.wait_for(&unhex(second_trace), 1).await;
    assert_eq!(spans.len(), 1, "{spans:?}");
    let server = &spans[0];
    assert_eq!(server.name, "GET gateway:route:limited");
    assert_eq!(int_attr(server, "http.response.status_code"), Some(429));
    let admission = server
        .events
        .iter()
        .find(|e| e.name == "pressure.admission")
        .expect("an admission event");
    let ev = |k: &str| {
        admission
            .attributes
            .iter()
            .find(|kv| kv.key == k)
            .and_then(|kv| kv.value.as_ref()?.value.clone())
    };
    assert_eq!(
        ev("pressure.result"),
        Some(AnyValue::StringValue("refused".into()))
    );
    assert_eq!(
        ev("pressure.layer"),
        Some(AnyValue::StringValue("pre_auth".into()))
    );
    assert_eq!(
        ev("pressure.resource"),
        Some(AnyValue::StringValue("gateway:route:limited".into()))
    );
    assert!(ev("pressure.dimension").is_some());
    assert!(matches!(ev("pressure.wait_ms"), Some(AnyValue::IntValue(w)) if w > 0));

    // A request without traceparent starts a trace of its own.
    let fresh = gw.get("/fresh").await;
    assert_eq!(fresh.status, StatusCode::OK);
    let last = seen
        .lock()
        .expect("seen")
        .last()
        .cloned()
        .flatten()
        .expect("a traceparent");
    assert!(!last.contains(CLIENT_TRACE));
    let metrics = gw.admin_get("/metrics").await;
    let text = String::from_utf8_lossy(&metrics.body).to_string();
    assert!(text.contains("pressure_trace_spans_dropped_total 0"), "{text}");
    gw.stop().await;
    up.stop().await;
    rx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxied_request_and_a_429_over_http_protobuf() {
    bounded(proxied_and_refused("http/protobuf", "/v1/traces")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxied_request_and_a_429_over_grpc() {
    bounded(proxied_and_refused("grpc", "")).await;
}

/// The statuses of a fixed series of requests (proxied ones and 429s).
async fn statuses_of(gw: &TestGateway) -> Vec<u16> {
    let mut out = Vec::new();
    for i in 0..40 {
        let path = if i % 4 == 0 { "/limited/x" } else { "/ok" };
        out.push(traced_get(gw, path, CLIENT_TRACE).await.status.as_u16());
    }
    out
}

/// A receiver that accepts connections and never answers (nor reads).
async fn hung_receiver() -> (String, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
        }
    });
    (format!("http://{addr}"), task)
}

async fn a_receiver_that_fails(endpoint: String, protocol: &str) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let up = recording_upstream(Arc::clone(&seen)).await;
    let reference = TestGateway::start(config(&up, Value::Null)).await;
    let expected = statuses_of(&reference).await;
    reference.stop().await;
    assert_eq!(expected.iter().filter(|s| **s == 429).count(), 9, "{expected:?}");

    let gw = TestGateway::start(config(
        &up,
        json!({"endpoint": endpoint, "protocol": protocol, "serviceName": "gw-under-test"}),
    ))
    .await;
    // The same answers, every request completed (bounded by the test).
    assert_eq!(statuses_of(&gw).await, expected);
    // The spans are still made and propagated...
    assert!(seen
        .lock()
        .expect("seen")
        .iter()
        .rev()
        .take(5)
        .all(|tp| tp.as_deref().is_some_and(|t| t.contains(CLIENT_TRACE))));
    // ...and counted as dropped once the export gives up (5 s).
    loop {
        let metrics = gw.admin_get("/metrics").await;
        let text = String::from_utf8_lossy(&metrics.body).to_string();
        let dropped = text
            .lines()
            .find_map(|l| l.strip_prefix("pressure_trace_spans_dropped_total "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .expect("the dropped counter");
        if dropped > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gw.stop().await;
    up.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_receiver_changes_no_answer() {
    bounded(async {
        let (endpoint, task) = hung_receiver().await;
        a_receiver_that_fails(format!("{endpoint}/v1/traces"), "http/protobuf").await;
        let (endpoint, task2) = hung_receiver().await;
        a_receiver_that_fails(endpoint, "grpc").await;
        task.abort();
        task2.abort();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_receiver_changes_no_answer() {
    bounded(async {
        let port = dead_port().await;
        a_receiver_that_fails(format!("http://127.0.0.1:{port}/v1/traces"), "http/protobuf").await;
    })
    .await;
}

// ------------------------------------------------------------------ LLM

async fn provider() -> pressure_mock::MockProvider {
    let mut failing = pressure_mock::Phase::normal("bad fails").on_models(&["bad"]);
    failing.error_share = 1.0;
    let config = pressure_mock::MockConfig {
        behaviour: pressure_mock::Behaviour::single(failing),
        seed: Some(7),
        ..pressure_mock::MockConfig::default()
    };
    pressure_mock::MockProvider::start("127.0.0.1:0".parse().expect("addr"), config)
        .await
        .expect("mock provider starts")
}

fn llm_config(mock: &pressure_mock::MockProvider, up: &TestUpstream, rx: &TestUpstream) -> Value {
    let model = |name: &str| {
        json!({
            "provider": "mock", "model": name,
            "context": { "contextTokens": 4096, "maxOutputTokens": 256 },
            "price": { "inputMicroUsdPer1M": 1_000_000, "outputMicroUsdPer1M": 1_000_000 }
        })
    };
    json!({
        "upstreams": { "demo": { "url": up.url(), "pathPrefix": "/api" } },
        "llm": {
            "providers": { "mock": { "baseUrl": mock.base_url() } },
            "models": [model("bad"), model("good")],
            // Opens after the fourth failure on `bad`: the streamed
            // event's second attempt (the first event made two).
            "breaker": { "failureRateThreshold": 0.5, "minimumCalls": 4, "openWaitMs": 60000 },
            "useCases": { "chat": {
                "chain": [{ "model": "mock/bad" }, { "model": "mock/good" }],
                "retry": { "maxAttempts": 2, "baseDelayMs": 1, "maxDelayMs": 5 }
            } }
        },
        "tracing": { "endpoint": format!("{}/v1/traces", rx.url()), "serviceName": "gw-under-test" },
    })
}

/// A chat completion (streamed when `stream`) under the client's trace.
async fn traced_chat(gw: &TestGateway, trace: &str, stream: bool) -> Reply {
    let body = json!({
        "model": "chat", "max_tokens": 20, "stream": stream,
        "messages": [{ "role": "user", "content": "hello" }]
    });
    let req = http::Request::post(gw.url("/v1/chat/completions"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .header("traceparent", format!("00-{trace}-{CLIENT_PARENT}-01"))
        .body(http_body_util::Full::new(bytes::Bytes::from(body.to_string())))
        .expect("request");
    Reply::read(gw.send(req).await).await
}

/// The span tree of one chat event: the server span under the client's,
/// the event's span under it (a fallback event to level 1), two failed
/// attempts on `bad` and one on `good` under the event's span, each
/// attempt's `traceparent` received by the mock provider.
async fn check_chat_tree(received: &Received, mock: &pressure_mock::MockProvider, trace: &str, stream: bool) {
    let spans = received.wait_for(&unhex(trace), 5).await;
    let server = spans.iter().find(|s| s.kind == 2).expect("a server span");
    assert_eq!(server.parent_span_id, unhex(CLIENT_PARENT));
    let event = spans
        .iter()
        .find(|s| s.name == "pressure.llm chat")
        .expect("the event's span");
    assert_eq!(event.parent_span_id, server.span_id);
    assert!(
        event.events.iter().any(|e| e.name == "pressure.fallback"),
        "{event:?}"
    );
    assert_eq!(int_attr(event, "pressure.level"), Some(1));
    let mut attempts: Vec<&Span> = spans.iter().filter(|s| s.kind == 3).collect();
    attempts.sort_by_key(|s| int_attr(s, "pressure.attempt"));
    assert_eq!(attempts.len(), 3, "{attempts:?}");
    for (i, a) in attempts.iter().enumerate() {
        assert_eq!(a.parent_span_id, event.span_id);
        assert_eq!(
            int_attr(a, "pressure.attempt"),
            Some(i64::try_from(i + 1).expect("n"))
        );
        assert_eq!(str_attr(a, "gen_ai.operation.name").as_deref(), Some("chat"));
        assert_eq!(str_attr(a, "gen_ai.provider.name").as_deref(), Some("mock"));
        let (model, level) = if i < 2 { ("bad", 0) } else { ("good", 1) };
        assert_eq!(str_attr(a, "gen_ai.request.model").as_deref(), Some(model));
        assert_eq!(int_attr(a, "pressure.level"), Some(level));
        assert!(int_attr(a, "pressure.cost_micro_usd").is_some(), "{a:?}");
    }
    assert_eq!(
        attempts[0].status.as_ref().map(|s| s.code),
        Some(2),
        "a failed attempt"
    );
    let breaker_event = attempts[1].events.iter().find(|e| e.name == "pressure.breaker");
    if stream {
        let to = breaker_event
            .and_then(|e| e.attributes.iter().find(|kv| kv.key == "pressure.breaker.to"))
            .and_then(|kv| kv.value.as_ref()?.value.clone());
        assert_eq!(
            to,
            Some(AnyValue::StringValue("open".into())),
            "{:?}",
            attempts[1]
        );
    } else {
        assert!(breaker_event.is_none(), "{:?}", attempts[1]);
    }
    let good = attempts[2];
    if !stream {
        assert_eq!(str_attr(good, "gen_ai.response.model").as_deref(), Some("good"));
        assert!(int_attr(good, "gen_ai.usage.input_tokens").is_some_and(|t| t > 0));
        assert!(int_attr(good, "gen_ai.usage.output_tokens").is_some_and(|t| t > 0));
        assert!(int_attr(good, "pressure.cost_micro_usd").is_some_and(|c| c > 0));
    }
    let arrivals = mock.arrivals();
    for a in &attempts {
        let tp = format!("00-{trace}-{}-01", hex(&a.span_id));
        assert!(
            arrivals
                .iter()
                .any(|r| r.traceparent.as_deref() == Some(tp.as_str())),
            "the provider got no {tp}: {arrivals:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_completion_with_a_retry_and_a_fallback_and_a_streamed_one() {
    bounded(async {
        let received = Received::default();
        let rx = receiver(received.clone()).await;
        let up = TestUpstream::demo().await;
        let mock = provider().await;
        let gw = TestGateway::start(llm_config(&mock, &up, &rx)).await;
        let whole = "33333333333333333333333333333333";
        let reply = traced_chat(&gw, whole, false).await;
        assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
        check_chat_tree(&received, &mock, whole, false).await;
        let streamed = "44444444444444444444444444444444";
        let reply = traced_chat(&gw, streamed, true).await;
        assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
        assert!(String::from_utf8_lossy(&reply.body).contains("[DONE]"));
        check_chat_tree(&received, &mock, streamed, true).await;
        gw.stop().await;
        up.stop().await;
        rx.stop().await;
        mock.shutdown().await;
    })
    .await;
}

// ------------------------------------------------------------ decisions

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_decision_api_continues_the_clients_trace() {
    bounded(async {
        let received = Received::default();
        let rx = receiver(received.clone()).await;
        let mut section = super::harness::with_resources(json!({ "jobs": { "requestsPerMinute": 1 } }));
        section["tracing"] = json!({
            "endpoint": format!("{}/v1/traces", rx.url()),
            "serviceName": "gw-under-test",
        });
        let d = super::harness::Decisions::start(section).await;
        let mut statuses = Vec::new();
        for trace in [
            "55555555555555555555555555555555",
            "66666666666666666666666666666666",
        ] {
            let tp = format!("00-{trace}-{CLIENT_PARENT}-01");
            let reply = d
                .post(
                    "/v1/acquire",
                    &json!({ "resource": "jobs" }),
                    &[("traceparent", &tp)],
                )
                .await;
            statuses.push(reply.status.as_u16());
            let spans = received.wait_for(&unhex(trace), 1).await;
            let server = &spans[0];
            assert_eq!(server.kind, 2);
            assert_eq!(server.parent_span_id, unhex(CLIENT_PARENT));
            assert_eq!(server.name, "POST /v1/acquire");
            assert_eq!(
                int_attr(server, "http.response.status_code"),
                Some(i64::from(reply.status.as_u16()))
            );
            let result = server
                .events
                .iter()
                .find(|e| e.name == "pressure.admission")
                .and_then(|e| e.attributes.iter().find(|kv| kv.key == "pressure.result"))
                .and_then(|kv| kv.value.as_ref()?.value.clone());
            let want = if reply.status == StatusCode::OK {
                "granted"
            } else {
                "refused"
            };
            assert_eq!(result, Some(AnyValue::StringValue(want.into())));
        }
        assert_eq!(statuses, [200, 429]);
        d.stop().await;
        rx.stop().await;
    })
    .await;
}
