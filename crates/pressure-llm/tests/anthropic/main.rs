//! The Anthropic provider kind against a scripted Messages-API server on
//! 127.0.0.1: the wire (URL, headers, translated body), answers and streams
//! translated back, error classification, `anthropic-ratelimit-*` hints
//! holding the model, reconcile to the reported usage, and a chain that
//! falls back from an Anthropic model to an OpenAI one.

#![allow(clippy::unwrap_used)]

use super::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Json, Response};
use axum::routing::post;
use axum::Router;
use futures::StreamExt;
use pressure_llm::pipeline::{Degradation, LlmConfig};
use pressure_llm::provider::{
    ChatRequest, Message, ProviderClient, ProviderConfig, ProviderKind, ProviderSettings, TimeoutsConfig,
};
use pressure_llm::taxonomy::ErrorKind;
use pressure_llm::tokens::TokenCounter;
use serde_json::{json, Value};
use support::{bounded, client, fast_retry, Script};
use tokio::time::Instant;

/// Usage the scripted server reports: deliberately unlike the client's estimate.
const INPUT: u64 = 40;
const CACHE_READ: u64 = 25;
const OUTPUT: u64 = 9;

/// The response's `date` and a reset 30 s later (the hint is relative to `date`).
const DATE: &str = "Wed, 21 Oct 2015 07:28:00 GMT";
const RESET_30S: &str = "2015-10-21T07:28:30Z";

#[derive(Clone, Copy, Debug)]
enum Step {
    /// A message answer; `spent` adds headers saying no requests are left.
    Ok { spent: bool },
    /// A message answer whose headers say only 10 input tokens are left
    /// (per-direction headers only, as some Anthropic tiers send them).
    LowInput,
    /// A streamed answer: text, a tool call, usage.
    Sse,
    /// A stream that fails with an `overloaded_error` event after its first text.
    SseError,
    /// An Anthropic error answer.
    Error(u16, &'static str, &'static str),
}

#[derive(Debug, Clone)]
struct Seen {
    headers: HeaderMap,
    body: Value,
}

struct State_ {
    script: Script<Step>,
    seen: Mutex<Vec<Seen>>,
}

/// A Messages-API server on its own port; aborted when dropped.
struct Server {
    state: Arc<State_>,
    url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start(script: Vec<Step>, default: Step) -> Self {
        let state = Arc::new(State_ {
            script: Script::new(script, default),
            seen: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/v1/messages", post(handler))
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

    fn hits(&self) -> usize {
        self.state.seen.lock().unwrap().len()
    }

    fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn ratelimit(spent: bool) -> Vec<(&'static str, &'static str)> {
    vec![
        ("date", DATE),
        ("anthropic-ratelimit-requests-limit", "50"),
        (
            "anthropic-ratelimit-requests-remaining",
            if spent { "0" } else { "49" },
        ),
        ("anthropic-ratelimit-requests-reset", RESET_30S),
        ("anthropic-ratelimit-tokens-limit", "20000"),
        ("anthropic-ratelimit-tokens-remaining", "19000"),
        ("anthropic-ratelimit-tokens-reset", RESET_30S),
        ("request-id", "req_test"),
    ]
}

fn with_headers(mut r: Response, headers: &[(&'static str, &'static str)]) -> Response {
    for (k, v) in headers {
        r.headers_mut().insert(*k, v.parse().unwrap());
    }
    r
}

fn message(model: &Value) -> Value {
    json!({
        "id": "msg_test", "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": "Bonjour"}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": INPUT, "cache_read_input_tokens": CACHE_READ, "output_tokens": OUTPUT}
    })
}

fn event(name: &str, data: Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

fn stream_events(model: &Value, fail: bool) -> Vec<Bytes> {
    let mut ev = vec![
        event(
            "message_start",
            json!({"type": "message_start", "message": {
            "id": "msg_s", "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "usage": {"input_tokens": INPUT, "cache_read_input_tokens": CACHE_READ, "output_tokens": 1}}}),
        ),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        event("ping", json!({"type": "ping"})),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Bon"}}),
        ),
    ];
    if fail {
        ev.push(event(
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ));
        return ev;
    }
    ev.extend([
        event("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "jour"}})),
        event("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        event("content_block_start", json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}})),
        event("content_block_delta", json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"q\":"}})),
        event("content_block_delta", json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "\"x\"}"}})),
        event("content_block_stop", json!({"type": "content_block_stop", "index": 1})),
        event("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": OUTPUT}})),
        event("message_stop", json!({"type": "message_stop"})),
    ]);
    ev
}

