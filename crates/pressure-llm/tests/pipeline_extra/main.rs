//! Latency histograms, provider rate-limit headers holding a model, the
//! batch share of a limit, and interactive before batch under contention —
//! against mock OpenAI-compatible servers on 127.0.0.1.

#![allow(clippy::unwrap_used)]

use super::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use pressure_core::ResourceBroker;
use pressure_llm::pipeline::{Degradation, LlmClient, LlmConfig, LlmError};
use serde_json::{json, Value};
use support::{bounded, request, Shared};
use tokio::time::Instant;

struct MockState {
    /// Response headers added to every 200.
    headers: Mutex<Vec<(String, String)>>,
    /// The first user message of every request, in the order they arrived.
    texts: Mutex<Vec<String>>,
    /// Requests whose message starts with `hold` take a permit from here
    /// before they are answered (none at first): the test lets them go.
    gate: tokio::sync::Semaphore,
}

type Mock = support::Mock<MockState>;

impl Mock {
    async fn start(headers: &[(&str, &str)]) -> Self {
        let headers = headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Self::serve(
            MockState {
                headers: Mutex::new(headers),
                texts: Mutex::new(Vec::new()),
                gate: tokio::sync::Semaphore::new(0),
            },
            handler,
        )
        .await
    }

    /// The first user message of every request so far, in arrival order.
    fn texts(&self) -> Vec<String> {
        self.state.texts.lock().unwrap().clone()
    }

    /// Lets one held (`hold…`) request be answered.
    fn release_one(&self) {
        self.state.gate.add_permits(1);
    }

    fn clear_headers(&self) {
        self.state.headers.lock().unwrap().clear();
    }
}

async fn handler(State(state): State<Arc<Shared<MockState>>>, Json(body): Json<Value>) -> Response {
    state.hit();
    let text = body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    state.texts.lock().unwrap().push(text.clone());
    if text.starts_with("hold") {
        state.gate.acquire().await.unwrap().forget();
    }
    let mut resp = if body["stream"] == json!(true) {
        let chunk = |delta: Value, finish: Value| {
            json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": body["model"],
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        };
        let usage = json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": body["model"],
                           "choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 1, "total_tokens": 12}});
        let sse = format!(
            "data: {}\n\ndata: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
            chunk(json!({"role": "assistant", "content": "hi"}), Value::Null),
            chunk(json!({}), json!("stop")),
            usage
        );
        ([("content-type", "text/event-stream")], sse).into_response()
    } else {
        Json(json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    }))
        .into_response()
    };
    for (k, v) in state.headers.lock().unwrap().iter() {
        resp.headers_mut().insert(
            axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            axum::http::HeaderValue::from_str(v).unwrap(),
        );
    }
    resp
}

fn model(provider: &str, extra: Value) -> Value {
    let mut m = json!({
        "provider": provider, "model": "m",
        "context": {"contextTokens": 8000, "maxOutputTokens": 1000},
        "price": {"inputMicroUsdPer1M": 1_000_000, "outputMicroUsdPer1M": 1_000_000}
    });
    for (k, v) in extra.as_object().unwrap() {
        m[k] = v.clone();
    }
    m
}

/// Providers `p` (primary) and `b` (backup), one model `m` each.
fn client(p: &Mock, b: &Mock, p_extra: Value, use_cases: Value) -> LlmClient<pressure_core::MemoryBackend> {
    let v = json!({
        "providers": {"p": {"baseUrl": p.url}, "b": {"baseUrl": b.url}},
        "models": [model("p", p_extra), model("b", json!({}))],
        "useCases": use_cases,
    });
    let cfg: LlmConfig = serde_json::from_value(v).unwrap();
    LlmClient::new(cfg, ResourceBroker::new()).unwrap()
}

#[tokio::test]
async fn latency_histograms_per_model() {
    bounded(async {
        let p = Mock::start(&[]).await;
        let b = Mock::start(&[]).await;
        let c = client(&p, &b, json!({}), json!({"chat": {"chain": [{"model": "p/m"}]}}));
        for _ in 0..3 {
            c.complete("chat", request("hello")).await.unwrap();
        }
        let s = c.snapshot();
        let key = ("p".to_owned(), "m".to_owned());
        let ttft = s.ttft[&key];
        let total = s.latency[&key];
        assert_eq!((ttft.count, total.count), (3, 3));
        // Local calls: everything well below the last bound, buckets cumulative.
        assert_eq!(*ttft.buckets.last().unwrap(), 3);
        assert!(ttft.buckets.windows(2).all(|w| w[0] <= w[1]));
        assert!(total.sum_micros >= ttft.sum_micros);
        assert!(total.sum_seconds() > 0.0);
        assert!(!s.ttft.contains_key(&("b".to_owned(), "m".to_owned())));
    })
    .await;
}

const SPENT: [(&str, &str); 2] = [
    ("x-ratelimit-remaining-requests", "0"),
    ("x-ratelimit-reset-requests", "1s"),
];

