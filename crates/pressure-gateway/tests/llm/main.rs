//! The gateway's OpenAI-compatible endpoint `POST /v1/chat/completions`,
//! against a mock OpenAI provider on 127.0.0.1: completions through the
//! pipeline, OpenAI-style errors that never reach the provider, fallback to
//! the backup with its degradation header, a tenant quota shared by HTTP and
//! LLM traffic, and the LLM metrics on the admin `/metrics`.

mod clients;
mod embeddings;
mod models;
mod sdk;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use parking_lot::Mutex;
use pressure_gateway::{Gateway, Serving};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

const SECRET_ENV: &str = "PRESSURE_LLM_TEST_JWT_SECRET";
const SECRET: &str = "llm-integration-tests-secret-0123456789";

/// Upper bound on any one test.
async fn bounded<F: std::future::Future<Output = ()>>(test: F) {
    bounded_for(Duration::from_secs(30), test).await;
}

/// Runs `test`, failing it when it outlives `bound`.
pub(crate) async fn bounded_for<F: std::future::Future<Output = ()>>(bound: Duration, test: F) {
    tokio::time::timeout(bound, test)
        .await
        .expect("test exceeded its time bound");
}

// ---------------------------------------------------------------- mock provider

#[derive(Default)]
struct MockState {
    /// Provider calls per model.
    hits: Mutex<BTreeMap<String, usize>>,
    /// Models that answer 500.
    failing: Mutex<BTreeSet<String>>,
    /// Proxied HTTP requests (`GET /api/hello`).
    http_hits: Mutex<usize>,
    /// Per provider call: model, `x-pressure-request-id`, `x-pressure-attempt`.
    tags: Mutex<Vec<(String, String, String)>>,
}

impl MockState {
    /// Counts one provider call to `model`, with its tag headers.
    fn called(&self, model: &str, headers: &http::HeaderMap) {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_owned()
        };
        self.tags.lock().push((
            model.to_owned(),
            header("x-pressure-request-id"),
            header("x-pressure-attempt"),
        ));
        *self.hits.lock().entry(model.to_owned()).or_default() += 1;
    }
}

/// A mock OpenAI provider (`/v1/chat/completions`) that is also a plain HTTP
/// upstream (`/api/hello`).
pub(crate) struct Mock {
    state: Arc<MockState>,
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Mock {
    pub(crate) async fn start() -> Self {
        let state = Arc::new(MockState::default());
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/embeddings", post(embeddings::provider))
            .route("/api/hello", get(api_hello))
            .with_state(Arc::clone(&state));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind mock");
        let addr = listener.local_addr().expect("mock addr");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { state, addr, task }
    }

    fn root(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Provider calls made so far (all models).
    fn hits(&self) -> usize {
        self.state.hits.lock().values().sum()
    }

    pub(crate) fn hits_of(&self, model: &str) -> usize {
        self.state.hits.lock().get(model).copied().unwrap_or(0)
    }

    fn fail(&self, model: &str) {
        self.state.failing.lock().insert(model.to_owned());
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn api_hello(State(state): State<Arc<MockState>>) -> &'static str {
    *state.http_hits.lock() += 1;
    "hello"
}

async fn chat(
    State(state): State<Arc<MockState>>,
    headers: http::HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    state.called(&model, &headers);
    if model.starts_with("busy") {
        // A provider whose quota is spent for the next 2 s.
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "2")],
            Json(json!({"error": {"message": "mock rate limit", "type": "requests",
                                  "code": "rate_limit_exceeded"}})),
        )
            .into_response();
    }
    if state.failing.lock().contains(&model) {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"error": {"message": "mock failure", "type": "server_error"}})),
        )
            .into_response();
    }
    let stream = body["stream"].as_bool().unwrap_or(false);
    if stream {
        let chunk = |delta: Value, finish: Value| {
            json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1, "model": model,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        };
        let usage = json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1,
                           "model": model, "choices": [],
                           "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}});
        let mut text = String::new();
        for v in [
            chunk(json!({"role": "assistant", "content": "hello"}), Value::Null),
            chunk(json!({"content": " there"}), json!("stop")),
            usage,
        ] {
            text.push_str(&format!("data: {v}\n\n"));
        }
        if model == "cut" {
            // Output, then the provider fails mid-stream.
            let first = chunk(json!({"role": "assistant", "content": "hel"}), Value::Null);
            let error = json!({"error": {"message": "overloaded", "type": "overloaded_error"}});
            return (
                [(http::header::CONTENT_TYPE, "text/event-stream")],
                format!("data: {first}\n\ndata: {error}\n\n"),
            )
                .into_response();
        }
        text.push_str("data: [DONE]\n\n");
        return ([(http::header::CONTENT_TYPE, "text/event-stream")], text).into_response();
    }
    Json(json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello there"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}
    }))
    .into_response()
}

