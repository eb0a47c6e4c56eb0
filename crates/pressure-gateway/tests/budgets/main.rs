//! A tenant's budget spent by LLM calls and HTTP traffic alike, fleet-wide
//! (docs/architecture.md#budgets-one-tenant-quota-across-both-flows): two gateways on one Redis, the mock provider billing every
//! call, and a tenant whose daily money budget is small.
//!
//! * 64 concurrent chat calls through both gateways: what the mock billed
//!   never exceeds the budget by more than the estimate error of the calls
//!   admitted, no call is refused while the budget had room for it, the
//!   store's spend is what the mock billed, and every refusal is a `429
//!   budget_exceeded` an OpenAI SDK will not retry.
//! * A budget raised live on one gateway (`PUT
//!   /admin/pressure/tenants/{id}/limits`) admits on the other at once.
//! * HTTP requests and chat calls spend one `requestsPerDay`.
//!
//! Each test starts its own `redis-server` (`pressure-testkit`) and mock
//! provider on free loopback ports.

use super::support;

use bytes::Bytes;
use futures::future::join_all;
use http_body_util::Full;
use pressure_mock::{MockConfig, MockProvider, Price};
use pressure_testkit::RedisServer;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use support::{hs256_auth, token, Reply, TestGateway, TestUpstream};

/// Micro-dollars per million tokens, in and out: one micro-dollar a token.
const PER_1M: u64 = 1_000_000;
/// The completion cap of every call.
const MAX_TOKENS: u64 = 40;
/// The prompt of every call.
const PROMPT: &str = "Summarise the budget rules of pressure in one line.";

/// The mock provider, billing model `m` at [`PER_1M`].
async fn provider() -> MockProvider {
    let config = MockConfig {
        prices: BTreeMap::from([("m".to_owned(), Price::new(PER_1M, PER_1M))]),
        seed: Some(7),
        ..MockConfig::default()
    };
    MockProvider::start("127.0.0.1:0".parse().expect("addr"), config)
        .await
        .expect("mock provider starts")
}

/// A gateway on `redis` with the LLM endpoint on `mock` (use case `chat`:
/// model `m` alone, no retries) and tenants limited by `tenant_limits`.
async fn gateway(
    redis: &RedisServer,
    mock: &MockProvider,
    up: &TestUpstream,
    tenant_limits: Value,
) -> TestGateway {
    TestGateway::start(json!({
        "upstreams": { "demo": { "url": up.url(), "pathPrefix": "/api" } },
        "backend": { "type": "redis", "url": redis.url(), "timeoutMs": 2000, "keyPrefix": "budgets" },
        "auth": hs256_auth(),
        "pressure": { "perTenant": { "enabled": true, "limits": tenant_limits } },
        "llm": {
            "providers": { "mock": { "baseUrl": mock.base_url() } },
            "models": [{
                "provider": "mock", "model": "m",
                "context": { "contextTokens": 4096, "maxOutputTokens": 256 },
                "price": { "inputMicroUsdPer1M": PER_1M, "outputMicroUsdPer1M": PER_1M }
            }],
            "useCases": { "chat": { "chain": [{ "model": "mock/m" }], "retry": { "maxAttempts": 1 } } }
        }
    }))
    .await
}

