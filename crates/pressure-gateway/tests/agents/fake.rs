//! A small fake provider that records every request it gets (path,
//! headers, body): Anthropic's `POST /v1/messages` (a fixed message, its
//! event stream, or `529 overloaded_error`) and OpenAI's
//! `POST /v1/chat/completions` (a function call when function tools are
//! offered and no tool result came back yet, else text).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use http::{HeaderMap, StatusCode};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One request the fake got.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) path: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Value,
}

impl Seen {
    /// A header as text, `None` when absent.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

#[derive(Default)]
struct FakeState {
    seen: Mutex<Vec<Seen>>,
    overloaded: AtomicBool,
}

/// The fake provider, aborted when dropped.
pub(crate) struct Fake {
    addr: SocketAddr,
    state: Arc<FakeState>,
    task: JoinHandle<()>,
}

/// The fake's whole Messages answer (with a field no SDK knows, which a
/// passthrough keeps).
pub(crate) fn fake_message() -> Value {
    json!({
        "id": "msg_fake_01", "type": "message", "role": "assistant", "model": "claude-m",
        "content": [ { "type": "text", "text": "from the fake" } ],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": { "input_tokens": 12, "output_tokens": 4,
                   "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0 },
        "fake_extra": { "kept": true }
    })
}

impl Fake {
    pub(crate) async fn start() -> Self {
        let state = Arc::new(FakeState::default());
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .route("/v1/chat/completions", post(chat))
            .with_state(Arc::clone(&state));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind fake");
        let addr = listener.local_addr().expect("fake addr");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, state, task }
    }

    /// The API root (`…/v1`).
    pub(crate) fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request so far.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().clone()
    }

    /// From now on `/v1/messages` answers `529 overloaded_error`.
    pub(crate) fn overload(&self) {
        self.state.overloaded.store(true, Ordering::SeqCst);
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn record(state: &FakeState, path: &str, headers: HeaderMap, body: &Value) {
    state.seen.lock().push(Seen {
        path: path.to_owned(),
        headers,
        body: body.clone(),
    });
}

async fn messages(
    State(state): State<Arc<FakeState>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    record(&state, "/v1/messages", headers, &body);
    if state.overloaded.load(Ordering::SeqCst) {
        let error = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
        return (StatusCode::from_u16(529).expect("529"), Json(error)).into_response();
    }
    if body["stream"].as_bool() != Some(true) {
        return Json(fake_message()).into_response();
    }
    let events = [
        (
            "message_start",
            json!({"type": "message_start", "message": {
            "id": "msg_fake_01", "type": "message", "role": "assistant", "model": "claude-m",
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
        ),
        ("ping", json!({"type": "ping"})),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "from "}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "the fake"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": null},
            "usage": {"output_tokens": 4}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    let text: String = events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect();
    ([(http::header::CONTENT_TYPE, "text/event-stream")], text).into_response()
}

async fn chat(State(state): State<Arc<FakeState>>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    record(&state, "/v1/chat/completions", headers, &body);
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    let answered = body["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
    let tool = body["tools"][0]["function"]["name"].as_str();
    let (message, finish) = match tool {
        Some(name) if !answered => (
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_fake_1", "type": "function",
                "function": {"name": name, "arguments": "{\"city\":\"Paris\"}"}}]}),
            "tool_calls",
        ),
        _ => (json!({"role": "assistant", "content": "sunny in Paris"}), "stop"),
    };
    Json(json!({
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 1, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}
    }))
    .into_response()
}