// ---------------------------------------------------------------- gateway

/// The `gateway` section: one upstream `api` on the mock, and `gateway.llm`
/// with three models on the mock provider (no API key) and three use cases.
pub(crate) fn config(mock: &Mock, pressure: Value) -> Value {
    let context = |tokens: u64, out: u64| json!({"contextTokens": tokens, "maxOutputTokens": out});
    json!({
        "upstreams": { "api": { "url": mock.root(), "pathPrefix": "/api" } },
        "pressure": pressure,
        "llm": {
            "providers": { "mock": { "baseUrl": format!("{}/v1", mock.root()) } },
            "models": [
                { "provider": "mock", "model": "good", "context": context(8192, 512),
                  "price": { "inputMicroUsdPer1M": 1_000_000, "outputMicroUsdPer1M": 2_000_000 } },
                { "provider": "mock", "model": "bad", "context": context(8192, 512),
                  "price": { "inputMicroUsdPer1M": 1_000_000, "outputMicroUsdPer1M": 2_000_000 } },
                { "provider": "mock", "model": "tiny", "context": context(64, 16) },
                { "provider": "mock", "model": "cut", "context": context(8192, 512) },
                { "provider": "mock", "model": "busy-a", "context": context(8192, 512) },
                { "provider": "mock", "model": "busy-b", "context": context(8192, 512) }
            ],
            "useCases": {
                "support": { "chain": [ { "model": "mock/good" } ] },
                "fallback": { "chain": [ { "model": "mock/bad" }, { "model": "mock/good" } ],
                              "retry": { "maxAttempts": 1 } },
                "small": { "chain": [ { "model": "mock/tiny" } ] },
                "queue": { "chain": [ { "manualQueue": true } ] },
                "cutoff": { "chain": [ { "model": "mock/cut" }, { "model": "mock/good" } ],
                            "retry": { "maxAttempts": 1 } },
                "busy": { "chain": [ { "model": "mock/busy-a" }, { "model": "mock/busy-b" } ],
                          "retry": { "maxAttempts": 1 } },
                "only-bad": { "chain": [ { "model": "mock/bad" } ], "retry": { "maxAttempts": 1 } },
                "bad-then-busy": { "chain": [ { "model": "mock/bad" }, { "model": "mock/busy-a" } ],
                                   "retry": { "maxAttempts": 1 } }
            }
        }
    })
}

pub(crate) type TestClient = Client<HttpConnector, Full<Bytes>>;

/// A gateway on `127.0.0.1:0`, stopped when dropped.
pub(crate) struct TestGateway {
    pub(crate) addr: SocketAddr,
    admin: SocketAddr,
    client: TestClient,
    _serving: Serving,
}

impl TestGateway {
    pub(crate) async fn start(mut section: Value) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let admin_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind admin");
        let addr = listener.local_addr().expect("proxy addr");
        let admin = admin_listener.local_addr().expect("admin addr");
        section["listen"] = json!(addr.to_string());
        section["admin"]["listen"] = json!(admin.to_string());
        let text = json!({ "gateway": section }).to_string();
        let config = pressure_gateway::config::parse_in(&text, Path::new("."))
            .unwrap_or_else(|e| panic!("invalid test config: {e}\n{text}"));
        let gateway = Gateway::build(config, Path::new("."))
            .await
            .expect("gateway builds");
        assert!(gateway.llm().is_some(), "gateway.llm builds a client");
        Self {
            addr,
            admin,
            client: Client::builder(TokioExecutor::new()).build_http(),
            _serving: gateway.spawn(listener, admin_listener),
        }
    }

    async fn send(&self, req: Request<Full<Bytes>>) -> (StatusCode, http::HeaderMap, Bytes) {
        let resp = self.client.request(req).await.expect("gateway answers");
        let (parts, body) = resp.into_parts();
        let bytes = body.collect().await.expect("body").to_bytes();
        (parts.status, parts.headers, bytes)
    }

    /// `POST /v1/chat/completions` with `body` (raw bytes) and an optional token.
    async fn chat_raw(&self, body: &str, token: Option<&str>) -> (StatusCode, http::HeaderMap, Value) {
        let mut req = Request::post(format!("http://{}/v1/chat/completions", self.addr))
            .header(http::header::CONTENT_TYPE, "application/json");
        if let Some(t) = token {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let (status, headers, bytes) = self
            .send(req.body(Full::new(Bytes::from(body.to_owned()))).expect("valid"))
            .await;
        let value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("JSON body ({e}): {}", String::from_utf8_lossy(&bytes)));
        (status, headers, value)
    }

    async fn chat(&self, body: Value) -> (StatusCode, http::HeaderMap, Value) {
        self.chat_raw(&body.to_string(), None).await
    }

    async fn get(&self, path: &str, token: Option<&str>) -> StatusCode {
        let mut req = Request::get(format!("http://{}{path}", self.addr));
        if let Some(t) = token {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        self.send(req.body(Full::new(Bytes::new())).expect("request"))
            .await
            .0
    }

    /// `GET` on the admin listener, as JSON.
    async fn admin_json(&self, path: &str) -> (StatusCode, Value) {
        let req = Request::get(format!("http://{}{path}", self.admin))
            .body(Full::new(Bytes::new()))
            .expect("valid");
        let (status, _, bytes) = self.send(req).await;
        (status, serde_json::from_slice(&bytes).expect("JSON body"))
    }

    async fn metrics(&self) -> String {
        let req = Request::get(format!("http://{}/metrics", self.admin))
            .body(Full::new(Bytes::new()))
            .expect("valid");
        let (status, _, bytes) = self.send(req).await;
        assert_eq!(status, StatusCode::OK);
        String::from_utf8(bytes.to_vec()).expect("utf-8 metrics")
    }
}