async fn handler(State(state): State<Arc<State_>>, headers: HeaderMap, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let model = body["model"].clone();
    state.seen.lock().unwrap().push(Seen { headers, body });
    let step = state.script.next();
    match step {
        Step::Ok { spent } => with_headers(Json(message(&model)).into_response(), &ratelimit(spent)),
        Step::LowInput => with_headers(
            Json(message(&model)).into_response(),
            &[
                ("date", DATE),
                ("anthropic-ratelimit-input-tokens-limit", "40000"),
                ("anthropic-ratelimit-input-tokens-remaining", "10"),
                ("anthropic-ratelimit-input-tokens-reset", RESET_30S),
                ("anthropic-ratelimit-output-tokens-remaining", "8000"),
                ("anthropic-ratelimit-output-tokens-reset", "2015-10-21T07:28:01Z"),
            ],
        ),
        Step::Sse | Step::SseError => {
            let events = stream_events(&model, matches!(step, Step::SseError));
            let body = Body::from_stream(futures::stream::iter(events).then(|b| async move {
                tokio::time::sleep(Duration::from_millis(3)).await;
                Ok::<_, std::convert::Infallible>(b)
            }));
            let r = Response::builder()
                .header("content-type", "text/event-stream")
                .body(body)
                .unwrap();
            with_headers(r, &ratelimit(false))
        }
        Step::Error(status, ty, message) => {
            let body = json!({"type": "error", "error": {"type": ty, "message": message}});
            let mut r = (axum::http::StatusCode::from_u16(status).unwrap(), Json(body)).into_response();
            if status == 429 || status == 529 {
                r.headers_mut().insert("retry-after", "0".parse().unwrap());
            }
            r
        }
    }
}

