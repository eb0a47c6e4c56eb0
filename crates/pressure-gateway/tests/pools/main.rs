//! Deployment pools across a fleet (docs/llm.md#deployment-pools): two
//! gateways on one store (memory: one gateway) in front of three mock
//! deployments of one model, each with a quota of its own (3, 5 and 8
//! requests a minute, enforced by the mock, and the same limits on each
//! member in the gateway). 16 concurrent chat calls — more than any one
//! deployment takes — are all answered, no deployment is ever asked beyond
//! its quota (the mock counts: no 429), each answer names the member that
//! served it in `x-pressure-deployment`, and the members' counts are the
//! fleet's, not one gateway's.

use super::nested::Store;
use super::support;

use bytes::Bytes;
use futures::future::join_all;
use http_body_util::Full;
use pressure_mock::{Behaviour, MockConfig, MockProvider, Outcome, Phase, RateLimit};
use pressure_testkit::{RedisCluster, RedisServer};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;
use support::{Reply, TestGateway};

/// A mock deployment serving at most `requests` a minute (429 beyond).
async fn deployment(requests: u64) -> MockProvider {
    let mut phase = Phase::normal("quota");
    phase.rate_limit = Some(RateLimit {
        requests,
        tokens: 0,
        window_ms: 60_000,
    });
    let config = MockConfig {
        behaviour: Behaviour::single(phase),
        seed: Some(5),
        ..MockConfig::default()
    };
    MockProvider::start("127.0.0.1:0".parse().expect("addr"), config)
        .await
        .expect("mock provider starts")
}

/// A gateway on `store` whose use case `chat` is one pool of `members`
/// (name, mock, quota).
async fn gateway(store: &Store, members: &[(&str, &MockProvider, u64)]) -> TestGateway {
    let providers: serde_json::Map<String, serde_json::Value> = members
        .iter()
        .map(|(name, m, _)| ((*name).to_owned(), json!({ "baseUrl": m.base_url() })))
        .collect();
    let models: Vec<serde_json::Value> = members
        .iter()
        .map(|(name, _, q)| {
            json!({
                "provider": name, "model": "m", "limits": { "requestsPerMinute": q },
                "context": { "contextTokens": 4096, "maxOutputTokens": 256 },
                "price": { "inputMicroUsdPer1M": 1, "outputMicroUsdPer1M": 1 }
            })
        })
        .collect();
    let pool: Vec<serde_json::Value> = members
        .iter()
        .map(|(name, _, _)| json!({ "model": format!("{name}/m") }))
        .collect();
    TestGateway::start(json!({
        "upstreams": { "none": { "url": "http://127.0.0.1:9", "pathPrefix": "/api" } },
        "backend": store.backend("pools"),
        "llm": {
            "providers": providers,
            "models": models,
            "useCases": { "chat": { "chain": [{ "pool": pool }], "retry": { "maxAttempts": 1 } } }
        }
    }))
    .await
}

async fn chat(gw: &TestGateway, i: usize) -> Reply {
    let body = json!({
        "model": "chat", "max_tokens": 16,
        "messages": [{ "role": "user", "content": format!("question {i}") }]
    });
    let req = http::Request::post(gw.url("/v1/chat/completions"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("request");
    Reply::read(gw.send(req).await).await
}

async fn a_pool_serves_what_no_member_could(store: Store) {
    let quotas = [("oa1", 3u64), ("oa2", 5), ("oa3", 8)];
    let mocks = [deployment(3).await, deployment(5).await, deployment(8).await];
    let members: Vec<(&str, &MockProvider, u64)> =
        quotas.iter().zip(&mocks).map(|((n, q), m)| (*n, m, *q)).collect();
    let a = gateway(&store, &members).await;
    let b = if store.shared() {
        Some(gateway(&store, &members).await)
    } else {
        None
    };
    let replies = join_all((0..16).map(|i| match (&b, i % 2) {
        (Some(b), 1) => chat(b, i),
        _ => chat(&a, i),
    }))
    .await;
    let mut by_member: BTreeMap<String, u64> = BTreeMap::new();
    for r in &replies {
        assert_eq!(r.status, 200, "{:?}", r.body);
        let member = r
            .header("x-pressure-deployment")
            .expect("x-pressure-deployment")
            .to_owned();
        *by_member.entry(member).or_default() += 1;
    }
    for ((name, q), m) in quotas.iter().zip(&mocks) {
        let stats = m.stats();
        let of = |o: Outcome| stats.by_outcome.get(&o).copied().unwrap_or(0);
        assert_eq!(
            of(Outcome::RateLimited),
            0,
            "{name}: never asked beyond its quota"
        );
        assert!(
            of(Outcome::Ok) <= *q,
            "{name}: {} served, quota {q}",
            of(Outcome::Ok)
        );
        assert_eq!(
            by_member.get(&format!("{name}/m")).copied().unwrap_or(0),
            of(Outcome::Ok),
            "{name}: the header names the deployment that served"
        );
    }
    assert_eq!(by_member.values().sum::<u64>(), 16, "{by_member:?}");
    // A 17th call of the window: every member is full, none is asked.
    let r = chat(b.as_ref().unwrap_or(&a), 17).await;
    assert_eq!(r.status, 429, "{:?}", r.body);
    assert_eq!(mocks.iter().map(|m| m.stats().requests).sum::<u64>(), 16);
    if let Some(b) = b {
        b.stop().await;
    }
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_serves_what_no_member_could_in_memory() {
    tokio::time::timeout(
        Duration::from_secs(60),
        a_pool_serves_what_no_member_could(Store::Memory),
    )
    .await
    .expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_serves_what_no_member_could_on_redis() {
    let store = Store::Redis(RedisServer::start());
    tokio::time::timeout(Duration::from_secs(60), a_pool_serves_what_no_member_could(store))
        .await
        .expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_serves_what_no_member_could_on_a_cluster() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .expect("cluster");
    tokio::time::timeout(
        Duration::from_secs(90),
        a_pool_serves_what_no_member_could(Store::Cluster(cluster)),
    )
    .await
    .expect("bounded");
}