fn hello(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hello"}]})
}

fn degradation(headers: &http::HeaderMap) -> &str {
    headers
        .get("x-pressure-degradation")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("<none>")
}

pub(crate) fn no_limits() -> Value {
    json!({ "enabled": true })
}

// ---------------------------------------------------------------- tests

#[tokio::test]
async fn a_completion_goes_through_the_pipeline() {
    bounded(async {
        let mock = Mock::start().await;
        let gw = TestGateway::start(config(&mock, no_limits())).await;
        let (status, headers, body) = gw.chat(hello("support")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(degradation(&headers), "primary");
        assert_eq!(
            headers.get(http::header::CONTENT_TYPE).expect("valid"),
            "application/json"
        );
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["choices"][0]["message"]["content"], "hello there");
        assert_eq!(body["usage"]["total_tokens"], 11);
        assert_eq!(body["pressure"]["degradation"], "primary");
        assert_eq!(body["pressure"]["level"], 0);
        assert_eq!(body["pressure"]["attempts"], 1);
        // The use case's model is what the provider was asked for.
        assert_eq!(body["model"], "good");
        assert_eq!(mock.hits_of("good"), 1);
    })
    .await;
}

#[tokio::test]
async fn bad_requests_never_reach_the_provider() {
    bounded(async {
        let mock = Mock::start().await;
        let gw = TestGateway::start(config(&mock, no_limits())).await;

        let (status, _, body) = gw
            .chat_raw("{\"model\": \"support\", \"messages\": [", None)
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["code"], "invalid_json");
        for key in ["message", "type", "param", "code"] {
            assert!(body["error"].get(key).is_some(), "error.{key} present: {body}");
        }

        let (status, _, body) = gw
            .chat(json!({"messages": [{"role": "user", "content": "x"}]}))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["error"]["param"], "model");

        let (status, _, body) = gw.chat(json!({"model": "support"})).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["error"]["param"], "messages");

        let (status, _, body) = gw.chat(json!(["not", "an", "object"])).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

        let (status, _, body) = gw.chat(hello("no-such-use-case")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert_eq!(body["error"]["code"], "model_not_found");
        assert_eq!(body["error"]["type"], "invalid_request_error");

        let long = "lorem ipsum dolor sit amet ".repeat(200);
        let (status, _, body) = gw
            .chat(json!({"model": "small", "messages": [{"role": "user", "content": long}]}))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["error"]["code"], "context_length_exceeded");

        let mut streamed = json!({"model": "small", "stream": true,
                                  "messages": [{"role": "user", "content": long}]});
        let (status, _, body) = gw.chat(streamed.take()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["error"]["code"], "context_length_exceeded");

        assert_eq!(mock.hits(), 0, "no bad request reached the provider");
    })
    .await;
}

