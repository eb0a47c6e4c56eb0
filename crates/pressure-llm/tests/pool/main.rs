//! Deployment pools (`{"pool": [...]}` chain levels) against real mock
//! providers (`pressure-mock`, one per deployment, each on 127.0.0.1
//! port 0 with a quota of its own): a pool serves a load no single
//! deployment could while each stays within its own quota, a transient
//! failure moves to another member before the chain's next level, and a
//! member whose breaker is open is skipped.

use std::collections::BTreeMap;

use futures::future::join_all;
use pressure_core::ResourceBroker;
use pressure_llm::breaker::State;
use pressure_llm::pipeline::{Degradation, LlmClient, LlmConfig, LlmError};
use pressure_mock::{Behaviour, MockConfig, MockProvider, Outcome, Phase, RateLimit};
use serde_json::{json, Value};

use super::support::{bounded, request};

/// The model every deployment serves.
const MODEL: &str = "gpt-4o";

/// A mock provider playing `phase`.
async fn mock(phase: Phase) -> MockProvider {
    let config = MockConfig {
        behaviour: Behaviour::single(phase),
        seed: Some(11),
        ..MockConfig::default()
    };
    MockProvider::start("127.0.0.1:0".parse().expect("addr"), config)
        .await
        .expect("mock provider starts")
}

/// A phase answering normally, at most `requests` requests a minute (the
/// mock answers 429 beyond, counting any 60 s window).
fn quota(requests: u64) -> Phase {
    let mut phase = Phase::normal("quota");
    phase.rate_limit = Some(RateLimit {
        requests,
        tokens: 0,
        window_ms: 60_000,
    });
    phase
}

/// A phase answering every request `503` (overloaded) at once.
fn overloaded() -> Phase {
    let mut phase = Phase::normal("overloaded");
    phase.overload_share = 1.0;
    phase
}

/// A phase answering every request `500` at once.
fn storm() -> Phase {
    let mut phase = Phase::normal("storm");
    phase.error_share = 1.0;
    phase
}

/// `gpt-4o` of `provider` with `limits` (null: not limited locally).
fn deployment(provider: &str, limits: &Value) -> Value {
    json!({
        "provider": provider, "model": MODEL, "limits": limits,
        "context": { "contextTokens": 8000, "maxOutputTokens": 1000 },
        "price": { "inputMicroUsdPer1M": 1_000_000, "outputMicroUsdPer1M": 1_000_000 }
    })
}

/// `requestsPerMinute: n`.
fn rpm(n: u64) -> Value {
    json!({ "requestsPerMinute": n })
}

/// A config whose providers are `mocks` (name → mock), each serving
/// [`deployment`] with its limits, and `use_cases`.
fn config(mocks: &[(&str, &MockProvider, Value)], use_cases: Value, breaker: Value) -> LlmConfig {
    let providers: serde_json::Map<String, Value> = mocks
        .iter()
        .map(|(name, m, _)| ((*name).to_owned(), json!({ "baseUrl": m.base_url() })))
        .collect();
    let models: Vec<Value> = mocks
        .iter()
        .map(|(name, _, limits)| deployment(name, limits))
        .collect();
    serde_json::from_value(json!({
        "providers": providers, "models": models, "useCases": use_cases, "breaker": breaker
    }))
    .expect("config parses")
}

fn client(cfg: LlmConfig) -> LlmClient<pressure_core::MemoryBackend> {
    LlmClient::new(cfg, ResourceBroker::new()).expect("client builds")
}

/// Requests the mock answered in full, and those it refused by its quota.
fn served_and_refused(m: &MockProvider) -> (u64, u64) {
    let stats = m.stats();
    let of = |o: Outcome| stats.by_outcome.get(&o).copied().unwrap_or(0);
    (of(Outcome::Ok), of(Outcome::RateLimited))
}

