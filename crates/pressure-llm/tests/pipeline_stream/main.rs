//! `LlmClient::stream` against scripted mock OpenAI-compatible SSE servers on
//! 127.0.0.1: fallback only before the first output chunk, an error item
//! (never another model's text) after it, permits released on drop.

#![allow(clippy::unwrap_used)]

use super::support;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use futures::StreamExt;
use pressure_llm::pipeline::{AnswerStream, Degradation, LlmConfig, LlmError};
use pressure_llm::provider::{ChatChunk, StreamOptions};
use pressure_llm::taxonomy::{ErrorKind, TimeoutPhase};
use pressure_llm::tokens::TokenCounter;
use serde_json::{json, Value};
use support::{
    bounded, client, fast_retry, model, request, Script, Shared, COMPLETION_TOKENS, PROMPT_TOKENS,
};
use tokio::time::Instant;

/// What the mock does for one request.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// A role chunk, `n` content chunks, a finish chunk, usage, `[DONE]`.
    Stream(usize),
    /// A plain error status before any byte of the stream.
    Status(u16),
    /// 429 with `retry-after-ms`.
    RateLimited { retry_after_ms: u64 },
    /// The role chunk and one content chunk, then silence.
    HangAfterFirst,
    /// [`Step::Stream`] with 20 ms between events: a provider still
    /// generating when its caller goes away.
    SlowStream(usize),
}

struct MockState {
    script: Script<Step>,
}

type Mock = support::Mock<MockState>;

impl Mock {
    /// A server answering `script` in order, then `default` forever.
    async fn start(script: Vec<Step>, default: Step) -> Self {
        Self::serve(
            MockState {
                script: Script::new(script, default),
            },
            handler,
        )
        .await
    }
}

fn event(v: Value) -> Result<Bytes, Infallible> {
    Ok(Bytes::from(format!("data: {v}\n\n")))
}

fn chunk(model: &Value, delta: Value, finish: Option<&str>) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model,
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

/// The content of the `i`-th chunk.
fn word(i: usize) -> String {
    format!("w{i} ")
}

fn sse(body: Body) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .body(body)
        .unwrap()
}

async fn handler(State(state): State<Arc<Shared<MockState>>>, Json(body): Json<Value>) -> Response {
    state.hit();
    assert_eq!(body["stream"], json!(true));
    let step = state.script.next();
    let model = body["model"].clone();
    match step {
        Step::Stream(n) | Step::SlowStream(n) => {
            let slow = matches!(step, Step::SlowStream(_));
            let mut events = vec![event(chunk(&model, json!({"role": "assistant"}), None))];
            for i in 0..n {
                events.push(event(chunk(&model, json!({"content": word(i)}), None)));
            }
            events.push(event(chunk(&model, json!({}), Some("stop"))));
            events.push(event(
                json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                "model": model, "choices": [],
                "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                          "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS}}),
            ));
            events.push(Ok(Bytes::from_static(b"data: [DONE]\n\n")));
            if slow {
                let paced = futures::stream::iter(events).then(|e| async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    e
                });
                return sse(Body::from_stream(paced));
            }
            sse(Body::from_stream(futures::stream::iter(events)))
        }
        Step::HangAfterFirst => {
            let events = vec![
                event(chunk(&model, json!({"role": "assistant"}), None)),
                event(chunk(&model, json!({"content": word(0)}), None)),
            ];
            let s = futures::stream::iter(events).chain(futures::stream::pending());
            sse(Body::from_stream(s))
        }
        Step::Status(code) => (
            StatusCode::from_u16(code).unwrap(),
            Json(json!({"error": {"message": format!("mock {code}"), "type": "server_error"}})),
        )
            .into_response(),
        Step::RateLimited { retry_after_ms } => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after-ms", retry_after_ms.to_string())],
            Json(json!({"error": {"message": "slow down", "type": "rate_limit_error"}})),
        )
            .into_response(),
    }
}

/// Providers `p` (primary, `readMs` = `p_read_ms`) and `b` (backup).
fn config(p: &Mock, b: &Mock, use_cases: Value, p_limits: Value, p_read_ms: u64) -> LlmConfig {
    let v = json!({
        "providers": {
            "p": {"baseUrl": p.url, "timeouts": {"readMs": p_read_ms}},
            "b": {"baseUrl": b.url}
        },
        "models": [model("p", p_limits), model("b", json!({}))],
        "rules": {"keyword": [{"keywords": ["Refund"], "answer": "See /refunds", "label": "refund"}]},
        "useCases": use_cases,
    });
    serde_json::from_value(v).unwrap()
}

fn chain_pb(retry: Value) -> Value {
    json!({"chat": {"chain": [{"model": "p/m"}, {"model": "b/m"}], "retry": retry}})
}