#[tokio::test]
async fn a_failing_primary_falls_back_to_the_backup() {
    bounded(async {
        let mock = Mock::start().await;
        mock.fail("bad");
        let gw = TestGateway::start(config(&mock, no_limits())).await;
        let (status, headers, body) = gw.chat(hello("fallback")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(degradation(&headers), "backup");
        assert_eq!(body["pressure"]["degradation"], "backup");
        assert_eq!(body["pressure"]["level"], 1);
        assert_eq!(body["pressure"]["attempts"], 2);
        assert_eq!(body["model"], "good");
        assert_eq!(mock.hits_of("bad"), 1);
        assert_eq!(mock.hits_of("good"), 1);
    })
    .await;
}

#[tokio::test]
async fn the_request_id_reaches_the_provider_with_each_attempt() {
    bounded(async {
        let mock = Mock::start().await;
        mock.fail("bad");
        let gw = TestGateway::start(config(&mock, no_limits())).await;
        let req = Request::post(format!("http://{}/v1/chat/completions", gw.addr))
            .header("content-type", "application/json")
            .header("x-request-id", "chaos-42")
            .body(Full::new(Bytes::from(hello("fallback").to_string())))
            .expect("request");
        let (status, headers, _) = gw.send(req).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers.get("x-request-id").expect("echoed"), "chaos-42");
        let tag = |m: &str, id: &str, n: &str| (m.to_owned(), id.to_owned(), n.to_owned());
        assert_eq!(
            *mock.state.tags.lock(),
            [tag("bad", "chaos-42", "1"), tag("good", "chaos-42", "2")],
            "one event id, attempts numbered across the fallback"
        );

        // Without a usable id the gateway makes one, and says which.
        mock.state.tags.lock().clear();
        let (status, headers, _) = gw.chat(hello("support")).await;
        assert_eq!(status, StatusCode::OK);
        let id = headers
            .get("x-request-id")
            .expect("generated")
            .to_str()
            .expect("ascii");
        assert!(!id.is_empty());
        assert_eq!(*mock.state.tags.lock(), [tag("good", id, "1")]);
    })
    .await;
}

#[tokio::test]
async fn the_admin_llm_page_shows_breakers_transitions_and_pools() {
    bounded(async {
        let mock = Mock::start().await;
        mock.fail("bad");
        let gw = TestGateway::start(config(&mock, no_limits())).await;
        let (status, _, _) = gw.chat(hello("fallback")).await;
        assert_eq!(status, StatusCode::OK);
        let (status, page) = gw.admin_json("/admin/pressure/llm").await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let bad = page["breakers"]
            .as_array()
            .expect("breakers")
            .iter()
            .find(|b| b["model"] == "bad")
            .expect("the failing model's breaker");
        assert_eq!(
            (bad["state"].as_str(), bad["failures"].as_u64()),
            (Some("closed"), Some(1)),
            "{page}"
        );
        assert_eq!(page["pools"]["mock"]["peak"], 1, "{page}");
        assert_eq!(page["pools"]["mock"]["inUse"], 0, "{page}");
        assert_eq!(page["answers"]["backup"], 1, "{page}");
        assert_eq!(page["attemptErrors"]["server"], 1, "{page}");
        assert_eq!(page["transitions"], json!([]), "one failure opens nothing");

        // Nine more failures reach the default minimum of 10 calls at 100 %.
        for _ in 0..9 {
            let (status, _, _) = gw.chat(hello("fallback")).await;
            assert_eq!(status, StatusCode::OK);
        }
        let (_, page) = gw.admin_json("/admin/pressure/llm").await;
        let t = &page["transitions"][0];
        assert_eq!(
            (t["breaker"].as_str(), t["from"].as_str(), t["to"].as_str()),
            (Some("mock/bad"), Some("closed"), Some("open")),
            "{page}"
        );
        assert!(t["msAgo"].as_u64().is_some_and(|ms| ms < 60_000), "{page}");
        let bad = page["breakers"]
            .as_array()
            .expect("breakers")
            .iter()
            .find(|b| b["model"] == "bad")
            .expect("bad");
        assert_eq!(
            (bad["state"].as_str(), bad["timesOpened"].as_u64()),
            (Some("open"), Some(1)),
            "{page}"
        );
    })
    .await;
}

/// `POST /v1/chat/completions` with `"stream": true`: status, headers and
/// the `data:` payloads of the events.
async fn stream(gw: &TestGateway, use_case: &str) -> (StatusCode, http::HeaderMap, Vec<String>) {
    let mut body = hello(use_case);
    body["stream"] = json!(true);
    let req = Request::post(format!("http://{}/v1/chat/completions", gw.addr))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("request");
    let (status, headers, bytes) = gw.send(req).await;
    let text = String::from_utf8(bytes.to_vec()).expect("utf-8 events");
    let events = text
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            e.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("a data event: {e:?}"))
                .to_owned()
        })
        .collect();
    (status, headers, events)
}