#[tokio::test]
async fn a_pool_serves_more_than_any_member_and_each_stays_within_its_quota() {
    bounded(async {
        let quotas = [("oa1", 3u64), ("oa2", 5), ("oa3", 8)];
        let mocks = [mock(quota(3)).await, mock(quota(5)).await, mock(quota(8)).await];
        let members: Vec<(&str, &MockProvider, Value)> = quotas
            .iter()
            .zip(&mocks)
            .map(|((name, q), m)| (*name, m, rpm(*q)))
            .collect();
        let cfg = config(
            &members,
            json!({ "chat": { "chain": [ {"pool": [
                {"model": "oa1/gpt-4o"}, {"model": "oa2/gpt-4o", "weight": 2}, {"model": "oa3/gpt-4o", "weight": 3}
            ]} ], "retry": { "maxAttempts": 1 } } }),
            json!({}),
        );
        let llm = client(cfg);

        // 16 requests at once: no deployment could take them (8 at most
        // a minute), the pool's 3 + 5 + 8 can.
        let answers = join_all((0..16).map(|i| llm.complete("chat", request(&format!("question {i}"))))).await;
        let mut by_member: BTreeMap<String, u64> = BTreeMap::new();
        for a in answers {
            let a = a.expect("every request of the window is answered");
            assert_eq!(a.degradation, Degradation::Primary);
            assert_eq!(a.attempts, 1, "admitted before the call: no 429, no retry");
            *by_member.entry(a.model.expect("a model answered")).or_default() += 1;
        }
        for ((name, q), m) in quotas.iter().zip(&mocks) {
            let (served, refused) = served_and_refused(m);
            assert_eq!(refused, 0, "{name}: never asked beyond its quota in any window");
            assert!(served <= *q, "{name}: {served} served, quota {q}");
            assert_eq!(
                by_member.get(&format!("{name}/{MODEL}")).copied().unwrap_or(0),
                served,
                "{name}: the answers name the deployment that served them"
            );
        }
        assert_eq!(by_member.values().sum::<u64>(), 16);
        // Every member served its whole quota: none idle while others were full.
        assert_eq!(by_member.values().copied().collect::<Vec<_>>(), vec![3, 5, 8]);

        // A 17th request of the window: every member is full for the rest of
        // the minute, past the deadline, so none is asked (the pool does
        // not take more than the members' quotas together).
        let err = llm
            .complete("chat", request("one too many"))
            .await
            .expect_err("no member has room in this window");
        assert!(matches!(err, LlmError::NoCapacity { .. }), "{err:?}");
        assert!(err.retry_after().is_some(), "it says when to ask again: {err:?}");
        for ((name, _), m) in quotas.iter().zip(&mocks) {
            assert_eq!(served_and_refused(m).1, 0, "{name}: still never beyond its quota");
        }
        assert_eq!(mocks.iter().map(|m| m.stats().requests).sum::<u64>(), 16);

        // Each deployment is its own resource, counted as the model it is.
        let stats = llm.broker().stats().await;
        for (name, q) in quotas {
            let id = format!("llm:{name}:{MODEL}");
            let s = stats.iter().find(|s| s.resource == id).expect("a resource per member");
            assert_eq!(s.allowed, q, "{id}: its own grants only");
        }
        for m in mocks {
            m.shutdown().await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_transient_failure_moves_to_another_member_before_the_next_level() {
    bounded(async {
        let busy = mock(overloaded()).await;
        let spare = mock(quota(100)).await;
        let backup = mock(quota(100)).await;
        let cfg = config(
            &[
                ("busy", &busy, Value::Null),
                ("spare", &spare, Value::Null),
                ("backup", &backup, Value::Null),
            ],
            json!({ "chat": { "chain": [
                {"pool": [ {"model": "busy/gpt-4o", "weight": 1000}, {"model": "spare/gpt-4o"} ]},
                {"model": "backup/gpt-4o"}
            ], "retry": { "maxAttempts": 1 } } }),
            json!({}),
        );
        let llm = client(cfg);

        let a = llm.complete("chat", request("hello")).await.expect("answered");
        assert_eq!(
            a.model.as_deref(),
            Some("spare/gpt-4o"),
            "the other member served"
        );
        assert_eq!(
            a.degradation,
            Degradation::Primary,
            "by the pool level, not the backup"
        );
        assert_eq!(a.level, 0);
        assert_eq!(
            a.attempts, 2,
            "the busy member first (its weight), then the spare"
        );
        assert_eq!(
            busy.stats().requests,
            1,
            "the 503 was not retried on the same member"
        );
        assert_eq!(spare.stats().requests, 1);
        assert_eq!(backup.stats().requests, 0, "the chain's next level was not asked");

        // Both members failing: the chain's next level answers.
        spare
            .set_behaviour(Behaviour::single(storm()))
            .expect("behaviour");
        let a = llm
            .complete("chat", request("hello again"))
            .await
            .expect("answered");
        assert_eq!(a.model.as_deref(), Some("backup/gpt-4o"));
        assert_eq!(a.degradation, Degradation::Backup(1));
        assert_eq!(busy.stats().requests, 2);
        assert_eq!(
            spare.stats().requests,
            2,
            "each member tried once before the backup"
        );
        for m in [busy, spare, backup] {
            m.shutdown().await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_member_whose_breaker_is_open_is_skipped() {
    bounded(async {
        let broken = mock(storm()).await;
        let healthy = mock(quota(100)).await;
        let cfg = config(
            &[
                ("broken", &broken, Value::Null),
                ("healthy", &healthy, Value::Null),
            ],
            json!({
                "direct": { "chain": [ {"model": "broken/gpt-4o"} ], "retry": { "maxAttempts": 1 } },
                "chat": { "chain": [ {"pool": [
                    {"model": "broken/gpt-4o", "weight": 1000}, {"model": "healthy/gpt-4o"}
                ]} ], "retry": { "maxAttempts": 1 } }
            }),
            json!({ "minimumCalls": 2, "failureRateThreshold": 0.5, "openWaitMs": 600000 }),
        );
        let llm = client(cfg);
        // Two failures through the member's own model open its breaker.
        for _ in 0..2 {
            assert!(llm.complete("direct", request("x")).await.is_err());
        }
        let breaker = llm.breakers().get("broken", MODEL);
        assert_eq!(breaker.state(), State::Open, "{:?}", breaker.snapshot());
        // The deployment recovers, but its breaker is still open: the pool
        // does not call it, even though its weight puts it first.
        broken
            .set_behaviour(Behaviour::single(quota(100)))
            .expect("behaviour");
        broken.reset();
        for i in 0..4 {
            let a = llm
                .complete("chat", request(&format!("q{i}")))
                .await
                .expect("answered");
            assert_eq!(a.model.as_deref(), Some("healthy/gpt-4o"));
            assert_eq!(a.attempts, 1, "no attempt on the open member");
        }
        assert_eq!(broken.stats().requests, 0, "the open member got no call");
        assert_eq!(healthy.stats().requests, 4);
        for m in [broken, healthy] {
            m.shutdown().await;
        }
    })
    .await;
}

#[tokio::test]
async fn requests_waiting_on_a_full_pool_spread_over_the_members_as_they_free() {
    bounded(async {
        // One request a second per deployment at the gateway; the mocks
        // refuse a second one within 900 ms (a margin for the network).
        let second = |name: &str| {
            let mut phase = Phase::normal(name);
            phase.rate_limit = Some(RateLimit {
                requests: 1,
                tokens: 0,
                window_ms: 900,
            });
            phase
        };
        let a = mock(second("a")).await;
        let b = mock(second("b")).await;
        let per_second = json!({ "requestsPerSecond": 1 });
        let cfg = config(
            &[("a", &a, per_second.clone()), ("b", &b, per_second)],
            json!({ "chat": { "chain": [ {"pool": [ {"model": "a/gpt-4o"}, {"model": "b/gpt-4o"} ]} ],
                              "retry": { "maxAttempts": 1 } } }),
            json!({}),
        );
        let llm = client(cfg);

        // Four at once: two are admitted now, two wait — and each of those
        // takes the member that frees, not both the same one.
        let answers = join_all((0..4).map(|i| llm.complete("chat", request(&format!("q{i}"))))).await;
        for a in answers {
            let a = a.expect("answered within the deadline");
            assert_eq!(a.attempts, 1, "admitted before the call");
        }
        for (name, m) in [("a", &a), ("b", &b)] {
            assert_eq!(served_and_refused(m), (2, 0), "{name}: two calls, a second apart");
        }
        for m in [a, b] {
            m.shutdown().await;
        }
    })
    .await;
}
