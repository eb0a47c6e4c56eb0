//! Money: a tenant's spent daily budget refuses the next call in each
//! dialect (without a provider call), the tenant's spend equals the mock's
//! bill for the same traffic (prompt-cache classes included), and a stream
//! the client abandons releases its permit and settles its reservation.

use super::support::{bounded, next_chunk, Reply, TestGateway};
use super::*;
use pressure_mock::{Latency, MockProvider, Phase};
use std::time::Duration;

/// The tenant's spend so far, in micro-dollars.
async fn spent(gw: &TestGateway) -> u64 {
    let s = gw.stats(TENANT).await;
    s.usage.get("costMicroUsdPerDay").copied().unwrap_or(0)
}

/// Providers `anth`, `oai`, `resp` on `mock` (models `claude-m`, `gpt-m`,
/// `resp-m`); `claude-sonnet-*` → claude-m, `claude-haiku-*` → gpt-m,
/// `gpt-5-codex` → resp-m, `gpt-5-mini` → gpt-m; `anth/claude-m` limited by
/// `claude_limits` when given.
async fn gateway_on(mock: &MockProvider, tenant_limits: Value, claude_limits: Option<Value>) -> TestGateway {
    let providers = json!({
        "anth": provider("anthropic", &mock.base_url()),
        "oai": provider("openai", &mock.base_url()),
        "resp": provider("openai-responses", &mock.base_url())
    });
    let mut claude = model("anth", "claude-m");
    if let Some(limits) = claude_limits {
        claude["limits"] = limits;
    }
    let models = vec![claude, model("oai", "gpt-m"), model("resp", "resp-m")];
    let use_cases = json!({
        "claude": use_case(&["anth/claude-m"], &["claude-sonnet-*"]),
        "haiku": use_case(&["oai/gpt-m"], &["claude-haiku-*"]),
        "codex": use_case(&["resp/resp-m"], &["gpt-5-codex"]),
        "mini": use_case(&["oai/gpt-m"], &["gpt-5-mini"])
    });
    TestGateway::start(section(providers, models, use_cases, tenant_limits)).await
}

/// `Retry-After` in whole seconds, at least 1.
fn retry_after(r: &Reply) -> u64 {
    let secs: u64 = r
        .header("retry-after")
        .unwrap_or_else(|| panic!("Retry-After: {:?}", r.headers))
        .parse()
        .expect("seconds");
    assert!((1..=86_400).contains(&secs), "Retry-After {secs}");
    secs
}

#[tokio::test]
async fn a_spent_budget_is_refused_in_each_dialect_without_a_provider_call() {
    bounded(async {
        let mock = mock().await;
        // About one call's worth: 10 prompt tokens × 3 µ$ + 16 × 15 µ$.
        let gw = gateway_on(&mock, json!({ "costMicroUsdPerDay": 400 }), None).await;
        let body = json!({ "model": "claude-sonnet-4-5", "max_tokens": 16,
                           "messages": [ { "role": "user", "content": "Say hello." } ] });
        let mut admitted = 0u64;
        let refusal = loop {
            let r = messages(&gw, &body).await;
            if r.status != 200 {
                break r;
            }
            admitted += 1;
            assert!(admitted < 6, "a budget of 400 µ$ admitted {admitted} calls");
        };
        assert!(
            admitted >= 1,
            "the first call fits the budget: {:?}",
            refusal.body
        );
        assert_eq!(refusal.status, 429, "{:?}", refusal.body);
        let e = refusal.json();
        assert_eq!(e["type"], "error", "{e}");
        assert_eq!(e["error"]["type"], "rate_limit_error", "{e}");
        retry_after(&refusal);
        assert_eq!(
            refusal.header("x-should-retry"),
            Some("false"),
            "{:?}",
            refusal.headers
        );
        assert_eq!(
            mock_calls(&mock),
            admitted,
            "the refused call reached no provider"
        );

        let r = responses(
            &gw,
            &json!({ "model": "gpt-5-codex", "input": "Say hello.", "max_output_tokens": 16 }),
        )
        .await;
        assert_eq!(r.status, 429, "{:?}", r.body);
        let e = r.json();
        assert_eq!(e["error"]["code"], "insufficient_quota", "{e}");
        assert!(e["error"]["message"].as_str().is_some(), "{e}");
        retry_after(&r);
        assert_eq!(r.header("x-should-retry"), Some("false"), "{:?}", r.headers);
        assert_eq!(
            mock_calls(&mock),
            admitted,
            "the refused call reached no provider"
        );
        gw.stop().await;
        mock.shutdown().await;
    })
    .await;
}

