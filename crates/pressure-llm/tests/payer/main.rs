//! An event's payer (a tenant's resource): charged every attempt's tokens
//! and money beside the model, reconciled to what the provider billed,
//! refunded when the attempt does not go out, and a refusal that sends the
//! chain to the levels that cost nothing — against a mock OpenAI-compatible
//! server on 127.0.0.1.

#![allow(clippy::unwrap_used)]

use super::support;
use std::time::Duration;

use pressure_core::{Dimension, Limits, MemoryBackend, ResourceHandle};
use pressure_llm::pipeline::{Answer, Caller, Degradation, LlmClient, LlmConfig, LlmError};
use pressure_llm::tokens::TokenCounter;
use serde_json::{json, Value};
use support::{bounded, client, fast_retry, model, request, Step, COMPLETION_TOKENS, PROMPT_TOKENS};

type Mock = support::ScriptedMock;

async fn mock(script: Vec<Step>) -> Mock {
    Mock::start(script, Step::Ok).await
}

/// One provider `p` with model `m` (1 µ$ per token either way) limited by
/// `model_limits`, and use cases `direct` (the model alone) and `degrading`
/// (the model, then keyword rules).
fn setup(p: &Mock, model_limits: Value) -> LlmClient<MemoryBackend> {
    let v = json!({
        "providers": {"p": {"baseUrl": p.url}},
        "models": [model("p", model_limits)],
        "rules": {"keyword": [{"keywords": ["Refund"], "answer": "See /refunds", "label": "refund"}]},
        "useCases": {
            "direct": {"chain": [{"model": "p/m"}], "retry": fast_retry(2)},
            "degrading": {"chain": [{"model": "p/m"}, {"rules": "keyword"}]},
        },
    });
    client(serde_json::from_value::<LlmConfig>(v).unwrap())
}

/// The tenant resource `tenant:<name>` with `limits`, on `c`'s broker.
fn payer(c: &LlmClient<MemoryBackend>, name: &str, limits: Limits) -> ResourceHandle<MemoryBackend> {
    let id = format!("tenant:{name}");
    c.broker().register_limit(id.clone(), limits).unwrap();
    c.broker().resource(&id).unwrap()
}

/// One event of `use_case` asking `text`, paid for by `payer`.
async fn paid(
    c: &LlmClient<MemoryBackend>,
    use_case: &str,
    text: &str,
    payer: &ResourceHandle<MemoryBackend>,
) -> Result<Answer, LlmError> {
    c.complete_as(use_case, request(text), Caller::new("e").paid_by(payer.clone()))
        .await
}

/// What `handle` counts on `dim` now.
async fn used(handle: &ResourceHandle<MemoryBackend>, dim: Dimension) -> u64 {
    let u = handle.usage().await.unwrap();
    u.dimensions
        .iter()
        .find(|(d, _)| *d == dim)
        .map_or(0, |(_, n)| *n)
}

/// The prompt tokens the client counts for `request(text)` (what it
/// reserves as input before a call).
fn counted_prompt(text: &str) -> u64 {
    let counter = TokenCounter::new();
    counter
        .count_chat("m", &[("user".to_owned(), text.to_owned())])
        .unwrap()
}

#[tokio::test]
async fn a_payer_is_charged_what_the_provider_billed_and_no_request() {
    bounded(async {
        let p = mock(vec![]).await;
        let c = setup(&p, json!({}));
        let t = payer(
            &c,
            "a",
            Limits::default()
                .tokens_per_minute(100_000)
                .requests_per_minute(10),
        );
        for _ in 0..3 {
            let a = paid(&c, "direct", "hello", &t).await.unwrap();
            assert_eq!(a.degradation, Degradation::Primary);
        }
        // Each attempt reserved its estimate (counted prompt + max_tokens
        // 100) and was reconciled to the usage the provider reported.
        assert_eq!(
            used(&t, Dimension::TokensPerMinute).await,
            3 * (PROMPT_TOKENS + COMPLETION_TOKENS)
        );
        assert_eq!(
            used(&t, Dimension::RequestsPerMinute).await,
            0,
            "the caller's request is counted where it came in, not per attempt"
        );
    })
    .await;
}