#[tokio::test]
async fn a_streamed_completion_is_served_as_sse() {
    bounded(async {
        let mock = Mock::start().await;
        let gw = TestGateway::start(config(&mock, no_limits())).await;
        let (status, headers, events) = stream(&gw, "support").await;
        assert_eq!(status, StatusCode::OK, "{events:?}");
        assert_eq!(degradation(&headers), "primary");
        assert_eq!(
            headers.get(http::header::CONTENT_TYPE).expect("content type"),
            "text/event-stream"
        );
        assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{events:?}");
        let chunks: Vec<Value> = events[..events.len() - 1]
            .iter()
            .map(|e| serde_json::from_str(e).expect("chunk JSON"))
            .collect();
        let text: String = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, "hello there");
        assert!(
            chunks.iter().all(|c| c["object"] == "chat.completion.chunk"),
            "{chunks:?}"
        );
        assert_eq!(mock.hits_of("good"), 1);
    })
    .await;
}

#[tokio::test]
async fn a_stream_that_fails_after_output_ends_with_an_error_event() {
    bounded(async {
        let mock = Mock::start().await;
        let gw = TestGateway::start(config(&mock, no_limits())).await;
        let (status, headers, events) = stream(&gw, "cutoff").await;
        assert_eq!(status, StatusCode::OK, "{events:?}");
        assert_eq!(degradation(&headers), "primary");
        assert!(!events.iter().any(|e| e == "[DONE]"), "{events:?}");
        let last: Value = serde_json::from_str(events.last().expect("events")).expect("error JSON");
        assert!(last["error"]["message"].is_string(), "{last}");
        assert!(last["error"]["type"].is_string(), "{last}");
        let first: Value = serde_json::from_str(&events[0]).expect("chunk JSON");
        assert_eq!(first["choices"][0]["delta"]["content"], "hel");
        // No second model's text spliced in.
        assert_eq!(mock.hits_of("cut"), 1);
        assert_eq!(mock.hits_of("good"), 0);
    })
    .await;
}

#[tokio::test]
async fn a_queued_request_is_accepted_with_202() {
    bounded(async {
        let mock = Mock::start().await;
        let gw = TestGateway::start(config(&mock, no_limits())).await;
        let (status, headers, body) = gw.chat(hello("queue")).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        assert_eq!(degradation(&headers), "manual_queue");
        // Still a chat completion, so SDKs parse it (see clients.rs).
        assert_eq!(body["object"], "chat.completion");
        assert!(body["id"].as_str().is_some_and(|t| !t.is_empty()), "{body}");
        assert_eq!(body["pressure"]["degradation"], "manual_queue");
        assert_eq!(mock.hits(), 0);
    })
    .await;
}

fn token(tenant: &str) -> String {
    let exp = jsonwebtoken::get_current_timestamp() + 3600;
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({"namespaceId": tenant, "exp": exp}),
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()).expect("HMAC key"),
    )
    .expect("token")
}