/// Every item of the stream, in order.
async fn drain(s: &mut AnswerStream) -> Vec<Result<ChatChunk, LlmError>> {
    let mut items = Vec::new();
    while let Some(item) = s.next().await {
        items.push(item);
    }
    items
}

fn text(items: &[Result<ChatChunk, LlmError>]) -> String {
    items
        .iter()
        .filter_map(|i| i.as_ref().ok())
        .flat_map(|c| c.choices.iter().filter_map(|ch| ch.delta.content.clone()))
        .collect()
}

#[tokio::test]
async fn happy_stream_yields_every_chunk_and_reconciles_usage() {
    bounded(async {
        let p = Mock::start(vec![], Step::Stream(5)).await;
        let b = Mock::start(vec![], Step::Stream(1)).await;
        let limits = json!({"requestsPerMinute": 100, "inputTokensPerMinute": 100000,
                            "outputTokensPerMinute": 100000, "maxConcurrentRequests": 2});
        let c = client(config(&p, &b, chain_pb(fast_retry(3)), limits, 30_000));
        let mut asked = request("hello");
        asked.stream_options = Some(StreamOptions {
            include_usage: Some(true),
            ..StreamOptions::default()
        });
        let mut s = c.stream("chat", asked).await.unwrap();
        assert_eq!(s.degradation(), Degradation::Primary);
        assert_eq!((s.level(), s.model(), s.attempts()), (0, Some("p/m"), 1));
        assert_eq!(s.http_status(), 200);
        // The limiter slot is held while streaming.
        let stats = c.broker().resource_stats("llm:p:m").await.unwrap();
        assert_eq!(stats.active, Some(1));
        let items = drain(&mut s).await;
        assert!(items.iter().all(Result::is_ok), "{items:?}");
        // role, 5 content, finish, usage.
        assert_eq!(items.len(), 8);
        assert_eq!(text(&items), (0..5).map(word).collect::<String>());
        assert_eq!(
            items[0].as_ref().unwrap().choices[0].delta.role.as_deref(),
            Some("assistant")
        );
        assert_eq!(
            items
                .last()
                .unwrap()
                .as_ref()
                .unwrap()
                .usage
                .as_ref()
                .unwrap()
                .completion_tokens,
            COMPLETION_TOKENS
        );
        assert!(s.next().await.is_none(), "fused after the end");
        let stats = c.broker().resource_stats("llm:p:m").await.unwrap();
        assert_eq!(stats.usage["inputTokensPerMinute"], PROMPT_TOKENS);
        assert_eq!(stats.usage["outputTokensPerMinute"], COMPLETION_TOKENS);
        assert_eq!(stats.usage["requestsPerMinute"], 1);
        assert_eq!(stats.active, Some(0));
        assert_eq!(s.spent().micro_usd(), PROMPT_TOKENS + COMPLETION_TOKENS);
        assert_eq!(s.failed_spent().micro_usd(), 0);
        let m = c.snapshot();
        assert_eq!((m.requests, m.attempts, m.served["primary"]), (1, 1, 1));
        assert_eq!(m.spent_micro_usd, PROMPT_TOKENS + COMPLETION_TOKENS);
        assert!(m.errors.is_empty());
        assert_eq!(b.hits(), 0);
        let snap = c.breakers().get("p", "m").snapshot();
        assert_eq!(snap.state.as_str(), "closed");

        // Not asked for: the same stream without the usage chunk (the
        // provider was still asked for it: the reservation is reconciled).
        let mut s = c.stream("chat", request("hello")).await.unwrap();
        let items = drain(&mut s).await;
        assert_eq!(items.len(), 7, "role, 5 content, finish: {items:?}");
        assert!(
            items.iter().all(|i| i
                .as_ref()
                .is_ok_and(|c| c.usage.is_none() && !c.choices.is_empty())),
            "{items:?}"
        );
        let stats = c.broker().resource_stats("llm:p:m").await.unwrap();
        assert_eq!(stats.usage["outputTokensPerMinute"], 2 * COMPLETION_TOKENS);
    })
    .await;
}