#[tokio::test]
async fn a_failed_attempt_is_charged_its_input_and_the_retry_its_own() {
    bounded(async {
        let p = mock(vec![Step::Status(500)]).await;
        let c = setup(&p, json!({}));
        let t = payer(&c, "b", Limits::default().tokens_per_minute(100_000));
        let a = paid(&c, "direct", "hello", &t).await.unwrap();
        assert_eq!(a.attempts, 2);
        // The 500 billed the prompt as counted (no output), the retry the
        // usage it reported.
        assert_eq!(
            used(&t, Dimension::TokensPerMinute).await,
            counted_prompt("hello") + PROMPT_TOKENS + COMPLETION_TOKENS
        );
        assert_eq!(
            a.spent.micro_usd(),
            counted_prompt("hello") + PROMPT_TOKENS + COMPLETION_TOKENS
        );
    })
    .await;
}

#[tokio::test]
async fn a_payer_that_refuses_sends_the_chain_to_the_levels_that_cost_nothing() {
    bounded(async {
        let p = mock(vec![]).await;
        let c = setup(&p, json!({}));
        // Room for the usage of one call, never for an estimate (prompt +
        // max_tokens 100) once that call is counted.
        let t = payer(&c, "c", Limits::default().tokens_per_minute(120));
        let first = paid(&c, "degrading", "Refund please", &t).await.unwrap();
        assert_eq!(first.degradation, Degradation::Primary);
        let second = paid(&c, "degrading", "Refund please", &t).await.unwrap();
        assert_eq!(second.degradation, Degradation::Rules, "{second:?}");
        assert_eq!(p.hits(), 1, "the refused level made no call");
        assert_eq!(
            used(&t, Dimension::TokensPerMinute).await,
            PROMPT_TOKENS + COMPLETION_TOKENS
        );
        assert_eq!(c.snapshot().budget_rejections, 1);
        // Without a level that costs nothing, the refusal is the answer:
        // the payer's resource and when it has room again.
        let e = paid(&c, "direct", "hello", &t).await.unwrap_err();
        match e {
            LlmError::NoCapacity {
                resource,
                retry_after,
            } => {
                assert_eq!(resource, "tenant:c");
                assert!(retry_after.is_some_and(|w| !w.is_zero()), "{retry_after:?}");
            }
            other => panic!("expected the payer's refusal, got {other:?}"),
        }
        // An event without a payer is not limited by one.
        let free = c.complete("direct", request("hello")).await.unwrap();
        assert_eq!(free.degradation, Degradation::Primary);
    })
    .await;
}

#[tokio::test]
async fn a_call_larger_than_a_whole_days_budget_is_a_spent_budget_not_a_rate_limit() {
    bounded(async {
        let p = mock(vec![]).await;
        let c = setup(&p, json!({}));
        // One micro-dollar a day: no estimate can ever fit.
        let t = payer(&c, "e", Limits::default().cost_micro_usd_per_day(1));
        let e = paid(&c, "direct", "hello", &t).await.unwrap_err();
        match &e {
            LlmError::BudgetExceeded {
                resource,
                dimension,
                budget,
                needed,
                retry_after,
                beyond_deadline,
                ..
            } => {
                assert_eq!(resource, "tenant:e");
                assert_eq!(*dimension, Dimension::CostMicroUsdPerDay);
                assert_eq!(*budget, 1);
                assert!(*needed > 1, "{needed}");
                assert!(!retry_after.is_zero() && *retry_after <= Duration::from_secs(86_400));
                assert!(*beyond_deadline);
            }
            other => panic!("expected a spent budget, got {other:?}"),
        }
        // What the agents' clients stop on: no retry, a 429.
        assert_eq!(e.should_retry(), Some(false));
        assert_eq!(e.describe().status, 429);
        assert_eq!(p.hits(), 0, "no call");
    })
    .await;
}

#[tokio::test]
async fn a_model_limiter_refusal_gives_the_payer_its_reservation_back() {
    bounded(async {
        let p = mock(vec![]).await;
        // The model admits one request a minute.
        let c = setup(&p, json!({"requestsPerMinute": 1}));
        let t = payer(&c, "d", Limits::default().tokens_per_minute(100_000));
        paid(&c, "degrading", "Refund please", &t).await.unwrap();
        let second = paid(&c, "degrading", "Refund please", &t).await.unwrap();
        assert_eq!(second.degradation, Degradation::Rules);
        assert_eq!(p.hits(), 1);
        assert_eq!(
            used(&t, Dimension::TokensPerMinute).await,
            PROMPT_TOKENS + COMPLETION_TOKENS,
            "the second event's estimate was given back when the model refused"
        );
    })
    .await;
}