/// One chat call of `tenant` through `gw`.
async fn chat(gw: &TestGateway, tenant: &str) -> Reply {
    let body = json!({
        "model": "chat", "max_tokens": MAX_TOKENS,
        "messages": [{ "role": "user", "content": PROMPT }]
    });
    let req = http::Request::post(gw.url("/v1/chat/completions"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::AUTHORIZATION, format!("Bearer {}", token(tenant)))
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("request");
    Reply::read(gw.send(req).await).await
}

/// One `GET /api/hello` of `tenant` through `gw`.
async fn http_get(gw: &TestGateway, tenant: &str) -> Reply {
    let req = http::Request::get(gw.url("/api/hello"))
        .header(http::header::AUTHORIZATION, format!("Bearer {}", token(tenant)))
        .body(Full::new(Bytes::new()))
        .expect("request");
    Reply::read(gw.send(req).await).await
}

/// What the gateway reserves for one call: the prompt as its tokenizer
/// counts it, plus `max_tokens`, at one micro-dollar a token.
fn estimate() -> u64 {
    let counter = pressure_llm::tokens::TokenCounter::new();
    let prompt = counter
        .count_chat("m", &[("user".to_owned(), PROMPT.to_owned())])
        .expect("count");
    prompt + MAX_TOKENS
}

/// Checks a refusal: `429 budget_exceeded` on the daily money budget, with
/// the spend and the budget, a `Retry-After` no later than the next UTC
/// midnight, and `x-should-retry: false` (the reset is past the deadline).
fn assert_budget_refusal(r: &Reply, budget: u64) {
    assert_eq!(r.status, 429, "{:?}", r.body);
    let e = &r.json()["error"];
    assert_eq!(e["code"], "budget_exceeded", "{e}");
    assert_eq!(e["param"], "costMicroUsdPerDay", "{e}");
    let message = e["message"].as_str().expect("message");
    assert!(message.contains(&format!("budget of {budget}")), "{message}");
    let retry: u64 = r
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!((1..=86_400).contains(&retry), "Retry-After {retry}");
    assert_eq!(r.header("x-should-retry"), Some("false"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daily_money_budget_holds_across_two_gateways_within_the_estimate_error() {
    const CALLS: usize = 64;
    let est = estimate();
    // Room for about a dozen calls' estimates.
    let budget = 12 * est + est / 2;
    tokio::time::timeout(Duration::from_secs(60), async {
        let redis = RedisServer::start();
        let mock = provider().await;
        let up = TestUpstream::demo().await;
        let limits = json!({ "costMicroUsdPerDay": budget });
        let a = gateway(&redis, &mock, &up, limits.clone()).await;
        let b = gateway(&redis, &mock, &up, limits).await;

        let replies = join_all((0..CALLS).map(|i| {
            let gw = if i % 2 == 0 { &a } else { &b };
            chat(gw, "acme")
        }))
        .await;
        let admitted = replies.iter().filter(|r| r.status == 200).count() as u64;
        for r in replies.iter().filter(|r| r.status != 200) {
            assert_budget_refusal(r, budget);
        }
        let stats = mock.stats();
        assert_eq!(stats.requests, admitted, "every admitted call reached the provider once, no other did");
        let billed = stats.billed_micro_usd;
        // The estimate error of a call: what it billed beyond its estimate.
        let per_call = billed.div_ceil(admitted.max(1));
        let error = admitted * per_call.saturating_sub(est);
        eprintln!(
            "budget {budget} µ$, estimate {est} µ$ a call: {admitted} of {CALLS} admitted, billed {billed} µ$ \
             (bound {})",
            budget + error
        );
        assert!(
            billed <= budget + error,
            "billed {billed} µ$ for {admitted} calls; budget {budget} + estimate error {error}"
        );
        // A call is refused only when the spend reserved then plus its own
        // estimate is over the budget: the reserved spend never exceeds
        // the admitted calls' estimates, so they must fill the budget to
        // within one estimate.
        assert!(
            admitted * est + est > budget,
            "{admitted} calls of {est} µ$ admitted under a budget of {budget}: a call was refused with room left"
        );
        assert!(admitted < CALLS as u64, "the budget refused nothing");
        // The store counts what the provider billed (reconciled to each
        // answer's usage), seen alike by both gateways.
        for gw in [&a, &b] {
            let s = gw.stats("gateway:tenant:acme").await;
            assert_eq!(s.usage.get("costMicroUsdPerDay").copied(), Some(billed), "{s:?}");
        }
        // Spend against budget on the operator's pages, from the store.
        let summary = b.admin_get("/admin/pressure/summary").await.json();
        let row = &summary["tenants"]["top"][0]["budgets"][0];
        assert_eq!(
            (row["dimension"].as_str(), row["spent"].as_u64(), row["budget"].as_u64()),
            (Some("costMicroUsdPerDay"), Some(billed), Some(budget)),
            "{summary}"
        );
        assert!(row["resetsAt"].as_u64().is_some(), "{row}");
        let metrics = String::from_utf8(b.admin_get("/metrics").await.body.to_vec()).expect("utf-8");
        let line = format!("pressure_tenant_spend_micro_usd{{tenant=\"acme\",dimension=\"costMicroUsdPerDay\"}} {billed}");
        assert!(metrics.lines().any(|l| l == line), "{line} missing");
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("bounded");
}

/// `PUT /admin/pressure/tenants/{tenant}/limits` with `limits` on `gw`'s
/// admin listener.
async fn put_limits(gw: &TestGateway, tenant: &str, limits: Value) -> Reply {
    let req = http::Request::put(format!(
        "http://{}/admin/pressure/tenants/{tenant}/limits",
        gw.admin
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(Full::new(Bytes::from(limits.to_string())))
    .expect("request");
    Reply::read(gw.send(req).await).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_raised_live_on_one_gateway_admits_at_once_on_the_other() {
    let est = estimate();
    tokio::time::timeout(Duration::from_secs(60), async {
        let redis = RedisServer::start();
        let mock = provider().await;
        let up = TestUpstream::demo().await;
        // Room for two calls a day.
        let limits = json!({ "costMicroUsdPerDay": 2 * est });
        let a = gateway(&redis, &mock, &up, limits.clone()).await;
        let b = gateway(&redis, &mock, &up, limits).await;
        for _ in 0..2 {
            assert_eq!(chat(&a, "delta").await.status, 200);
        }
        assert_budget_refusal(&chat(&a, "delta").await, 2 * est);
        // Raised on B: A admits the next call, after at most one pub/sub
        // delivery (bounded here at 2 s).
        let put = put_limits(&b, "delta", json!({ "costMicroUsdPerDay": 10 * est })).await;
        assert_eq!(put.status, 200, "{:?}", put.body);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        let mut last = chat(&a, "delta").await;
        while last.status != 200 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            last = chat(&a, "delta").await;
        }
        assert_eq!(last.status, 200, "gateway A still refuses: {:?}", last.body);
        // The spend carried over: the raised budget counts from what was
        // spent before it.
        let s = a.stats("gateway:tenant:delta").await;
        assert_eq!(
            s.usage.get("costMicroUsdPerDay").copied(),
            Some(mock.stats().billed_micro_usd)
        );
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_requests_and_chat_calls_spend_one_daily_request_budget() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let redis = RedisServer::start();
        let mock = provider().await;
        let up = TestUpstream::demo().await;
        let gw = gateway(
            &redis,
            &mock,
            &up,
            json!({ "requestsPerDay": 3, "costMicroUsdPerDay": 1_000_000 }),
        )
        .await;
        assert_eq!(http_get(&gw, "beta").await.status, 200);
        assert_eq!(chat(&gw, "beta").await.status, 200);
        assert_eq!(http_get(&gw, "beta").await.status, 200);
        // The fourth request of the day, whichever kind, is over budget.
        let over = http_get(&gw, "beta").await;
        assert_eq!(over.status, 429);
        let e = &over.json()["error"];
        assert_eq!(e["type"], "budget_exceeded", "{e}");
        assert_eq!(e["dimension"], "requestsPerDay", "{e}");
        assert_eq!(
            (e["spent"].as_u64(), e["budget"].as_u64()),
            (Some(3), Some(3)),
            "{e}"
        );
        let over_chat = chat(&gw, "beta").await;
        assert_eq!(over_chat.status, 429);
        let e = &over_chat.json()["error"];
        assert_eq!(
            (e["code"].as_str(), e["param"].as_str()),
            (Some("budget_exceeded"), Some("requestsPerDay")),
            "{e}"
        );
        assert_eq!(over_chat.header("x-should-retry"), Some("false"));
        assert_eq!(
            mock.stats().requests,
            1,
            "only the admitted chat call reached the provider"
        );
        // Another tenant has a budget of its own.
        assert_eq!(http_get(&gw, "gamma").await.status, 200);
        gw.stop().await;
    })
    .await
    .expect("bounded");
}