#[tokio::test]
async fn spent_quota_headers_fall_back_until_reset() {
    bounded(async {
        let p = Mock::start(&SPENT).await;
        let b = Mock::start(&[]).await;
        // 500 ms total: a 1 s hold cannot end in time, so the level is skipped.
        let uc = json!({"chat": {"chain": [{"model": "p/m"}, {"model": "b/m"}], "totalMs": 500}});
        let c = client(&p, &b, json!({}), uc);
        let a = c.complete("chat", request("hello")).await.unwrap();
        assert_eq!(a.degradation, Degradation::Primary);
        let held_at = Instant::now();
        p.clear_headers();
        let a = c.complete("chat", request("hello")).await.unwrap();
        assert_eq!(a.degradation, Degradation::Backup(1));
        assert_eq!((p.hits(), b.hits()), (1, 1));
        assert_eq!(c.snapshot().limiter_rejections, 1);
        tokio::time::sleep_until(held_at + Duration::from_millis(1050)).await;
        let a = c.complete("chat", request("hello")).await.unwrap();
        assert_eq!(a.degradation, Degradation::Primary);
        assert_eq!((p.hits(), b.hits()), (2, 1));
    })
    .await;
}

#[tokio::test]
async fn spent_quota_headers_wait_for_reset_within_deadline() {
    bounded(async {
        let p = Mock::start(&SPENT).await;
        let b = Mock::start(&[]).await;
        let uc = json!({"chat": {"chain": [{"model": "p/m"}, {"model": "b/m"}], "totalMs": 5000}});
        let c = client(&p, &b, json!({}), uc);
        c.complete("chat", request("hello")).await.unwrap();
        let a = c.complete("chat", request("hello")).await.unwrap();
        assert_eq!(a.degradation, Degradation::Primary);
        assert_eq!((p.hits(), b.hits()), (2, 0));
        let t = p.hit_times();
        let gap = t[1] - t[0];
        assert!(gap >= Duration::from_millis(990), "{gap:?}");
    })
    .await;
}

#[tokio::test]
async fn streams_record_latency_and_apply_spent_quota_headers() {
    use futures::StreamExt;
    bounded(async {
        let p = Mock::start(&SPENT).await;
        let b = Mock::start(&[]).await;
        let uc = json!({"chat": {"chain": [{"model": "p/m"}, {"model": "b/m"}], "totalMs": 500}});
        let c = client(&p, &b, json!({}), uc);
        let mut s = c.stream("chat", request("hello")).await.unwrap();
        assert_eq!(s.degradation(), Degradation::Primary);
        while let Some(item) = s.next().await {
            item.unwrap();
        }
        drop(s);
        let key = ("p".to_owned(), "m".to_owned());
        let m = c.snapshot();
        assert_eq!((m.ttft[&key].count, m.latency[&key].count), (1, 1));
        // The stream's head said the request quota is spent for 1 s.
        let s = c.stream("chat", request("hello")).await.unwrap();
        assert_eq!(s.degradation(), Degradation::Backup(1));
        assert_eq!((p.hits(), b.hits()), (1, 1));
    })
    .await;
}

#[tokio::test]
async fn low_remaining_tokens_hold_until_token_reset() {
    bounded(async {
        // The call reserves prompt + 100 output tokens; 50 remaining is too few.
        let p = Mock::start(&[
            ("x-ratelimit-remaining-tokens", "50"),
            ("x-ratelimit-reset-tokens", "800ms"),
        ])
        .await;
        let b = Mock::start(&[]).await;
        let uc = json!({"chat": {"chain": [{"model": "p/m"}, {"model": "b/m"}], "totalMs": 300}});
        let c = client(&p, &b, json!({}), uc);
        c.complete("chat", request("hello")).await.unwrap();
        let a = c.complete("chat", request("hello")).await.unwrap();
        assert_eq!(a.degradation, Degradation::Backup(1));
        assert_eq!((p.hits(), b.hits()), (1, 1));
    })
    .await;
}

/// The batch ceiling of a rate, one request after another: batch use cases
/// get `1 − batchHeadroom` of it, then fall back (or fail without a
/// backup, touching nothing), and interactive ones still get the rest.
#[tokio::test]
async fn batch_fills_only_its_share_of_a_rate() {
    bounded(async {
        let p = Mock::start(&[]).await;
        let b = Mock::start(&[]).await;
        let limits = json!({"limits": {"requestsPerMinute": 5}, "batchHeadroom": 0.4});
        let uc = json!({
            "bulk": {"chain": [{"model": "p/m"}, {"model": "b/m"}], "priority": "batch", "totalMs": 2000},
            "solo": {"chain": [{"model": "p/m"}], "priority": "batch", "totalMs": 2000},
            "chat": {"chain": [{"model": "p/m"}], "totalMs": 2000},
        });
        let c = client(&p, &b, limits, uc);
        let mut served = Vec::new();
        for _ in 0..5 {
            served.push(c.complete("bulk", request("hello")).await.unwrap().degradation);
        }
        // Batch gets 60 % of the 5 requests; the rest goes to the backup.
        assert_eq!(
            served,
            [
                Degradation::Primary,
                Degradation::Primary,
                Degradation::Primary,
                Degradation::Backup(1),
                Degradation::Backup(1)
            ]
        );
        assert_eq!((p.hits(), b.hits()), (3, 2));
        // Without a backup, batch fails with no capacity, no primary hit.
        let e = c.complete("solo", request("hello")).await.unwrap_err();
        assert!(matches!(e, LlmError::NoCapacity { .. }), "{e:?}");
        assert_eq!(p.hits(), 3);
        // Interactive still gets the remaining 2.
        for _ in 0..2 {
            let a = c.complete("chat", request("hello")).await.unwrap();
            assert_eq!(a.degradation, Degradation::Primary);
        }
        assert_eq!(p.hits(), 5);
    })
    .await;
}