/// An OpenAI-compatible backup answering every call.
async fn openai(State(s): State<Arc<support::Shared<()>>>, Json(body): Json<Value>) -> Json<Value> {
    s.hit();
    Json(json!({
        "id": "chatcmpl-b", "object": "chat.completion", "created": 1, "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "from openai"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    }))
}

const KEY_ENV: &str = "PRESSURE_TEST_ANTHROPIC_KEY";

fn provider(url: &str) -> ProviderClient {
    std::env::set_var(KEY_ENV, "sk-ant-test-key");
    ProviderClient::new(ProviderConfig {
        name: "claude".into(),
        settings: ProviderSettings {
            kind: ProviderKind::Anthropic,
            model_dir: None,
            base_url: url.into(),
            api_key_env: Some(KEY_ENV.into()),
            timeouts: TimeoutsConfig::default(),
        },
    })
    .unwrap()
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

fn chat(max_tokens: Option<u32>) -> ChatRequest {
    let mut r = ChatRequest::new(
        "claude-m",
        vec![
            Message::new("system", "Answer in French."),
            Message::new("user", "Hi"),
        ],
    );
    r.max_tokens = max_tokens;
    r.extra.insert("stop".into(), json!(["STOP"]));
    r
}

#[tokio::test]
async fn the_wire_has_the_messages_url_key_version_and_translated_body() {
    bounded(async {
        let s = Server::start(vec![], Step::Ok { spent: false }).await;
        let p = provider(&s.url);
        assert!(p.url().ends_with("/v1/messages"), "{}", p.url());
        assert_eq!(p.kind(), ProviderKind::Anthropic);
        let done = p.complete(&chat(Some(64)), far()).await.unwrap();
        let r = &done.response;
        assert_eq!(r.header.object, "chat.completion");
        assert_eq!(r.choices[0].message.text(), "Bonjour");
        assert_eq!(r.choices[0].finish_reason.as_deref(), Some("stop"));
        let u = done.usage.clone().unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.total_tokens),
            (INPUT + CACHE_READ, OUTPUT, INPUT + CACHE_READ + OUTPUT)
        );
        assert_eq!(done.ratelimit.remaining_requests, Some(49));
        assert_eq!(done.ratelimit.limit_tokens, Some(20_000));
        assert_eq!(done.ratelimit.reset_requests, Some(Duration::from_secs(30)));

        let seen = &s.seen()[0];
        let h = |k: &str| seen.headers.get(k).map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(h("x-api-key").as_deref(), Some("sk-ant-test-key"));
        assert_eq!(h("anthropic-version").as_deref(), Some("2023-06-01"));
        assert_eq!(h("authorization"), None, "Anthropic takes the key in x-api-key");
        assert_eq!(h("content-type").as_deref(), Some("application/json"));
        assert_eq!(
            seen.body,
            json!({"model": "claude-m", "max_tokens": 64, "system": "Answer in French.",
                   "messages": [{"role": "user", "content": "Hi"}], "stop_sequences": ["STOP"]})
        );
        // Without max_tokens the client sends the documented default.
        p.complete(&chat(None), far()).await.unwrap();
        assert_eq!(s.seen()[1].body["max_tokens"], 4096);
    })
    .await;
}

#[tokio::test]
async fn a_stream_reads_like_a_chat_completions_stream() {
    bounded(async {
        let s = Server::start(vec![], Step::Sse).await;
        let p = provider(&s.url);
        let mut stream = p.stream(&chat(Some(64)), far()).await.unwrap();
        let mut chunks = Vec::new();
        while let Some(c) = stream.next().await {
            chunks.push(c.unwrap());
        }
        assert_eq!(s.seen()[0].body["stream"], true);
        assert_eq!(chunks[0].choices[0].delta.role.as_deref(), Some("assistant"));
        assert!(chunks
            .iter()
            .all(|c| c.header.object == "chat.completion.chunk" && c.header.id == "msg_s"));
        assert_eq!(stream.output_text(), "Bonjour");
        assert!(stream.ttft().is_some() && stream.is_done() && stream.error().is_none());
        let u = stream.usage().unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens),
            (INPUT + CACHE_READ, OUTPUT)
        );
        let args: String = chunks
            .iter()
            .flat_map(|c| c.choices.iter())
            .filter_map(|c| c.delta.extra.get("tool_calls"))
            .filter_map(|t| t[0]["function"]["arguments"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(serde_json::from_str::<Value>(&args).unwrap(), json!({"q": "x"}));
        let finish: Vec<_> = chunks
            .iter()
            .flat_map(|c| c.choices.iter())
            .filter_map(|c| c.finish_reason.clone())
            .collect();
        assert_eq!(finish, ["tool_calls"]);
        assert_eq!(stream.ratelimit().remaining_requests, Some(49));
    })
    .await;
}

#[tokio::test]
async fn an_error_event_mid_stream_ends_it_as_overloaded() {
    bounded(async {
        let s = Server::start(vec![], Step::SseError).await;
        let mut stream = provider(&s.url).stream(&chat(Some(64)), far()).await.unwrap();
        let mut last = None;
        while let Some(item) = stream.next().await {
            last = Some(item);
        }
        let e = last.unwrap().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Overloaded { retry_after: None });
        assert_eq!(e.message, "Overloaded");
        assert_eq!(
            stream.output_text(),
            "Bon",
            "what was generated before the error is kept"
        );
    })
    .await;
}

#[tokio::test]
async fn error_answers_are_classified_like_openai_ones() {
    bounded(async {
        let zero = Some(Duration::ZERO);
        let cases = [
            (
                529,
                "overloaded_error",
                "Overloaded",
                ErrorKind::Overloaded { retry_after: zero },
            ),
            (
                429,
                "rate_limit_error",
                "Number of requests has exceeded your rate limit",
                ErrorKind::RateLimited { retry_after: zero },
            ),
            (
                500,
                "api_error",
                "Internal server error",
                ErrorKind::Server {
                    status: 500,
                    retry_after: None,
                },
            ),
            (
                400,
                "invalid_request_error",
                "Your credit balance is too low to access the Anthropic API.",
                ErrorKind::QuotaExhausted,
            ),
            (
                400,
                "invalid_request_error",
                "messages: roles must alternate",
                ErrorKind::BadRequest,
            ),
            (
                401,
                "authentication_error",
                "invalid x-api-key",
                ErrorKind::Unauthorized,
            ),
            (
                413,
                "request_too_large",
                "Request exceeds the maximum allowed number of bytes.",
                ErrorKind::BadRequest,
            ),
        ];
        for (status, ty, message, kind) in cases {
            let s = Server::start(vec![], Step::Error(status, ty, message)).await;
            let e = provider(&s.url)
                .complete(&chat(Some(8)), far())
                .await
                .unwrap_err();
            assert_eq!(
                (e.kind, e.status, e.message.as_str()),
                (kind, Some(status), message),
                "{status} {ty}"
            );
        }
    })
    .await;
}

/// A chain `a/claude-m` (Anthropic) → `o/gpt-m` (OpenAI); the Anthropic model has limits.
fn chain_config(a: &Server, o: &support::Mock<()>, retry: Value) -> LlmConfig {
    serde_json::from_value(json!({
        "providers": {
            "a": {"kind": "anthropic", "baseUrl": a.url},
            "o": {"baseUrl": o.url}
        },
        "models": [
            {"provider": "a", "model": "claude-m",
             "limits": {"requestsPerMinute": 100, "inputTokensPerMinute": 100000, "outputTokensPerMinute": 100000},
             "context": {"contextTokens": 8000, "maxOutputTokens": 1000, "defaultMaxTokens": 300},
             "price": {"inputMicroUsdPer1M": 1000000, "outputMicroUsdPer1M": 1000000}},
            {"provider": "o", "model": "gpt-m",
             "context": {"contextTokens": 8000, "maxOutputTokens": 1000}}
        ],
        "useCases": {
            "chat": {"chain": [{"model": "a/claude-m"}, {"model": "o/gpt-m"}], "retry": retry},
            "claude": {"chain": [{"model": "a/claude-m"}], "retry": retry}
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn the_config_kind_is_parsed_and_an_unknown_one_refused() {
    let ok: LlmConfig =
        serde_json::from_value(json!({"providers": {"a": {"kind": "anthropic", "baseUrl": "http://x/v1"}}}))
            .unwrap();
    assert_eq!(ok.providers["a"].kind, ProviderKind::Anthropic);
    let default: LlmConfig =
        serde_json::from_value(json!({"providers": {"a": {"baseUrl": "http://x/v1"}}})).unwrap();
    assert_eq!(default.providers["a"].kind, ProviderKind::OpenAi);
    assert!(serde_json::to_value(&default).unwrap()["providers"]["a"]
        .get("kind")
        .is_none());
    let e = serde_json::from_value::<LlmConfig>(
        json!({"providers": {"a": {"kind": "gemini", "baseUrl": "http://x/v1"}}}),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("unknown variant `gemini`") && e.contains("openai") && e.contains("anthropic"),
        "{e}"
    );
}

#[tokio::test]
async fn an_overloaded_anthropic_primary_is_retried_then_falls_back_to_openai() {
    bounded(async {
        let a = Server::start(vec![], Step::Error(529, "overloaded_error", "Overloaded")).await;
        let o = support::Mock::serve((), openai).await;
        let c = client(chain_config(&a, &o, fast_retry(2)));
        let answer = c.complete("chat", chat(None)).await.unwrap();
        assert_eq!(answer.degradation, Degradation::Backup(1));
        assert_eq!(
            answer.response().unwrap().choices[0].message.text(),
            "from openai"
        );
        assert_eq!(
            (a.hits(), o.hits()),
            (2, 1),
            "529 is transient: retried once, then the backup"
        );
        assert_eq!(c.snapshot().attempt_errors.get("overloaded"), Some(&2));
        // A spend cap is never retried: one call, then the backup.
        let a = Server::start(
            vec![],
            Step::Error(400, "invalid_request_error", "Your credit balance is too low"),
        )
        .await;
        let c = client(chain_config(&a, &o, fast_retry(3)));
        let answer = c.complete("chat", chat(None)).await.unwrap();
        assert_eq!(answer.degradation, Degradation::Backup(1));
        assert_eq!(a.hits(), 1);
    })
    .await;
}

#[tokio::test]
async fn anthropic_ratelimit_headers_hold_the_model_until_the_reset() {
    bounded(async {
        // The first answer says no requests are left until a reset 30 s away.
        let a = Server::start(vec![Step::Ok { spent: true }], Step::Ok { spent: false }).await;
        let o = support::Mock::serve((), openai).await;
        let c = client(chain_config(&a, &o, fast_retry(1)));
        let first = c.complete("chat", chat(None)).await.unwrap();
        assert_eq!(first.degradation, Degradation::Primary);
        // Held beyond the 15 s deadline: the next event goes to the backup
        // without asking Anthropic (no 429 provoked).
        let second = c.complete("chat", chat(None)).await.unwrap();
        assert_eq!(second.degradation, Degradation::Backup(1));
        assert_eq!((a.hits(), o.hits()), (1, 1));
        assert!(c.snapshot().limiter_rejections >= 1);

        // Too few input tokens left (below this call's prompt estimate):
        // held until the later of the input and output token resets.
        let a = Server::start(vec![Step::LowInput], Step::Ok { spent: false }).await;
        let c = client(chain_config(&a, &o, fast_retry(1)));
        let first = c.complete("chat", chat(None)).await.unwrap();
        assert_eq!(first.degradation, Degradation::Primary);
        let second = c.complete("chat", chat(None)).await.unwrap();
        assert_eq!(second.degradation, Degradation::Backup(1));
        assert_eq!((a.hits(), o.hits()), (1, 2));
    })
    .await;
}

#[tokio::test]
async fn reconcile_corrects_the_estimate_to_anthropic_usage() {
    bounded(async {
        let a = Server::start(vec![Step::Ok { spent: false }], Step::Sse).await;
        let o = support::Mock::serve((), openai).await;
        let c = client(chain_config(&a, &o, fast_retry(1)));
        let req = chat(None);
        let msgs: Vec<(String, String)> = req.messages.iter().map(|m| (m.role.clone(), m.text())).collect();
        let estimate = TokenCounter::new().count_chat("claude-m", &msgs).unwrap();
        assert_ne!(
            estimate,
            INPUT + CACHE_READ,
            "the test needs an estimate unlike the reported usage"
        );

        let answer = c.complete("claude", req.clone()).await.unwrap();
        assert_eq!(answer.degradation, Degradation::Primary);
        // No max_tokens in the request: the pipeline sends the output it reserved (defaultMaxTokens).
        assert_eq!(a.seen()[0].body["max_tokens"], 300);
        let stats = c.broker().resource_stats("llm:a:claude-m").await.unwrap();
        assert_eq!(stats.usage["inputTokensPerMinute"], INPUT + CACHE_READ);
        assert_eq!(stats.usage["outputTokensPerMinute"], OUTPUT);
        assert_eq!(answer.spent.micro_usd(), INPUT + CACHE_READ + OUTPUT);

        // The same through a stream: reconciled to the usage of message_start / message_delta.
        let mut s = c.stream("claude", req).await.unwrap();
        let mut text = String::new();
        while let Some(chunk) = s.next().await {
            for choice in chunk.unwrap().choices {
                text.push_str(choice.delta.content.as_deref().unwrap_or(""));
            }
        }
        assert_eq!(text, "Bonjour");
        assert_eq!(a.seen()[1].body["max_tokens"], 300);
        let stats = c.broker().resource_stats("llm:a:claude-m").await.unwrap();
        assert_eq!(stats.usage["inputTokensPerMinute"], 2 * (INPUT + CACHE_READ));
        assert_eq!(stats.usage["outputTokensPerMinute"], 2 * OUTPUT);
        assert_eq!(o.hits(), 0);
    })
    .await;
}

/// Fixture texts of the kinds a support stack sends: prose, code, tool JSON.
const FIXTURE_TEXTS: [(&str, &str); 3] = [
    ("prose", include_str!("../fixtures/anthropic/prose.txt")),
    ("code", include_str!("../fixtures/anthropic/code.py")),
    ("tool json", include_str!("../fixtures/anthropic/tool-call.json")),
];

#[test]
fn claude_prompts_are_estimated_with_cl100k_which_agrees_with_o200k_here() {
    use pressure_llm::tokens::Encoding;
    let counter = TokenCounter::new();
    let enc = counter.encoding_for("claude-sonnet-4-5");
    assert_eq!(enc.encoding, Encoding::Cl100kBase);
    assert!(
        !enc.exact,
        "Claude's tokenizer is not public: the count is an approximation"
    );
    for (name, text) in FIXTURE_TEXTS {
        let cl100k = counter.count_with(Encoding::Cl100kBase, text).unwrap();
        let o200k = counter.count_with(Encoding::O200kBase, text).unwrap();
        eprintln!("{name}: {} bytes, cl100k {cl100k}, o200k {o200k}", text.len());
        // Published Claude-vs-OpenAI comparisons measure against o200k
        // (GPT-4o); where cl100k agrees with it, their ratios bound our
        // estimate's error (provider::anthropic docs).
        let diff = cl100k.abs_diff(o200k) as f64 / o200k as f64;
        assert!(diff <= 0.03, "{name}: cl100k {cl100k} vs o200k {o200k}");
    }
}

/// Issue 21: a request Anthropic cannot take as sent is never changed
/// silently. `temperature` above Anthropic's 1.0 and a `json_object`
/// response format (no JSON mode) are refused with a 400 naming the field,
/// before any call; a `json_schema` one is translated into a forced tool.
#[tokio::test]
async fn a_field_anthropic_cannot_take_is_refused_naming_it() {
    bounded(async {
        let a = Server::start(vec![], Step::Ok { spent: false }).await;
        let o = support::Mock::serve((), openai).await;
        let c = client(chain_config(&a, &o, fast_retry(1)));
        let mut hot = chat(None);
        hot.extra.insert("temperature".into(), json!(1.5));
        let e = c.complete("claude", hot).await.unwrap_err();
        let d = e.describe();
        assert_eq!(
            (d.status, d.error_type, d.param),
            (400, "invalid_request_error", Some("temperature")),
            "{e}"
        );
        assert!(e.to_string().contains("temperature"), "{e}");
        let mut text = chat(None);
        text.extra
            .insert("response_format".into(), json!({"type": "json_object"}));
        let e = c.complete("claude", text).await.unwrap_err();
        assert_eq!(e.describe().param, Some("response_format"), "{e}");
        assert_eq!((a.hits(), o.hits()), (0, 0), "nothing was sent");
        // In range, the value goes as it came.
        let mut warm = chat(None);
        warm.extra.insert("temperature".into(), json!(0.7));
        c.complete("claude", warm).await.unwrap();
        assert_eq!(a.seen()[0].body["temperature"], 0.7);
        // A JSON schema is translated, not dropped: a tool with that schema,
        // forced by `tool_choice`.
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}});
        let mut structured = chat(None);
        structured.extra.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {"name": "place", "schema": schema}}),
        );
        c.complete("claude", structured).await.unwrap();
        let sent = &a.seen()[1].body;
        assert_eq!(sent["tools"][0]["input_schema"], schema, "{sent}");
        assert_eq!(sent["tool_choice"]["type"], "tool", "{sent}");
        assert_eq!(sent["tool_choice"]["name"], sent["tools"][0]["name"], "{sent}");
    })
    .await;
}
