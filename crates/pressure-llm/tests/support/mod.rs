//! What the pipeline test binaries share: a mock OpenAI-compatible server
//! on 127.0.0.1 whose behaviour each binary supplies, a script of steps for
//! it, and the small config and request builders. Each binary uses a subset.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::ops::Deref;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::handler::Handler;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use pressure_core::ResourceBroker;
use pressure_llm::pipeline::{LlmClient, LlmConfig};
use pressure_llm::provider::{ChatRequest, Message};
use serde_json::{json, Value};
use tokio::time::Instant;

/// Prompt tokens the mocks report in `usage`.
pub(crate) const PROMPT_TOKENS: u64 = 11;
/// Completion tokens the mocks report in `usage`.
pub(crate) const COMPLETION_TOKENS: u64 = 7;

/// A mock's state: the binary's own `S` and the time of every call.
pub(crate) struct Shared<S> {
    hits: Mutex<Vec<Instant>>,
    inner: S,
}

impl<S> Shared<S> {
    /// Records a call; every handler calls it first.
    pub(crate) fn hit(&self) {
        self.hits.lock().unwrap().push(Instant::now());
    }
}

impl<S> Deref for Shared<S> {
    type Target = S;

    fn deref(&self) -> &S {
        &self.inner
    }
}

/// A mock provider serving `POST /v1/chat/completions`; aborted when dropped.
pub(crate) struct Mock<S> {
    pub(crate) state: Arc<Shared<S>>,
    /// The base URL (`http://127.0.0.1:PORT/v1`).
    pub(crate) url: String,
    task: tokio::task::JoinHandle<()>,
}

impl<S: Send + Sync + 'static> Mock<S> {
    /// Serves `handler` over `state` on a port of its own.
    pub(crate) async fn serve<H, T>(state: S, handler: H) -> Self
    where
        H: Handler<T, Arc<Shared<S>>>,
        T: 'static,
    {
        let state = Arc::new(Shared {
            hits: Mutex::new(Vec::new()),
            inner: state,
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(handler))
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            state,
            url: format!("http://{addr}/v1"),
            task,
        }
    }

    /// Calls received so far.
    pub(crate) fn hits(&self) -> usize {
        self.state.hits.lock().unwrap().len()
    }

    /// When each call arrived.
    pub(crate) fn hit_times(&self) -> Vec<Instant> {
        self.state.hits.lock().unwrap().clone()
    }
}

impl<S> Drop for Mock<S> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Steps played in order, then a default forever.
pub(crate) struct Script<T> {
    steps: Mutex<VecDeque<T>>,
    default: Mutex<T>,
}

impl<T: Copy> Script<T> {
    /// `steps` first, then `default`.
    pub(crate) fn new(steps: Vec<T>, default: T) -> Self {
        Self {
            steps: Mutex::new(steps.into()),
            default: Mutex::new(default),
        }
    }

    /// The step for the next call.
    pub(crate) fn next(&self) -> T {
        let next = self.steps.lock().unwrap().pop_front();
        next.unwrap_or_else(|| *self.default.lock().unwrap())
    }

    /// Adds a step after the ones still to play.
    pub(crate) fn push(&self, step: T) {
        self.steps.lock().unwrap().push_back(step);
    }

    /// Replaces the default.
    pub(crate) fn set_default(&self, step: T) {
        *self.default.lock().unwrap() = step;
    }
}

/// Model `m` of `provider`; `{}` limits means none (the field is null).
pub(crate) fn model(provider: &str, limits: Value) -> Value {
    let limits = if limits == json!({}) { Value::Null } else { limits };
    json!({
        "provider": provider, "model": "m", "limits": limits,
        "context": {"contextTokens": 8000, "maxOutputTokens": 1000},
        "price": {"inputMicroUsdPer1M": 1_000_000, "outputMicroUsdPer1M": 1_000_000}
    })
}

/// A client of `cfg` on an in-memory broker.
pub(crate) fn client(cfg: LlmConfig) -> LlmClient<pressure_core::MemoryBackend> {
    LlmClient::new(cfg, ResourceBroker::new()).unwrap()
}

/// A user message `text` with `max_tokens` 100.
pub(crate) fn request(text: &str) -> ChatRequest {
    let mut r = ChatRequest::new("ignored", vec![Message::new("user", text)]);
    r.max_tokens = Some(100);
    r
}

/// A retry policy of `max_attempts` with millisecond backoffs.
pub(crate) fn fast_retry(max_attempts: u32) -> Value {
    json!({"maxAttempts": max_attempts, "baseDelayMs": 5, "maxDelayMs": 20})
}

/// `f`, failing the test after 20 s.
pub(crate) async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .expect("test timed out")
}

/// What the mock does for one request.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Step {
    Ok,
    Status(u16),
    RateLimited { retry_after_ms: u64 },
    Hang,
}

/// The state of a [`ScriptedMock`].
pub(crate) struct Scripted {
    script: Script<Step>,
}

/// A mock answering a script of [`Step`]s: completions with the fixed
/// `usage`, error statuses, rate limits, or no answer.
pub(crate) type ScriptedMock = Mock<Scripted>;

impl ScriptedMock {
    /// A server answering `script` in order, then `default` forever.
    pub(crate) async fn start(script: Vec<Step>, default: Step) -> Self {
        Self::serve(
            Scripted {
                script: Script::new(script, default),
            },
            scripted,
        )
        .await
    }

    /// Answers `step` once the script is played.
    pub(crate) fn set_default(&self, step: Step) {
        self.state.script.set_default(step);
    }
}

async fn scripted(State(state): State<Arc<Shared<Scripted>>>, Json(body): Json<Value>) -> Response {
    state.hit();
    let step = state.script.next();
    match step {
        Step::Ok => Json(json!({
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                      "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS}
        }))
        .into_response(),
        Step::Status(code) => (
            StatusCode::from_u16(code).expect("an HTTP status"),
            Json(json!({"error": {"message": format!("mock {code}"), "type": "server_error"}})),
        )
            .into_response(),
        Step::RateLimited { retry_after_ms } => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after-ms", retry_after_ms.to_string())],
            Json(json!({"error": {"message": "slow down", "type": "rate_limit_error"}})),
        )
            .into_response(),
        Step::Hang => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            StatusCode::OK.into_response()
        }
    }
}