#[tokio::test]
async fn a_tenant_quota_is_charged_by_http_and_llm_traffic() {
    bounded(async {
        // A name no other suite uses, always set to the same value.
        std::env::set_var(SECRET_ENV, SECRET);
        let mock = Mock::start().await;
        let mut section = config(
            &mock,
            json!({ "enabled": true,
                    "perTenant": { "enabled": true, "limits": { "requestsPerMinute": 2 } } }),
        );
        section["auth"] = json!({ "required": false,
            "jwt": { "algorithms": ["HS256"], "secretEnv": SECRET_ENV, "tenantClaim": "namespaceId" } });
        let gw = TestGateway::start(section).await;
        let t = token("acme");

        assert_eq!(gw.get("/api/hello", Some(&t)).await, StatusCode::OK);
        let (status, _, body) = gw.chat_raw(&hello("support").to_string(), Some(&t)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        // The third request of either kind is over the tenant's 2/min.
        let (status, _, _) = gw.chat_raw(&hello("support").to_string(), Some(&t)).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            gw.get("/api/hello", Some(&t)).await,
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(mock.hits(), 1, "the denied LLM request made no provider call");
        assert_eq!(*mock.state.http_hits.lock(), 1);
        // Another tenant has its own quota.
        let other = token("globex");
        let (status, _, body) = gw.chat_raw(&hello("support").to_string(), Some(&other)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    })
    .await;
}

/// An OpenAI SDK sends its API key as `Authorization: Bearer sk-…`: with
/// `gateway.auth.apiKeys` that key names the tenant of LLM calls (its
/// quota shared with the tenant's HTTP traffic), and an unknown one is
/// OpenAI's `401` `invalid_api_key`.
#[tokio::test]
async fn an_api_key_names_the_tenant_of_llm_calls() {
    bounded(async {
        const KEY: &str = "sk-llm-test-acme-0123456789abcdef";
        const UNKNOWN: &str = "sk-llm-test-unknown-0123456789abcdef";
        let sha256: String = <sha2::Sha256 as sha2::Digest>::digest(KEY.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let mock = Mock::start().await;
        let mut section = config(
            &mock,
            json!({ "enabled": true,
                    "perTenant": { "enabled": true, "limits": { "requestsPerMinute": 2 } } }),
        );
        section["auth"] = json!({ "required": true,
            "apiKeys": [{ "sha256": sha256, "tenant": "acme", "name": "sdk" }] });
        let gw = TestGateway::start(section).await;

        let (status, _, body) = gw.chat_raw(&hello("support").to_string(), Some(KEY)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(gw.get("/api/hello", Some(KEY)).await, StatusCode::OK);
        let (status, _, _) = gw.chat_raw(&hello("support").to_string(), Some(KEY)).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "acme's 2/min are spent");

        let (status, _, body) = gw.chat_raw(&hello("support").to_string(), Some(UNKNOWN)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        assert_eq!(body["error"]["code"], "invalid_api_key", "{body}");
        assert!(!body.to_string().contains(UNKNOWN), "{body}");
        assert_eq!(mock.hits(), 1, "only the admitted call reached the provider");
    })
    .await;
}

#[tokio::test]
async fn a_route_limit_floors_the_endpoint() {
    bounded(async {
        let mock = Mock::start().await;
        let gw = TestGateway::start(config(
            &mock,
            json!({ "enabled": true, "perRoute": [{ "resource": "gateway:route:llm",
                "pathPrefix": "/v1/chat/completions", "limits": { "requestsPerMinute": 1 } }] }),
        ))
        .await;
        let (status, _, body) = gw.chat(hello("support")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let (status, _, _) = gw.chat(hello("support")).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(mock.hits(), 1);
    })
    .await;
}

#[tokio::test]
async fn other_paths_are_still_proxied() {
    bounded(async {
        let mock = Mock::start().await;
        let gw = TestGateway::start(config(&mock, no_limits())).await;
        assert_eq!(gw.get("/api/hello", None).await, StatusCode::OK);
        // A GET of the endpoint is not the endpoint: no upstream owns the path.
        assert_eq!(gw.get("/v1/chat/completions", None).await, StatusCode::NOT_FOUND);
        assert_eq!(mock.hits(), 0);
    })
    .await;
}

#[tokio::test]
async fn metrics_export_the_llm_counters_and_breakers() {
    bounded(async {
        let mock = Mock::start().await;
        mock.fail("bad");
        let gw = TestGateway::start(config(&mock, no_limits())).await;
        let (status, _, _) = gw.chat(hello("support")).await;
        assert_eq!(status, StatusCode::OK);
        let (status, _, _) = gw.chat(hello("fallback")).await;
        assert_eq!(status, StatusCode::OK);
        let (status, _, _) = gw.chat(hello("nope")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);

        let text = gw.metrics().await;
        for line in [
            "# TYPE pressure_llm_requests_total counter",
            "pressure_llm_requests_total 3",
            "pressure_llm_attempts_total 3",
            "pressure_llm_retries_total 0",
            "pressure_llm_answers_total{degradation=\"primary\"} 1",
            "pressure_llm_answers_total{degradation=\"backup\"} 1",
            "pressure_llm_answers_total{degradation=\"rules\"} 0",
            "pressure_llm_errors_total{kind=\"unknown_use_case\"} 1",
            "# TYPE pressure_llm_breaker_state gauge",
            "pressure_llm_breaker_state{provider=\"mock\",model=\"bad\"} 0",
            "pressure_llm_breaker_state{provider=\"mock\",model=\"good\"} 0",
            "pressure_llm_breaker_state{provider=\"mock\",model=\"tiny\"} 0",
            "pressure_llm_breaker_state{provider=\"mock\",model=\"cut\"} 0",
            "# TYPE pressure_llm_pool_peak gauge",
            "pressure_llm_pool_in_use{provider=\"mock\"} 0",
            "pressure_llm_pool_peak{provider=\"mock\"} 1",
            "pressure_llm_pool_wait_timeouts_total{provider=\"mock\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "missing `{line}` in:\n{text}");
        }
        assert!(
            text.lines()
                .any(|l| l.starts_with("pressure_llm_attempt_errors_total{kind=")),
            "{text}"
        );
        let failed: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("pressure_llm_failed_spent_micro_usd_total "))
            .expect("failed spend line")
            .parse()
            .expect("a number");
        assert!(failed > 0, "the failed attempt on `bad` cost its input tokens");
        // Time to first token and latency are histograms per (provider, model).
        for family in ["pressure_llm_ttft_seconds", "pressure_llm_latency_seconds"] {
            let count: u64 = text
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{family}_count{{provider=\"mock\",model=\"good\"}} ")))
                .unwrap_or_else(|| panic!("no {family}_count for mock/good in:\n{text}"))
                .parse()
                .expect("a number");
            assert!(count >= 1, "{family}: the successful call was recorded");
        }
        // Valid exposition: every sample belongs to a family announced before it.
        // Histogram families announce `x` and sample `x_bucket`, `x_sum`, `x_count`.
        let mut families = BTreeSet::new();
        let mut histograms = BTreeSet::new();
        for l in text.lines() {
            if let Some(rest) = l.strip_prefix("# TYPE ") {
                let mut parts = rest.split(' ');
                let name = parts.next().expect("valid");
                assert!(families.insert(name.to_owned()), "family {name} announced twice");
                if parts.next() == Some("histogram") {
                    histograms.insert(name.to_owned());
                }
            } else if !l.starts_with('#') && !l.is_empty() {
                let name = l.split(['{', ' ']).next().expect("valid");
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|sfx| name.strip_suffix(sfx).filter(|b| histograms.contains(*b)));
                assert!(
                    families.contains(name) || base.is_some(),
                    "sample `{l}` of an unannounced family"
                );
            }
        }
    })
    .await;
}

#[tokio::test]
async fn the_body_is_read_within_the_body_limit() {
    bounded(async {
        let mock = Mock::start().await;
        let mut section = config(&mock, no_limits());
        section["limits"] = json!({ "maxBodyBytes": 256 });
        let gw = TestGateway::start(section).await;
        let big = json!({"model": "support", "messages": [{"role": "user", "content": "x".repeat(1000)}]});
        let req = Request::post(format!("http://{}/v1/chat/completions", gw.addr))
            .body(Full::new(Bytes::from(big.to_string())))
            .expect("valid");
        let (status, _, body) = gw.send(req).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        let declared: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(declared["error"]["type"], "invalid_request_error", "{declared}");
        assert_eq!(declared["error"]["code"], "request_too_large", "{declared}");
        // The same refusal, in the same shape, when the body comes chunked
        // and is cut on the way.
        let payload = big.to_string();
        let mut raw = tokio::net::TcpStream::connect(gw.addr).await.expect("connect");
        let chunked = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\
             Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{payload}\r\n0\r\n\r\n",
            payload.len()
        );
        tokio::io::AsyncWriteExt::write_all(&mut raw, chunked.as_bytes())
            .await
            .expect("write");
        let mut answer = Vec::new();
        let _ = tokio::io::AsyncReadExt::read_to_end(&mut raw, &mut answer).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        let json_start = answer.find("\r\n\r\n").map_or(0, |i| i + 4);
        let cut: Value = serde_json::from_str(answer[json_start..].trim()).expect("json body");
        assert_eq!(cut["error"], declared["error"], "one shape whatever the framing");
        assert_eq!(mock.hits(), 0);
    })
    .await;
}

/// An embeddings call of a tenant spends the tenant's money budget like a
/// chat call: what the provider billed (its `usage` at the model's price)
/// is counted on `gateway:tenant:<id>`, and once the budget cannot cover
/// the next call's estimate the answer is `429 budget_exceeded` without a
/// provider call.
#[tokio::test]
async fn embeddings_spend_the_tenants_money_budget() {
    bounded(async {
        std::env::set_var(SECRET_ENV, SECRET);
        let mock = Mock::start().await;
        let mut section = embeddings::with_embeddings(config(
            &mock,
            json!({ "perTenant": { "enabled": true, "limits": { "costMicroUsdPerDay": 1_000_000 } } }),
        ));
        section["auth"] = json!({ "required": true,
            "jwt": { "algorithms": ["HS256"], "secretEnv": SECRET_ENV } });
        let gw = TestGateway::start(section).await;
        let bearer = format!("Bearer {}", token("acme"));
        let embed = || async {
            let req = Request::post(format!("http://{}/v1/embeddings", gw.addr))
                .header(http::header::CONTENT_TYPE, "application/json")
                .header(http::header::AUTHORIZATION, &bearer)
                .body(Full::new(Bytes::from(
                    json!({"model": "search", "input": ["one", "two"]}).to_string(),
                )))
                .expect("request");
            let (status, headers, bytes) = gw.send(req).await;
            (
                status,
                headers,
                serde_json::from_slice::<Value>(&bytes).expect("JSON"),
            )
        };
        let (status, _, body) = embed().await;
        assert_eq!(status, StatusCode::OK, "{body}");
        // One micro-dollar a token: the bill is the prompt tokens.
        let billed = body["usage"]["prompt_tokens"].as_u64().expect("usage");
        let used = |doc: &Value| {
            doc["usage"]
                .as_array()
                .and_then(|rows| rows.iter().find(|r| r["dimension"] == "costMicroUsdPerDay"))
                .and_then(|r| r["used"].as_u64())
        };
        let (_, doc) = gw.admin_json("/admin/pressure/tenants/acme/limits").await;
        assert_eq!(used(&doc), Some(billed), "{doc}");
        // A budget of exactly what is spent covers no further call.
        let req = Request::put(format!("http://{}/admin/pressure/tenants/acme/limits", gw.admin))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(
                json!({ "costMicroUsdPerDay": billed }).to_string(),
            )))
            .expect("request");
        assert_eq!(gw.send(req).await.0, StatusCode::OK);
        let hits = mock.hits();
        let (status, headers, body) = embed().await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        assert_eq!(body["error"]["code"], "budget_exceeded", "{body}");
        assert_eq!(body["error"]["param"], "costMicroUsdPerDay", "{body}");
        assert_eq!(
            headers.get("x-should-retry").map(|v| v.as_bytes()),
            Some(&b"false"[..])
        );
        assert_eq!(mock.hits(), hits, "the refused call reached no provider");
    })
    .await;
}