/// Waits until `cond` holds; only a hang fails (the test's 20 s bound).
async fn until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Under contention the order is priority, not arrival: with the model's
/// two slots taken, a batch request that has been waiting is still waiting
/// when an interactive one that came after it is served. (Batch may fill
/// `1 − batchHeadroom` = one of the two slots; the limiter is asked again
/// while the slots are held, so the one that frees is the interactive
/// request's, and the batch request runs once both are free.)
#[tokio::test]
async fn interactive_served_before_batch_under_contention() {
    bounded(async {
        let p = Mock::start(&[]).await;
        let b = Mock::start(&[]).await;
        let limits = json!({"limits": {"maxConcurrentRequests": 2}, "batchHeadroom": 0.5});
        let uc = json!({
            "hold": {"chain": [{"model": "p/m"}], "totalMs": 15_000},
            "bulk": {"chain": [{"model": "p/m"}], "priority": "batch", "totalMs": 15_000},
            "chat": {"chain": [{"model": "p/m"}], "totalMs": 15_000},
        });
        let c = Arc::new(client(&p, &b, limits, uc));
        let event = |use_case: &'static str, text: &'static str| {
            let c = Arc::clone(&c);
            tokio::spawn(async move { c.complete(use_case, request(text)).await })
        };
        // Both slots held by calls the mock does not answer yet.
        let holds = [event("hold", "hold 1"), event("hold", "hold 2")];
        until(|| p.hits() == 2).await;
        let active = c.broker().resource_stats("llm:p:m").await.unwrap().active;
        assert_eq!(active, Some(2), "both slots are taken");
        // The batch request first, then the interactive one; each is waiting
        // for the limiter once the event has started (on this single-thread
        // runtime nothing between the start of an event and its limiter
        // attempt yields).
        let batch = event("bulk", "batch");
        until(|| c.snapshot().requests == 3).await;
        let interactive = event("chat", "interactive");
        until(|| c.snapshot().requests == 4).await;
        assert_eq!(p.hits(), 2, "both are waiting, neither reached the provider");
        // One slot frees: the interactive request takes it, the batch one
        // (over its share with one slot in use) goes on waiting.
        p.release_one();
        let a = interactive.await.unwrap().unwrap();
        assert_eq!(a.degradation, Degradation::Primary);
        assert!(!batch.is_finished(), "the batch request is still waiting");
        assert_eq!(p.texts(), ["hold 1", "hold 2", "interactive"]);
        // The last held slot frees: now the batch request runs.
        p.release_one();
        let a = batch.await.unwrap().unwrap();
        assert_eq!(a.degradation, Degradation::Primary);
        for h in holds {
            assert_eq!(h.await.unwrap().unwrap().degradation, Degradation::Primary);
        }
        assert_eq!(p.texts(), ["hold 1", "hold 2", "interactive", "batch"]);
        assert_eq!(b.hits(), 0);
        let stats = c.broker().resource_stats("llm:p:m").await.unwrap();
        assert_eq!(stats.active, Some(0), "every slot is given back");
    })
    .await;
}

#[test]
fn batch_headroom_is_validated() {
    let v = json!({
        "providers": {"p": {"baseUrl": "http://127.0.0.1:1/v1"}},
        "models": [model("p", json!({"batchHeadroom": 1.0}))],
        "useCases": {"chat": {"chain": [{"model": "p/m"}]}},
    });
    let cfg: LlmConfig = serde_json::from_value(v).unwrap();
    let e = cfg.validate().unwrap_err();
    assert_eq!(e.path, "models[0].batchHeadroom");
}

/// Issue 21: a model the provider says has no requests left until a reset
/// far into the deadline is not waited for while a backup level is idle:
/// a hold longer than the level's share of the deadline (here 15 s over
/// two model levels) falls back at once.
#[tokio::test]
async fn a_hold_longer_than_the_levels_share_falls_back() {
    bounded(async {
        let p = Mock::start(&[
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "10s"),
        ])
        .await;
        let b = Mock::start(&[]).await;
        let uc = json!({"chat": {"chain": [{"model": "p/m"}, {"model": "b/m"}], "totalMs": 15000}});
        let c = client(&p, &b, json!({}), uc);
        let a = c.complete("chat", request("hello")).await.unwrap();
        assert_eq!(a.degradation, Degradation::Primary);
        let a = c.complete("chat", request("hello")).await.unwrap();
        assert_eq!(a.degradation, Degradation::Backup(1), "the backup is idle");
        assert_eq!((p.hits(), b.hits()), (1, 1));
    })
    .await;
}
