//! The pipeline (deadline → chain → retry → breaker → limiter → attempt)
//! against scripted mock OpenAI-compatible servers on 127.0.0.1.

#![allow(clippy::unwrap_used)]

use super::support;

use std::sync::Arc;
use std::time::Duration;

use pressure_llm::pipeline::{Degradation, LlmConfig, LlmError};
use pressure_llm::provider::Message;
use pressure_llm::taxonomy::ErrorKind;
use pressure_llm::tokens::TokenCounter;
use serde_json::{json, Value};
use support::{bounded, client, fast_retry, model, request, Step, COMPLETION_TOKENS, PROMPT_TOKENS};
use tokio::time::Instant;

type Mock = support::ScriptedMock;

/// A configuration with providers `p` (primary) and `b` (backup), one model
/// `m` each, and the given use cases / breaker / limits of `p/m`.
fn config(p: &Mock, b: &Mock, use_cases: Value, breaker: Value, p_limits: Value) -> LlmConfig {
    let v = json!({
        "providers": {"p": {"baseUrl": p.url}, "b": {"baseUrl": b.url}},
        "models": [model("p", p_limits), model("b", json!({}))],
        "rules": {"keyword": [{"keywords": ["Refund"], "answer": "See /refunds", "label": "refund"}]},
        "useCases": use_cases,
        "breaker": breaker,
    });
    serde_json::from_value(v).unwrap()
}

#[tokio::test]
async fn happy_path_reconciles_usage() {
    bounded(async {
        let p = Mock::start(vec![], Step::Ok).await;
        let b = Mock::start(vec![], Step::Ok).await;
        let limits = json!({"requestsPerMinute": 100, "inputTokensPerMinute": 100000, "outputTokensPerMinute": 100000});
        let c = client(config(&p, &b, json!({"chat": {"chain": [{"model": "p/m"}]}}), json!({}), limits));
        let a = c.complete("chat", request("hello")).await.unwrap();
        assert_eq!(p.hits(), 1);
        assert_eq!(a.degradation, Degradation::Primary);
        assert_eq!(a.degradation.as_str(), "primary");
        assert_eq!(a.attempts, 1);
        assert_eq!(a.http_status(), 200);
        assert_eq!(a.response().unwrap().header.model, "m");
        let stats = c.broker().resource_stats("llm:p:m").await.unwrap();
        assert_eq!(stats.usage["inputTokensPerMinute"], PROMPT_TOKENS);
        assert_eq!(stats.usage["outputTokensPerMinute"], COMPLETION_TOKENS);
        assert_eq!(stats.usage["requestsPerMinute"], 1);
        assert_eq!(a.spent.micro_usd(), PROMPT_TOKENS + COMPLETION_TOKENS);
        let m = c.snapshot();
        assert_eq!((m.requests, m.attempts, m.served["primary"]), (1, 1, 1));
    })
    .await;
}