/// A chat call refused by the pipeline because its tenant's money budget
/// cannot cover it is a denial like a limit's: counted in
/// `pressure_gateway_denied_total` (the tenant layer's, tenants
/// aggregated) and logged as `request denied` (`pressure::denial`), and
/// its 429 still carries the event's `x-request-id`. (The endpoint once
/// rendered its own refusals, uncounted; the route layer now renders and
/// records them all.)
#[tokio::test(flavor = "current_thread")]
async fn an_llm_budget_refusal_is_counted_and_logged_as_a_denial() {
    let capture = super::support::Capture::default();
    let _guard = capture.install();
    // Callsites first hit by a parallel test on a thread without a
    // subscriber may have cached "never"; recompute with ours installed.
    tracing::callsite::rebuild_interest_cache();
    bounded(async {
        std::env::set_var(SECRET_ENV, SECRET);
        let mock = Mock::start().await;
        let mut section = config(
            &mock,
            json!({ "perTenant": { "enabled": true, "limits": { "costMicroUsdPerDay": 1 } } }),
        );
        section["auth"] = json!({ "required": true,
            "jwt": { "algorithms": ["HS256"], "secretEnv": SECRET_ENV } });
        let gw = TestGateway::start(section).await;
        let req = Request::post(format!("http://{}/v1/chat/completions", gw.addr))
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(
                http::header::AUTHORIZATION,
                format!("Bearer {}", token("budgeted")),
            )
            .header("x-request-id", "spent-1")
            .body(Full::new(Bytes::from(hello("support").to_string())))
            .expect("request");
        let (status, headers, bytes) = gw.send(req).await;
        let body: Value = serde_json::from_slice(&bytes).expect("JSON");
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        assert_eq!(body["error"]["code"], "budget_exceeded", "{body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("cannot cover this call"),
            "the pipeline refused: {message}"
        );
        assert_eq!(
            headers.get("x-request-id").map(|v| v.as_bytes()),
            Some(&b"spent-1"[..])
        );
        assert_eq!(mock.hits(), 0, "the refused call reached no provider");

        let metrics = gw.metrics().await;
        assert!(
            metrics
                .contains("pressure_gateway_denied_total{resource=\"gateway:tenant:*\",layer=\"tenant\"} 1"),
            "{metrics}"
        );
        let lines: Vec<Value> = capture
            .lines()
            .into_iter()
            .filter(|l| l["target"] == "pressure::denial")
            .collect();
        assert_eq!(lines.len(), 1, "{lines:#?}");
        let f = &lines[0]["fields"];
        assert_eq!(f["message"], "request denied", "{f}");
        assert_eq!(f["resource"], "gateway:tenant:budgeted", "{f}");
        assert_eq!(f["layer"], "tenant", "{f}");
        assert_eq!(f["namespace_id"], "budgeted", "{f}");
        assert_eq!(f["dimension"], "costMicroUsdPerDay", "{f}");
    })
    .await;
}