#[tokio::test]
async fn server_error_before_first_chunk_falls_back_to_backup_stream() {
    bounded(async {
        let p = Mock::start(vec![], Step::Status(500)).await;
        let b = Mock::start(vec![], Step::Stream(3)).await;
        let c = client(config(&p, &b, chain_pb(fast_retry(2)), json!({}), 30_000));
        let mut s = c.stream("chat", request("hello")).await.unwrap();
        assert_eq!(s.degradation(), Degradation::Backup(1));
        assert_eq!(s.model(), Some("b/m"));
        // maxAttempts 2 on the primary (500 is retried), then the backup.
        assert_eq!(p.hits(), 2);
        assert_eq!(b.hits(), 1);
        assert_eq!(s.attempts(), 3);
        let items = drain(&mut s).await;
        assert!(items.iter().all(Result::is_ok), "{items:?}");
        assert_eq!(text(&items), (0..3).map(word).collect::<String>());
        let m = c.snapshot();
        assert_eq!(m.served["backup"], 1);
        assert_eq!(m.attempt_errors["server"], 2);
        assert_eq!(m.retries, 1);
    })
    .await;
}

#[tokio::test]
async fn hang_after_first_chunk_ends_with_error_and_never_falls_back() {
    bounded(async {
        let p = Mock::start(vec![], Step::HangAfterFirst).await;
        let b = Mock::start(vec![], Step::Stream(3)).await;
        let c = client(config(&p, &b, chain_pb(fast_retry(3)), json!({}), 200));
        // Measured from before the stream opens, so the read timer (armed
        // at the last chunk) starts after `started`: the lower bound is
        // exact. The upper bound is 10× `readMs`, loose enough for a loaded
        // machine; the error kind below says which timer fired.
        let started = Instant::now();
        let mut s = c.stream("chat", request("hello")).await.unwrap();
        assert_eq!(s.degradation(), Degradation::Primary);
        let items = drain(&mut s).await;
        let took = started.elapsed();
        let read = Duration::from_millis(200);
        assert!(took >= read, "ended before readMs: {took:?}");
        assert!(took < read * 10, "not cut by readMs: {took:?}");
        // role chunk, the first content chunk, then the error as the last item.
        assert_eq!(items.len(), 3, "{items:?}");
        assert_eq!(text(&items), word(0));
        match items.last().unwrap() {
            Err(LlmError::Upstream {
                provider,
                kind: ErrorKind::Timeout {
                    phase: TimeoutPhase::Read,
                },
                ..
            }) => assert_eq!(provider, "p"),
            other => panic!("expected a read timeout, got {other:?}"),
        }
        assert!(s.next().await.is_none());
        assert_eq!(p.hits(), 1, "a committed stream is not retried");
        assert_eq!(b.hits(), 0, "a committed stream never falls back");
        let m = c.snapshot();
        assert_eq!(m.attempt_errors["timeout"], 1);
        assert!(
            m.failed_spent_micro_usd > 0,
            "input and generated output are billed"
        );
        assert_eq!(s.failed_spent().micro_usd(), m.failed_spent_micro_usd);
        let snap = c.breakers().get("p", "m").snapshot();
        assert_eq!(snap.state.as_str(), "closed");
    })
    .await;
}

#[tokio::test]
async fn rate_limit_before_first_byte_honours_retry_after() {
    bounded(async {
        let p = Mock::start(vec![Step::RateLimited { retry_after_ms: 300 }], Step::Stream(2)).await;
        let b = Mock::start(vec![], Step::Stream(1)).await;
        let c = client(config(&p, &b, chain_pb(fast_retry(3)), json!({}), 30_000));
        let mut s = c.stream("chat", request("hello")).await.unwrap();
        assert_eq!(s.degradation(), Degradation::Primary);
        let hits = p.hit_times();
        assert_eq!(hits.len(), 2);
        let gap = hits[1] - hits[0];
        assert!(gap >= Duration::from_millis(300), "gap {gap:?}");
        assert_eq!(b.hits(), 0);
        let items = drain(&mut s).await;
        assert_eq!(text(&items), (0..2).map(word).collect::<String>());
        assert_eq!(c.snapshot().attempt_errors["rate_limited"], 1);
    })
    .await;
}