/// Polls until the tenant's spend equals `billed` (reconciliation may
/// finish on a task of its own), for at most 5 s; returns the last spend.
async fn settle_to(gw: &TestGateway, billed: u64) -> u64 {
    for _ in 0..250 {
        let s = spent(gw).await;
        if s == billed {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    spent(gw).await
}

#[tokio::test]
async fn the_tenants_spend_is_the_providers_bill() {
    bounded(async {
        let mock = mock().await;
        let gw = gateway_on(&mock, roomy(), None).await;
        // A system prompt Anthropic caches (written once, then read).
        let manual = "Pressure admits traffic under exact limits and budgets. ".repeat(200);
        let cached = json!({
            "model": "claude-sonnet-4-5", "max_tokens": 64,
            "system": [ { "type": "text", "text": manual, "cache_control": { "type": "ephemeral" } } ],
            "messages": [ { "role": "user", "content": "Summarise the manual." } ]
        });
        for stream in [false, true] {
            let mut body = cached.clone();
            body["stream"] = json!(stream);
            let r = messages(&gw, &body).await;
            assert_eq!(r.status, 200, "{:?}", r.body);
        }
        let translated = json!({ "model": "claude-haiku-4-5", "max_tokens": 64, "stream": true,
                                 "messages": [ { "role": "user", "content": "Say hello." } ] });
        assert_eq!(messages(&gw, &translated).await.status, 200);
        // A prompt over 1024 tokens: OpenAI caches it automatically.
        let long = json!({ "model": "gpt-5-codex", "instructions": manual, "input": "Summarise.",
                           "max_output_tokens": 64 });
        for stream in [false, true] {
            let mut body = long.clone();
            body["stream"] = json!(stream);
            let r = responses(&gw, &body).await;
            assert_eq!(r.status, 200, "{:?}", r.body);
        }
        let mini = json!({ "model": "gpt-5-mini", "input": "Say hello.", "max_output_tokens": 64 });
        assert_eq!(responses(&gw, &mini).await.status, 200);

        let stats = mock.stats();
        assert_eq!(stats.requests, 6, "{stats:?}");
        assert!(
            stats.billed_cache_write_input_tokens > 0,
            "a cache write was billed: {stats:?}"
        );
        assert!(
            stats.billed_cache_read_input_tokens > 0,
            "a cache read was billed: {stats:?}"
        );
        let billed = stats.billed_micro_usd;
        assert!(billed > 0);
        let spend = settle_to(&gw, billed).await;
        assert_eq!(
            spend, billed,
            "the tenant's spend is the provider's bill: {stats:?}"
        );
        gw.stop().await;
        mock.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_stream_the_client_abandons_releases_its_permit_and_settles() {
    bounded(async {
        const MODEL: &str = "llm:anth:claude-m";
        const MAX_TOKENS: u64 = 2_000;
        // Three seconds of stream: the client leaves long before its end.
        let mut phase = Phase::normal("slow");
        phase.latency = Latency::uniform(3_000, 3_000);
        let mock = mock_with(phase).await;
        let limits = json!({ "maxConcurrentRequests": 4, "tokensPerMinute": 1_000_000 });
        let gw = gateway_on(&mock, roomy(), Some(limits)).await;
        let body = json!({ "model": "claude-sonnet-4-5", "max_tokens": MAX_TOKENS, "stream": true,
                           "messages": [ { "role": "user", "content": "Tell a long story." } ] });
        let req = http::Request::post(gw.url("/v1/messages"))
            .header(http::header::CONTENT_TYPE, "application/json")
            .header("x-api-key", TENANT_KEY)
            .header("anthropic-version", "2023-06-01")
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("request");
        let mut resp = gw.send(req).await;
        assert_eq!(resp.status(), 200);
        let mut head = Vec::new();
        while !String::from_utf8_lossy(&head).contains("\n\n") {
            let chunk = next_chunk(&mut resp).await.expect("a first event");
            head.extend_from_slice(&chunk);
        }
        assert!(
            String::from_utf8_lossy(&head).starts_with("event: message_start"),
            "{head:?}"
        );
        let held = gw.stats(MODEL).await;
        assert_eq!(held.active, Some(1), "the stream holds its permit: {held:?}");
        let reserved = spent(&gw).await;
        assert!(
            reserved >= MAX_TOKENS * OUTPUT_PER_1M / 1_000_000,
            "the reservation covers max_tokens: {reserved}"
        );
        drop(resp);

        // The gateway reads the provider's answer on for the gone client
        // (the provider bills all of it), holding the permit meanwhile.
        gw.await_idle(MODEL, Duration::from_secs(10)).await;
        let stats = mock.stats();
        assert_eq!(stats.in_flight, 0, "{stats:?}");
        assert!(stats.billed_output_tokens > 0, "{stats:?}");
        assert_eq!(stats.requests, 1);
        let billed = stats.billed_micro_usd;
        // Settled to exactly what the provider billed: not the reservation,
        // not only what the client had read.
        let mut settled = spent(&gw).await;
        for _ in 0..250 {
            if settled == billed {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            settled = spent(&gw).await;
        }
        assert!(
            settled < reserved,
            "settled {settled} below the reservation {reserved}"
        );
        assert_eq!(settled, billed, "the tenant pays the provider's bill");
        gw.stop().await;
        mock.shutdown().await;
    })
    .await;
}
