//! End to end through the gateway against the mock's two wire formats: a
//! use case whose chain is an OpenAI model (the mock's
//! `/v1/chat/completions`) then an Anthropic model (the mock's
//! `/v1/messages`), and an Anthropic-only use case. Everything runs in this
//! process on 127.0.0.1: the mock, and a gateway built from its JSON config.

#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use pressure_gateway::{Gateway, Serving};
use pressure_mock::{Behaviour, Latency, MockConfig, MockProvider, Outcome, Phase};
use serde_json::{json, Value};
use tokio::net::TcpListener;

const OPENAI_MODEL: &str = "gpt-primary";
const CLAUDE_MODEL: &str = "claude-backup";
const CHAT: &str = "/v1/chat/completions";
const MESSAGES: &str = "/v1/messages";
const KEY_ENV: &str = "PRESSURE_E2E_ANTHROPIC_KEY";

async fn bounded<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .expect("test took longer than 60 s")
}

/// The mock and a gateway in front of it.
struct Stand {
    mock: MockProvider,
    addr: SocketAddr,
    serving: Serving,
    http: reqwest::Client,
}

fn fast(name: &str) -> Phase {
    Phase {
        latency: Latency::uniform(5, 15),
        ..Phase::normal(name)
    }
}

/// The gateway section: providers `openai` (default kind) and `anthropic`,
/// both on the one mock; use cases `chat` (OpenAI → Anthropic), `claude`
/// (Anthropic only) and `claude-first` (Anthropic → OpenAI).
fn gateway_config(base_url: &str) -> Value {
    let timeouts = json!({"connectMs": 500, "firstByteMs": 2_000, "readMs": 2_000, "poolWaitMs": 500});
    let retry = json!({"maxAttempts": 2, "baseDelayMs": 5, "maxDelayMs": 20});
    json!({
        "listen": "127.0.0.1:0",
        "upstreams": { "mock": { "url": base_url.trim_end_matches("/v1"), "pathPrefix": "/" } },
        "backend": { "type": "memory" },
        "admin": { "listen": "127.0.0.1:0" },
        "llm": {
            "providers": {
                "openai": { "baseUrl": base_url, "timeouts": timeouts },
                "anthropic": { "kind": "anthropic", "baseUrl": base_url, "apiKeyEnv": KEY_ENV, "timeouts": timeouts }
            },
            "models": [
                { "provider": "openai", "model": OPENAI_MODEL,
                  "limits": { "requestsPerMinute": 10_000 },
                  "context": { "contextTokens": 8_192, "maxOutputTokens": 256 },
                  "price": { "inputMicroUsdPer1M": 2_500_000, "outputMicroUsdPer1M": 10_000_000 } },
                { "provider": "anthropic", "model": CLAUDE_MODEL,
                  "limits": { "requestsPerMinute": 10_000, "inputTokensPerMinute": 1_000_000, "outputTokensPerMinute": 100_000 },
                  "context": { "contextTokens": 200_000, "maxOutputTokens": 1_024, "defaultMaxTokens": 32 },
                  "price": { "inputMicroUsdPer1M": 3_000_000, "outputMicroUsdPer1M": 15_000_000 } }
            ],
            "useCases": {
                "chat": { "chain": [ { "model": format!("openai/{OPENAI_MODEL}") },
                                     { "model": format!("anthropic/{CLAUDE_MODEL}") } ],
                          "totalMs": 10_000, "retry": retry },
                "claude": { "chain": [ { "model": format!("anthropic/{CLAUDE_MODEL}") } ],
                            "totalMs": 10_000, "retry": retry },
                "claude-first": { "chain": [ { "model": format!("anthropic/{CLAUDE_MODEL}") },
                                             { "model": format!("openai/{OPENAI_MODEL}") } ],
                                  "totalMs": 10_000, "retry": retry }
            }
        }
    })
}

impl Stand {
    async fn start(behaviour: Behaviour) -> Self {
        std::env::set_var(KEY_ENV, "sk-ant-e2e");
        let config = MockConfig {
            behaviour,
            seed: Some(11),
            ..MockConfig::default()
        };
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let mock = MockProvider::start(loopback, config).await.unwrap();
        let text = json!({ "gateway": gateway_config(&mock.base_url()) }).to_string();
        let config = pressure_gateway::config::parse_in(&text, Path::new(".")).unwrap();
        let gateway = Gateway::build(config, Path::new(".")).await.unwrap();
        let listener = TcpListener::bind(loopback).await.unwrap();
        let admin = TcpListener::bind(loopback).await.unwrap();
        let addr = listener.local_addr().unwrap();
        Self {
            mock,
            addr,
            serving: gateway.spawn(listener, admin),
            http: reqwest::Client::new(),
        }
    }