#[tokio::test]
async fn dropping_mid_stream_releases_limiter_and_breaker_permits() {
    bounded(async {
        let p = Mock::start(vec![], Step::HangAfterFirst).await;
        let b = Mock::start(vec![], Step::Stream(1)).await;
        let limits = json!({"requestsPerMinute": 100, "inputTokensPerMinute": 100000,
                            "outputTokensPerMinute": 100000, "maxConcurrentRequests": 1});
        let cfg = {
            // The abandoned stream is read on until the provider's silence
            // passes the read timeout.
            let mut cfg = config(&p, &b, chain_pb(fast_retry(1)), limits, 300);
            cfg.breaker.half_open_probes = 1;
            cfg
        };
        let c = client(cfg);
        // Half-open with a single probe slot: the stream takes it.
        let breaker = c.breakers().get("p", "m");
        breaker.open_for(Duration::from_millis(50));
        tokio::time::sleep(Duration::from_millis(80)).await;

        let mut s = c.stream("chat", request("hello")).await.unwrap();
        assert_eq!(s.degradation(), Degradation::Primary);
        let first = s.next().await.unwrap().unwrap();
        assert_eq!(first.choices[0].delta.role.as_deref(), Some("assistant"));
        assert_eq!(
            c.broker().resource_stats("llm:p:m").await.unwrap().active,
            Some(1)
        );
        assert!(breaker.try_acquire().is_err(), "the probe slot is taken");
        drop(s);

        let mut active = None;
        for _ in 0..300 {
            active = c.broker().resource_stats("llm:p:m").await.unwrap().active;
            if active == Some(0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(active, Some(0), "the limiter slot was released");
        let probe = breaker.try_acquire().expect("the probe slot was released");
        probe.ignore();
        // The provider generated nothing more: the output before the drop
        // is billed (input + "w0 ").
        let counter = TokenCounter::new();
        let input = counter
            .count_chat("m", &[("user".to_owned(), "hello".to_owned())])
            .unwrap();
        let generated = counter.count_text("m", &word(0)).unwrap();
        assert!(generated > 0);
        let m = c.snapshot();
        assert_eq!(m.spent_micro_usd, input + generated, "{m:?}");
        assert_eq!(m.failed_spent_micro_usd, 0);
        // Nothing was spliced in: the backup was never called.
        assert_eq!(b.hits(), 0);
        // The quota is free again for the next event.
        p.state.script.push(Step::Stream(1));
        let mut s = c.stream("chat", request("hello")).await.unwrap();
        assert_eq!(s.degradation(), Degradation::Primary);
        assert!(drain(&mut s).await.iter().all(Result::is_ok));
    })
    .await;
}

#[tokio::test]
async fn an_abandoned_stream_settles_to_what_the_provider_billed() {
    bounded(async {
        let p = Mock::start(vec![], Step::SlowStream(20)).await;
        let b = Mock::start(vec![], Step::Stream(1)).await;
        let limits = json!({"requestsPerMinute": 100, "inputTokensPerMinute": 100000,
                            "outputTokensPerMinute": 100000, "maxConcurrentRequests": 1});
        let c = client(config(&p, &b, chain_pb(fast_retry(1)), limits, 5_000));
        let mut s = c.stream("chat", request("hello")).await.unwrap();
        s.next().await.unwrap().unwrap();
        drop(s);
        // The provider goes on: the call holds its slot until it ends.
        assert_eq!(
            c.broker().resource_stats("llm:p:m").await.unwrap().active,
            Some(1)
        );
        let mut active = None;
        for _ in 0..300 {
            active = c.broker().resource_stats("llm:p:m").await.unwrap().active;
            if active == Some(0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(active, Some(0), "released once the provider finished");
        // Settled to the provider's final usage, not to the output the
        // caller had read (one word) nor to the reservation.
        let m = c.snapshot();
        assert_eq!(m.spent_micro_usd, PROMPT_TOKENS + COMPLETION_TOKENS, "{m:?}");
        assert_eq!(m.failed_spent_micro_usd, 0);
    })
    .await;
}

#[tokio::test]
async fn rules_level_answers_as_a_one_chunk_stream() {
    bounded(async {
        let p = Mock::start(vec![], Step::Status(500)).await;
        let b = Mock::start(vec![], Step::Status(500)).await;
        let uc = json!({"chat": {"chain": [{"model": "p/m"}, {"rules": "keyword"}, {"manualQueue": true}],
                                 "retry": fast_retry(1)}});
        let c = client(config(&p, &b, uc, json!({}), 30_000));
        let mut s = c.stream("chat", request("I want a Refund")).await.unwrap();
        assert_eq!(s.degradation(), Degradation::Rules);
        assert_eq!((s.level(), s.model()), (1, None));
        let items = drain(&mut s).await;
        assert_eq!(items.len(), 1, "{items:?}");
        assert_eq!(text(&items), "See /refunds");
        assert_eq!(p.hits(), 1);

        // No rule matches: the manual queue answers with a ticket marker.
        let mut s = c.stream("chat", request("something else")).await.unwrap();
        assert_eq!(s.degradation(), Degradation::ManualQueue);
        assert_eq!(s.http_status(), 202);
        let ticket = s.ticket().unwrap().to_owned();
        let items = drain(&mut s).await;
        assert_eq!(items.len(), 1);
        let marker = items[0].as_ref().unwrap();
        // A chunk an SDK reads like any other: its text says it was queued.
        let said = marker.choices[0].delta.content.as_deref().unwrap();
        assert!(said.contains("queued") && said.contains(&ticket), "{said}");
        assert_eq!(marker.extra["pressure_ticket"], json!(ticket));
    })
    .await;
}