#[tokio::test]
async fn bad_request_is_one_hit_no_retry_no_fallback() {
    bounded(async {
        let p = Mock::start(vec![Step::Status(400)], Step::Ok).await;
        let b = Mock::start(vec![], Step::Ok).await;
        let uc = json!({"chat": {"chain": [{"model": "p/m"}, {"model": "b/m"}], "retry": fast_retry(3)}});
        let c = client(config(&p, &b, uc, json!({}), json!({})));
        let e = c.complete("chat", request("hello")).await.unwrap_err();
        assert!(
            matches!(
                e,
                LlmError::Upstream {
                    kind: ErrorKind::BadRequest,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(e.describe().status, 400);
        assert_eq!((p.hits(), b.hits()), (1, 0));
    })
    .await;
}

#[tokio::test]
async fn unauthorized_and_forbidden_are_one_hit_each_never_retried() {
    // 401/403 are this (provider, model)'s configuration problem: never
    // retried (one hit); the chain may go on to a backup with its own key.
    for status in [401u16, 403] {
        bounded(async {
            let p = Mock::start(vec![Step::Status(status)], Step::Ok).await;
            let b = Mock::start(vec![], Step::Ok).await;
            let uc = json!({"chat": {"chain": [{"model": "p/m"}, {"model": "b/m"}], "retry": fast_retry(3)}});
            let c = client(config(&p, &b, uc, json!({}), json!({})));
            let a = c
                .complete("chat", request("hello"))
                .await
                .expect("the backup answers");
            assert_eq!(a.degradation.as_str(), "backup", "{status}");
            assert_eq!(
                (p.hits(), b.hits()),
                (1, 1),
                "{status}: exactly one hit on the primary"
            );
            // Without a backup the error is returned after that single hit.
            let p = Mock::start(vec![Step::Status(status)], Step::Ok).await;
            let uc = json!({"chat": {"chain": [{"model": "p/m"}], "retry": fast_retry(3)}});
            let c = client(config(&p, &b, uc, json!({}), json!({})));
            assert!(c.complete("chat", request("hello")).await.is_err(), "{status}");
            assert_eq!(p.hits(), 1, "{status}: never retried");
        })
        .await;
    }
}

#[tokio::test]
async fn server_error_then_success_is_two_attempts() {
    bounded(async {
        let p = Mock::start(vec![Step::Status(500)], Step::Ok).await;
        let b = Mock::start(vec![], Step::Ok).await;
        let uc = json!({"chat": {"chain": [{"model": "p/m"}], "retry": fast_retry(3)}});
        let c = client(config(
            &p,
            &b,
            uc,
            json!({}),
            json!({"inputTokensPerMinute": 100000}),
        ));
        let a = c.complete("chat", request("hello")).await.unwrap();
        assert_eq!(p.hits(), 2);
        assert_eq!(a.attempts, 2);
        assert_eq!(a.degradation, Degradation::Primary);
        let input = TokenCounter::new().count_chat("m", &[("user", "hello")]).unwrap();
        assert_eq!(a.failed_spent.micro_usd(), input);
        // The failed attempt was refunded to its input tokens only.
        let stats = c.broker().resource_stats("llm:p:m").await.unwrap();
        assert_eq!(stats.usage["inputTokensPerMinute"], input + PROMPT_TOKENS);
        let m = c.snapshot();
        assert_eq!((m.retries, m.attempt_errors["server"]), (1, 1));
    })
    .await;
}

#[tokio::test]
async fn retry_after_ms_is_honoured() {
    bounded(async {
        let p = Mock::start(vec![Step::RateLimited { retry_after_ms: 300 }], Step::Ok).await;
        let b = Mock::start(vec![], Step::Ok).await;
        let uc = json!({"chat": {"chain": [{"model": "p/m"}], "retry": fast_retry(3)}});
        let c = client(config(&p, &b, uc, json!({}), json!({})));
        let a = c.complete("chat", request("hello")).await.unwrap();
        assert_eq!(a.attempts, 2);
        let t = p.hit_times();
        assert_eq!(t.len(), 2);
        assert!(t[1] - t[0] >= Duration::from_millis(300), "{:?}", t[1] - t[0]);
    })
    .await;
}

#[tokio::test]
async fn money_budget_of_one_attempt_stops_the_retry() {
    bounded(async {
        let p = Mock::start(vec![], Step::Status(500)).await;
        let b = Mock::start(vec![], Step::Ok).await;
        let input = TokenCounter::new().count_chat("m", &[("user", "hello")]).unwrap();
        // One attempt's estimate: input + max_tokens at 1 µUSD per token.
        let budget = input + 100;
        let retry = json!({"maxAttempts": 5, "baseDelayMs": 5, "maxDelayMs": 20, "budgetMicroUsd": budget});
        let uc = json!({
            "solo": {"chain": [{"model": "p/m"}], "retry": retry},
            "chain": {"chain": [{"model": "p/m"}, {"model": "b/m"}], "retry": retry},
        });
        let c = client(config(&p, &b, uc, json!({}), json!({})));
        let e = c.complete("solo", request("hello")).await.unwrap_err();
        assert!(
            matches!(
                e,
                LlmError::Upstream {
                    kind: ErrorKind::Server { status: 500, .. },
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(e.describe().status, 502);
        assert_eq!(p.hits(), 1);
        // Budget exhaustion is a fallback disposition: the backup answers.
        let a = c.complete("chain", request("hello")).await.unwrap();
        assert_eq!(p.hits(), 2);
        assert_eq!(a.degradation, Degradation::Backup(1));
        assert_eq!(a.degradation.as_str(), "backup");
    })
    .await;
}

#[tokio::test]
async fn breaker_opens_skips_primary_then_probes_and_returns() {
    bounded(async {
        let p = Mock::start(vec![], Step::Status(500)).await;
        let b = Mock::start(vec![], Step::Ok).await;
        let uc = json!({"chat": {"chain": [{"model": "p/m"}, {"model": "b/m"}], "retry": fast_retry(1)}});
        let breaker =
            json!({"minimumCalls": 2, "failureRateThreshold": 0.5, "openWaitMs": 300, "halfOpenProbes": 1});
        let c = client(config(&p, &b, uc, breaker, json!({})));
        for _ in 0..2 {
            let a = c.complete("chat", request("hello")).await.unwrap();
            assert_eq!(a.degradation, Degradation::Backup(1));
        }
        assert_eq!(p.hits(), 2);
        // Open: the primary gets no request at all.
        for _ in 0..3 {
            let a = c.complete("chat", request("hello")).await.unwrap();
            assert_eq!(a.degradation, Degradation::Backup(1));
            assert_eq!(a.attempts, 1);
        }
        assert_eq!(p.hits(), 2);
        assert_eq!(c.snapshot().breaker_rejections, 3);
        // Recovered primary: after the wait a probe goes there and closes it.
        p.set_default(Step::Ok);
        tokio::time::sleep(Duration::from_millis(350)).await;
        for _ in 0..2 {
            let a = c.complete("chat", request("hello")).await.unwrap();
            assert_eq!(a.degradation, Degradation::Primary);
        }
        assert_eq!(p.hits(), 4);
    })
    .await;
}

/// A call admitted by the breaker that then waits for the limiter is not
/// made when the breaker opened meanwhile: open means no network call,
/// whenever the permit was taken. (The chaos stand saw such calls reach the
/// provider while open, on Redis under load, where the limiter is a round
/// trip.)
#[tokio::test]
async fn a_breaker_that_opens_while_a_call_waits_for_the_limiter_stops_that_call() {
    bounded(async {
        let p = Mock::start(vec![], Step::Ok).await;
        let b = Mock::start(vec![], Step::Ok).await;
        let uc = json!({"chat": {"chain": [{"model": "p/m"}, {"model": "b/m"}], "retry": fast_retry(1)}});
        let c = Arc::new(client(config(
            &p,
            &b,
            uc,
            json!({}),
            json!({"requestsPerMinute": 12, "algorithm": "gcra", "burst": 1}),
        )));
        // The only request of the next 5 s is taken: the event waits about
        // 5 s for the limiter after the (closed) breaker admitted it — long
        // enough that the breaker opens during the wait even on a starved
        // machine.
        let taken = c
            .broker()
            .try_acquire("llm:p:m", pressure_core::AcquireOptions::default())
            .await
            .unwrap();
        assert!(taken.allowed());
        let event = tokio::spawn({
            let c = Arc::clone(&c);
            async move { c.complete("chat", request("hello")).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        c.breakers().get("p", "m").open_for(Duration::from_secs(30));
        let a = event.await.unwrap().unwrap();
        assert_eq!(a.degradation, Degradation::Backup(1));
        assert_eq!(p.hits(), 0, "no call to the primary once its breaker is open");
        assert_eq!(b.hits(), 1);
    })
    .await;
}

#[tokio::test]
async fn fallback_order_backup_rules_manual_queue() {
    bounded(async {
        let p = Mock::start(vec![], Step::Status(500)).await;
        let b = Mock::start(vec![], Step::Status(503)).await;
        let chain = json!([{"model": "p/m"}, {"model": "b/m"}, {"rules": "keyword"}, {"manualQueue": true}]);
        let uc = json!({"chat": {"chain": chain, "retry": fast_retry(2)}});
        let c = client(config(&p, &b, uc, json!({"minimumCalls": 100}), json!({})));
        let a = c.complete("chat", request("I want a REFUND now")).await.unwrap();
        assert_eq!((p.hits(), b.hits()), (2, 2));
        assert_eq!((a.level, a.degradation, a.attempts), (2, Degradation::Rules, 4));
        let r = a.response().unwrap();
        assert_eq!(r.choices[0].message.text(), "See /refunds");
        assert_eq!(r.extra["pressure_label"], "refund");
        let a = c.complete("chat", request("something else")).await.unwrap();
        assert_eq!((a.level, a.degradation), (3, Degradation::ManualQueue));
        assert_eq!(a.degradation.as_str(), "manual_queue");
        assert_eq!(a.http_status(), 202);
        assert!(a.ticket().unwrap().starts_with("mq-"));
        assert_eq!((p.hits(), b.hits()), (4, 4));
        let m = c.snapshot();
        assert_eq!((m.served["rules"], m.served["manual_queue"]), (1, 1));
        assert!(m.failed_spent_micro_usd > 0);
    })
    .await;
}

#[tokio::test]
async fn limiter_without_capacity_falls_back_or_errors() {
    bounded(async {
        let p = Mock::start(vec![], Step::Ok).await;
        let b = Mock::start(vec![], Step::Ok).await;
        let uc = json!({
            "chain": {"chain": [{"model": "p/m"}, {"model": "b/m"}], "totalMs": 1000},
            "solo": {"chain": [{"model": "p/m"}], "totalMs": 300},
        });
        let c = client(config(&p, &b, uc, json!({}), json!({"requestsPerMinute": 1})));
        assert_eq!(
            c.complete("chain", request("a")).await.unwrap().degradation,
            Degradation::Primary
        );
        let a = c.complete("chain", request("b")).await.unwrap();
        assert_eq!(a.degradation, Degradation::Backup(1));
        assert_eq!(p.hits(), 1);
        // The limiter's wait (the next minute) is past the 300 ms deadline:
        // the event is refused at once, not after waiting for the deadline.
        // On tokio's paused clock (no network call is made from here on)
        // only a sleep moves time, so "at once" is exact whatever the load.
        tokio::time::pause();
        let started = Instant::now();
        let e = c.complete("solo", request("c")).await.unwrap_err();
        let waited = started.elapsed();
        match &e {
            LlmError::NoCapacity {
                retry_after: Some(wait),
                ..
            } => assert!(*wait > Duration::from_millis(300), "{wait:?}"),
            other => panic!("expected no capacity with a wait, got {other:?}"),
        }
        assert_eq!(e.describe().status, 429);
        assert!(
            waited < Duration::from_millis(300),
            "waited {waited:?} for a limiter whose wait is past the deadline"
        );
        assert_eq!(p.hits(), 1);
    })
    .await;
}

/// Issue 21: when a chain gives up on rate limits, the hint says when a
/// level could answer counted from the moment the chain gave up, and is
/// never shorter than the chain's own backoff before it would try a level
/// again: here the primary's 30 ms `retry-after` had passed while the
/// backup was tried (a hint of ~0 made SDKs re-run the whole chain at
/// once); the chain itself would wait up to 80 ms (40 ms base, second
/// retry) before trying again.
#[tokio::test]
async fn a_chain_that_gives_up_on_429s_hints_from_now() {
    bounded(async {
        let limited = Step::RateLimited { retry_after_ms: 30 };
        let p = Mock::start(vec![], limited).await;
        let b = Mock::start(vec![], limited).await;
        let retry = json!({"maxAttempts": 2, "baseDelayMs": 40, "maxDelayMs": 100});
        let uc = json!({"chain": {"chain": [{"model": "p/m"}, {"model": "b/m"}], "retry": retry}});
        let c = client(config(&p, &b, uc, json!({}), json!({})));
        let e = c.complete("chain", request("a")).await.unwrap_err();
        assert_eq!(e.describe().status, 429, "{e}");
        assert_eq!((p.hits(), b.hits()), (2, 2));
        let hint = e.retry_after().expect("a hint");
        assert!(hint >= Duration::from_millis(80), "{hint:?}");
    })
    .await;
}

/// `took` (measured from before the event started) is a hang cut by the
/// event's `total_ms` deadline: not before it, and long before the mock's
/// 60 s hang would have ended. The upper bound is 10× the deadline so that a
/// loaded machine cannot break it; the error kind says which timer fired.
fn assert_cut_by_the_deadline(took: Duration, total_ms: u64) {
    let total = Duration::from_millis(total_ms);
    assert!(took >= total, "ended before the deadline: {took:?} < {total:?}");
    assert!(took < total * 10, "not cut by the deadline: {took:?}");
}

#[tokio::test]
async fn total_deadline_cuts_a_hanging_primary() {
    bounded(async {
        let p = Mock::start(vec![], Step::Hang).await;
        let b = Mock::start(vec![], Step::Ok).await;
        let uc = json!({
            "solo": {"chain": [{"model": "p/m"}], "totalMs": 500, "retry": fast_retry(3)},
            "rules": {"chain": [{"model": "p/m"}, {"rules": "keyword"}], "totalMs": 500},
        });
        let c = client(config(&p, &b, uc, json!({"minimumCalls": 100}), json!({})));
        let started = Instant::now();
        let e = c.complete("solo", request("hello")).await.unwrap_err();
        let took = started.elapsed();
        assert!(matches!(e, LlmError::DeadlineExceeded { total_ms: 500 }), "{e:?}");
        assert_eq!(e.describe().status, 504);
        assert_cut_by_the_deadline(took, 500);
        assert_eq!(p.hits(), 1, "the hanging call is not retried past the deadline");
        // With a rules level after it, the deadline ends the model level and
        // the rules answer.
        let started = Instant::now();
        let a = c.complete("rules", request("refund please")).await.unwrap();
        assert_eq!(a.degradation, Degradation::Rules);
        assert_cut_by_the_deadline(started.elapsed(), 500);
        assert_eq!(p.hits(), 2);
    })
    .await;
}

#[tokio::test]
async fn context_overflow_and_unknown_use_case_touch_nothing() {
    bounded(async {
        let p = Mock::start(vec![], Step::Ok).await;
        let b = Mock::start(vec![], Step::Ok).await;
        let uc = json!({"chat": {"chain": [{"model": "p/m"}, {"model": "b/m"}]}});
        let c = client(config(&p, &b, uc, json!({}), json!({})));
        let mut r = request("hello");
        r.max_tokens = Some(999);
        r.messages = vec![Message::new("user", "word ".repeat(8000))];
        let e = c.complete("chat", r).await.unwrap_err();
        let d = e.describe();
        assert_eq!(d.status, 400);
        assert_eq!(d.code, Some("context_length_exceeded"));
        let e = c.complete("nope", request("hello")).await.unwrap_err();
        assert_eq!(e.describe().status, 404);
        assert_eq!((p.hits(), b.hits()), (0, 0));
    })
    .await;
}

#[test]
fn config_validation_names_the_field() {
    let v = json!({
        "providers": {"p": {"baseUrl": "http://127.0.0.1:1/v1"}},
        "models": [model("p", json!({}))],
        "useCases": {"chat": {"chain": [{"model": "p/x"}], "priority": "batch"}},
    });
    let cfg: LlmConfig = serde_json::from_value(v).unwrap();
    let e = cfg.validate().unwrap_err();
    assert_eq!(e.path, "useCases.chat.chain[0].model");
    assert_eq!(cfg.use_cases["chat"].total(), Duration::from_secs(120));
    let bad = json!({"providers": {}, "useCase": {}});
    assert!(serde_json::from_value::<LlmConfig>(bad).is_err());
    let v = json!({"useCases": {"c": {"chain": [{"manualQueue": true}, {"rules": "k"}]}}});
    let cfg: LlmConfig = serde_json::from_value(v).unwrap();
    assert_eq!(
        cfg.validate().unwrap_err().path,
        "useCases.c.chain[0].manualQueue"
    );
}