    /// A 500 storm on the OpenAI model only; the Anthropic model is healthy.
    async fn openai_storm() -> Self {
        let storm = Phase {
            error_share: 1.0,
            ..fast("openai-storm")
        }
        .on_models(&[OPENAI_MODEL]);
        Self::start(Behaviour::single(storm)).await
    }

    fn request(use_case: &str, stream: bool) -> Value {
        let mut body = json!({
            "model": use_case,
            "messages": [
                {"role": "system", "content": "You answer support questions."},
                {"role": "user", "content": "Where is my parcel?"}
            ]
        });
        if stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        body
    }

    async fn post(&self, body: &Value) -> reqwest::Response {
        self.http
            .post(format!("http://{}{CHAT}", self.addr))
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// A non-streamed answer: (degradation header, body).
    async fn complete(&self, use_case: &str) -> (String, Value) {
        let r = self.post(&Self::request(use_case, false)).await;
        assert_eq!(r.status(), 200);
        let degradation = header(&r, "x-pressure-degradation");
        (degradation, r.json().await.unwrap())
    }

    /// A streamed answer: (degradation header, content type, the data events).
    async fn stream(&self, use_case: &str) -> (String, String, Vec<String>) {
        let r = self.post(&Self::request(use_case, true)).await;
        assert_eq!(r.status(), 200);
        let degradation = header(&r, "x-pressure-degradation");
        let ct = header(&r, "content-type");
        let text = r.text().await.unwrap();
        let data = text
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .map(str::to_owned)
            .collect();
        (degradation, ct, data)
    }

    fn calls(&self, endpoint: &str) -> u64 {
        self.mock.stats().by_endpoint.get(endpoint).copied().unwrap_or(0)
    }

    async fn stop(self) {
        self.serving.stop(Duration::from_secs(5)).await;
        self.mock.shutdown().await;
    }
}

fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// The mock's filler answer for `model` starts like this.
fn answer_of(model: &str) -> String {
    format!("This is {model}, the pressure mock provider, answering.")
}

/// Content, chunks with a finish reason, the usage chunk and whether `[DONE]` ended it.
fn read_stream(data: &[String]) -> (String, Vec<String>, Option<Value>, bool) {
    let done = data.last().map(String::as_str) == Some("[DONE]");
    let mut text = String::new();
    let mut finish = Vec::new();
    let mut usage = None;
    for d in data.iter().filter(|d| d.as_str() != "[DONE]") {
        let v: Value = serde_json::from_str(d).unwrap();
        assert!(v.get("error").is_none(), "error event: {v}");
        assert_eq!(v["object"], "chat.completion.chunk", "{v}");
        for c in v["choices"].as_array().unwrap() {
            text.push_str(c["delta"]["content"].as_str().unwrap_or(""));
            if let Some(f) = c["finish_reason"].as_str() {
                finish.push(f.to_owned());
            }
        }
        if v.get("usage").is_some_and(|u| !u.is_null()) {
            usage = Some(v["usage"].clone());
        }
    }
    (text, finish, usage, done)
}

/// The arrivals of `endpoint` since the last reset.
fn arrivals_of(mock: &MockProvider, endpoint: &str) -> Vec<pressure_mock::Arrival> {
    mock.arrivals()
        .into_iter()
        .filter(|a| a.endpoint == endpoint)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_backup_answers_when_the_openai_primary_storms() {
    bounded(async {
        let s = Stand::openai_storm().await;
        let (degradation, body) = s.complete("chat").await;
        assert_eq!(degradation, "backup");
        assert_eq!(body["pressure"]["degradation"], "backup");
        assert_eq!(
            body["pressure"]["attempts"], 3,
            "two primary attempts, then the backup"
        );
        assert_eq!(body["object"], "chat.completion");
        let text = body["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(text.starts_with(&answer_of(CLAUDE_MODEL)), "{text}");
        assert_eq!(
            body["choices"][0]["finish_reason"], "length",
            "32 tokens (defaultMaxTokens, sent as max_tokens) cut the answer"
        );

        // Each endpoint was called as the chain says.
        assert_eq!((s.calls(CHAT), s.calls(MESSAGES)), (2, 1));
        let stats = s.mock.stats();
        assert_eq!(stats.by_model[OPENAI_MODEL].requests, 2);
        assert_eq!(stats.by_model[CLAUDE_MODEL].requests, 1);
        let chat = arrivals_of(&s.mock, CHAT);
        assert!(chat
            .iter()
            .all(|a| a.outcome == Outcome::ServerError && a.status == 500 && a.model == OPENAI_MODEL));
        let msgs = arrivals_of(&s.mock, MESSAGES);
        let claude = &msgs[0];
        assert_eq!(
            (claude.outcome, claude.status, claude.model.as_str()),
            (Outcome::Ok, 200, CLAUDE_MODEL)
        );
        assert_eq!(claude.attempt, Some(3));
        assert_eq!(
            claude.request_id, chat[0].request_id,
            "one event id across both providers"
        );
        // The usage the gateway reports is what the mock billed on /v1/messages.
        assert_eq!(body["usage"]["prompt_tokens"], claude.input_tokens);
        assert_eq!(body["usage"]["completion_tokens"], claude.output_tokens);
        assert_eq!(claude.output_tokens, 32);
        assert_eq!(
            body["usage"]["total_tokens"],
            claude.input_tokens + claude.output_tokens
        );
        s.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_comes_from_the_anthropic_backup() {
    bounded(async {
        let s = Stand::openai_storm().await;
        let (degradation, ct, data) = s.stream("chat").await;
        assert_eq!(degradation, "backup");
        assert!(ct.starts_with("text/event-stream"), "{ct}");
        let (text, finish, usage, done) = read_stream(&data);
        assert!(done, "the stream ends with [DONE]");
        assert!(text.starts_with(&answer_of(CLAUDE_MODEL)), "{text}");
        assert_eq!(finish, ["length"]);
        assert_eq!((s.calls(CHAT), s.calls(MESSAGES)), (2, 1));
        let claude = &arrivals_of(&s.mock, MESSAGES)[0];
        assert!(claude.stream);
        assert_eq!((claude.outcome, claude.status), (Outcome::Ok, 200));
        let usage = usage.expect("the usage chunk");
        assert_eq!(usage["prompt_tokens"], claude.input_tokens);
        assert_eq!(usage["completion_tokens"], claude.output_tokens);
        assert_eq!(usage["completion_tokens"], 32);
        // What the gateway streamed is exactly what the mock generated.
        let counted = pressure_llm::tokens::TokenCounter::new()
            .count_text(CLAUDE_MODEL, &text)
            .unwrap();
        assert_eq!(counted, claude.output_tokens);
        s.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_only_use_case_is_served_as_primary_streamed_and_not() {
    bounded(async {
        let s = Stand::start(Behaviour::single(fast("normal"))).await;
        let (degradation, body) = s.complete("claude").await;
        assert_eq!(degradation, "primary");
        assert_eq!(body["pressure"]["attempts"], 1);
        let text = body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(text.starts_with(&answer_of(CLAUDE_MODEL)), "{text}");
        assert_eq!(body["model"], CLAUDE_MODEL);
        let first = arrivals_of(&s.mock, MESSAGES)[0].clone();
        assert_eq!(body["usage"]["prompt_tokens"], first.input_tokens);
        assert_eq!(body["usage"]["completion_tokens"], first.output_tokens);

        let (degradation, _, data) = s.stream("claude").await;
        assert_eq!(degradation, "primary");
        let (streamed, finish, usage, done) = read_stream(&data);
        assert!(done);
        assert_eq!(streamed, text, "the same answer, streamed");
        assert_eq!(finish, ["length"]);
        let second = arrivals_of(&s.mock, MESSAGES)[1].clone();
        assert!(second.stream && !first.stream);
        assert_eq!(usage.unwrap()["completion_tokens"], second.output_tokens);

        assert_eq!(
            (s.calls(CHAT), s.calls(MESSAGES)),
            (0, 2),
            "the OpenAI endpoint is never called"
        );
        s.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overloaded_anthropic_primary_falls_back_to_openai() {
    bounded(async {
        let overloaded = Phase {
            overload_share: 1.0,
            ..fast("overloaded")
        }
        .on_models(&[CLAUDE_MODEL]);
        let s = Stand::start(Behaviour::single(overloaded)).await;
        let (degradation, body) = s.complete("claude-first").await;
        assert_eq!(degradation, "backup");
        let text = body["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(text.starts_with(&answer_of(OPENAI_MODEL)), "{text}");
        // 529 overloaded_error is transient: retried once, then the backup.
        let msgs = arrivals_of(&s.mock, MESSAGES);
        assert_eq!(msgs.len(), 2);
        assert!(msgs
            .iter()
            .all(|a| a.status == 529 && a.outcome == Outcome::ServerError));
        assert_eq!(s.calls(CHAT), 1);
        // Streamed, the fallback happens before the first chunk.
        let (degradation, _, data) = s.stream("claude-first").await;
        assert_eq!(degradation, "backup");
        let (text, _, _, done) = read_stream(&data);
        assert!(done && text.starts_with(&answer_of(OPENAI_MODEL)), "{text}");
        assert_eq!((s.calls(CHAT), s.calls(MESSAGES)), (2, 4));
        s.stop().await;
    })
    .await;
}

// ------------------------------------------------------------------------
// The mock's Anthropic mode on its own: the provider client (kind
// `anthropic`) and raw HTTP against `/v1/messages`.

use pressure_llm::provider::{
    ChatRequest, Message, ProviderClient, ProviderConfig, ProviderKind, ProviderSettings, RateLimitHints,
    TimeoutsConfig,
};
use pressure_llm::taxonomy::{self, ErrorKind, TimeoutPhase};
use pressure_mock::RateLimit;

async fn mock(phase: Phase) -> MockProvider {
    let config = MockConfig {
        behaviour: Behaviour::single(phase),
        seed: Some(5),
        ..MockConfig::default()
    };
    MockProvider::start(SocketAddr::from(([127, 0, 0, 1], 0)), config)
        .await
        .unwrap()
}

fn anthropic_client(mock: &MockProvider, timeout_ms: u64) -> ProviderClient {
    ProviderClient::new(ProviderConfig {
        name: "anthropic".into(),
        settings: ProviderSettings {
            kind: ProviderKind::Anthropic,
            model_dir: None,
            base_url: mock.base_url(),
            api_key_env: None,
            timeouts: TimeoutsConfig {
                first_byte_ms: timeout_ms,
                read_ms: timeout_ms,
                ..TimeoutsConfig::default()
            },
        },
    })
    .unwrap()
}

fn claude_request(max_tokens: u32) -> ChatRequest {
    let mut r = ChatRequest::new(
        CLAUDE_MODEL,
        vec![
            Message::new("system", "Be brief."),
            Message::new("user", "Hello there"),
        ],
    );
    r.max_tokens = Some(max_tokens);
    r
}

fn raw_body(max_tokens: u32) -> Value {
    json!({"model": CLAUDE_MODEL, "max_tokens": max_tokens, "system": "Be brief.",
           "messages": [{"role": "user", "content": "Hello there"}]})
}

fn pairs(r: &reqwest::Response) -> Vec<(String, String)> {
    r.headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect()
}

fn far() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(10)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mock_answers_and_bills_in_anthropic_format() {
    bounded(async {
        let m = mock(fast("normal")).await;
        let c = anthropic_client(&m, 2_000);
        let done = c.complete(&claude_request(10), far()).await.unwrap();
        let a = &m.arrivals()[0];
        assert_eq!(
            (a.endpoint.as_str(), a.outcome, a.status),
            (MESSAGES, Outcome::Ok, 200)
        );
        let u = done.usage.unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens),
            (a.input_tokens, a.output_tokens)
        );
        assert_eq!(a.output_tokens, 10);
        assert_eq!(done.response.choices[0].finish_reason.as_deref(), Some("length"));
        let text = done.response.choices[0].message.text();
        assert!(
            !text.is_empty() && answer_of(CLAUDE_MODEL).starts_with(&text),
            "{text}"
        );

        // The raw body is Anthropic's `message`.
        let r = reqwest::Client::new()
            .post(format!("{}/messages", m.base_url()))
            .json(&raw_body(100))
            .send()
            .await
            .unwrap();
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            (v["type"].as_str(), v["role"].as_str()),
            (Some("message"), Some("assistant"))
        );
        assert_eq!(v["content"][0]["type"], "text");
        assert_eq!(
            v["stop_reason"], "end_turn",
            "48 output tokens, within max_tokens"
        );
        assert_eq!(v["usage"]["output_tokens"], 48);

        // Streamed through the client: the usage the events carry is the bill.
        let mut s = c.stream(&claude_request(200), far()).await.unwrap();
        use futures::StreamExt;
        while let Some(chunk) = s.next().await {
            chunk.unwrap();
        }
        let a = &m.arrivals()[2];
        assert!(a.stream);
        let u = s.usage().unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens),
            (a.input_tokens, a.output_tokens)
        );
        assert!(s.output_text().starts_with(&answer_of(CLAUDE_MODEL)));
        assert_eq!(m.stats().by_endpoint.get(MESSAGES), Some(&3));
        assert_eq!(m.stats().by_endpoint.get(CHAT), None);

        // Anthropic's own validation: max_tokens is required.
        let r = reqwest::Client::new()
            .post(format!("{}/messages", m.base_url()))
            .json(&json!({"model": CLAUDE_MODEL, "messages": [{"role": "user", "content": "x"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["message"], "max_tokens: Field required");
        m.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mock_quota_answers_429_with_anthropic_headers() {
    bounded(async {
        let m = mock(Phase {
            rate_limit: Some(RateLimit {
                requests: 2,
                tokens: 0,
                window_ms: 1_500,
            }),
            ..fast("rate-limited")
        })
        .await;
        let http = reqwest::Client::new();
        let url = format!("{}/messages", m.base_url());
        for left in [1u64, 0] {
            let r = http.post(&url).json(&raw_body(20)).send().await.unwrap();
            assert_eq!(r.status(), 200);
            let hints = RateLimitHints::from_pairs(&pairs(&r));
            assert_eq!(hints.limit_requests, Some(2));
            assert_eq!(hints.remaining_requests, Some(left));
            let reset = hints
                .reset_requests
                .expect("a reset the client can read against `date`");
            assert!(
                reset > Duration::ZERO && reset <= Duration::from_millis(1_500),
                "{reset:?}"
            );
        }
        let r = http.post(&url).json(&raw_body(20)).send().await.unwrap();
        assert_eq!(r.status(), 429);
        let h = pairs(&r);
        let retry: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((1..=2).contains(&retry), "{retry}");
        assert!(
            r.headers().get("retry-after-ms").is_none(),
            "Anthropic sends whole seconds"
        );
        assert_eq!(RateLimitHints::from_pairs(&h).remaining_requests, Some(0));
        let body = r.text().await.unwrap();
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["type"], "rate_limit_error");
        assert_eq!(
            taxonomy::classify(429, &h, &body),
            ErrorKind::RateLimited {
                retry_after: Some(Duration::from_secs(retry))
            }
        );
        let a = m.arrivals();
        assert_eq!(a[2].outcome, Outcome::RateLimited);
        assert_eq!(a[2].input_tokens, 0, "a 429 is not billed");
        m.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storms_overloads_hangs_and_stalls_in_anthropic_format() {
    bounded(async {
        let m = mock(Phase {
            error_share: 1.0,
            ..fast("storm")
        })
        .await;
        let c = anthropic_client(&m, 300);
        let e = c.complete(&claude_request(10), far()).await.unwrap_err();
        assert_eq!(
            e.kind,
            ErrorKind::Server {
                status: 500,
                retry_after: None
            }
        );
        assert_eq!(e.message, "Internal server error");

        m.set_behaviour(Behaviour::preset("overloaded").unwrap()).unwrap();
        let e = c.complete(&claude_request(10), far()).await.unwrap_err();
        assert_eq!(
            (e.kind, e.status),
            (ErrorKind::Overloaded { retry_after: None }, Some(529))
        );
        let e = c.stream(&claude_request(10), far()).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Overloaded { retry_after: None });

        m.set_behaviour(Behaviour::single(Phase {
            hang_share: 1.0,
            ..fast("hang")
        }))
        .unwrap();
        let e = c.complete(&claude_request(10), far()).await.unwrap_err();
        assert_eq!(
            e.kind,
            ErrorKind::Timeout {
                phase: TimeoutPhase::FirstByte
            }
        );

        m.set_behaviour(Behaviour::single(Phase {
            stall_share: 1.0,
            ..fast("stall")
        }))
        .unwrap();
        let mut s = c.stream(&claude_request(40), far()).await.unwrap();
        use futures::StreamExt;
        let mut last = None;
        while let Some(item) = s.next().await {
            last = Some(item);
        }
        assert_eq!(
            last.unwrap().unwrap_err().kind,
            ErrorKind::Timeout {
                phase: TimeoutPhase::Read
            }
        );
        assert!(
            !s.output_text().is_empty(),
            "the first delta arrived before the stall"
        );

        let by_status: Vec<u16> = m.arrivals().iter().map(|a| a.status).collect();
        assert_eq!(by_status, [500, 529, 529, 0, 200]);
        let a = m.arrivals();
        assert_eq!(a[3].outcome, Outcome::Hung);
        assert!(a[3].input_tokens > 0, "a hang bills its input");
        assert_eq!(a[4].outcome, Outcome::Stalled);
        assert!(a.iter().all(|a| a.endpoint == MESSAGES));
        m.shutdown().await;
    })
    .await;
}
