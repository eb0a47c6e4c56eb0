//! Nested budgets (docs/budgets.md#nested-budgets): a request is charged to
//! its tenant and every ancestor of the tenant, all or nothing, on memory,
//! Redis and Redis Cluster.
//!
//! * 64 concurrent chat calls of two users under two teams under one
//!   organisation, over two gateways on one store: no level's spend passes
//!   its budget by more than the estimate error of the calls admitted; the
//!   organisation (the tightest level) is filled to within one estimate
//!   before anyone is refused; every level's spend is its subtree's, and
//!   what the provider billed.
//! * A refusal names the level that refused; the levels under it keep
//!   nothing of the refused request.
//! * A parent set live on one gateway charges the tenant's next request to
//!   the parent on the other; a cycle, a chain deeper than
//!   `perTenant.maxDepth` and hostile ids and bodies are `400`s that store
//!   nothing.
//!
//! Each test starts its own stores and mock provider on loopback ports.

use super::support;

use bytes::Bytes;
use futures::future::join_all;
use http_body_util::Full;
use pressure_mock::{MockConfig, MockProvider, Price};
use pressure_testkit::{RedisCluster, RedisServer};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use support::{hs256_auth, token, Reply, TestGateway, TestUpstream};

/// Micro-dollars per million tokens, in and out: one micro-dollar a token.
const PER_1M: u64 = 1_000_000;
/// The completion cap of every call.
const MAX_TOKENS: u64 = 40;
/// The prompt of every call.
const PROMPT: &str = "Summarise the nested budget rules of pressure in one line.";

/// Where the gateways keep their counts (the pools suite uses it too).
pub(crate) enum Store {
    Memory,
    Redis(RedisServer),
    Cluster(RedisCluster),
}

impl Store {
    /// The `gateway.backend` section.
    pub(crate) fn backend(&self, prefix: &str) -> Value {
        match self {
            Store::Memory => json!({ "type": "memory" }),
            Store::Redis(r) => {
                json!({ "type": "redis", "url": r.url(), "timeoutMs": 2000, "keyPrefix": prefix })
            }
            Store::Cluster(c) => json!({
                "type": "redis", "clusterNodes": c.urls(), "timeoutMs": 2000, "keyPrefix": prefix
            }),
        }
    }

    /// Whether two gateways share it (memory is one process's).
    pub(crate) fn shared(&self) -> bool {
        !matches!(self, Store::Memory)
    }
}

async fn provider() -> MockProvider {
    let config = MockConfig {
        prices: BTreeMap::from([("m".to_owned(), Price::new(PER_1M, PER_1M))]),
        seed: Some(11),
        ..MockConfig::default()
    };
    MockProvider::start("127.0.0.1:0".parse().expect("addr"), config)
        .await
        .expect("mock provider starts")
}

/// A gateway on `store` with tenants under `per_tenant` and the LLM
/// endpoint on `mock`.
async fn gateway(store: &Store, mock: &MockProvider, up: &TestUpstream, per_tenant: Value) -> TestGateway {
    TestGateway::start(json!({
        "upstreams": { "demo": { "url": up.url(), "pathPrefix": "/api" } },
        "backend": store.backend("nested"),
        "auth": hs256_auth(),
        "pressure": { "perTenant": per_tenant },
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

async fn http_get(gw: &TestGateway, tenant: &str) -> Reply {
    let req = http::Request::get(gw.url("/api/hello"))
        .header(http::header::AUTHORIZATION, format!("Bearer {}", token(tenant)))
        .body(Full::new(Bytes::new()))
        .expect("request");
    Reply::read(gw.send(req).await).await
}

/// An admin call with a JSON body on `gw`.
async fn admin(gw: &TestGateway, method: http::Method, path: &str, body: &str) -> Reply {
    let req = http::Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", gw.admin))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("request");
    Reply::read(gw.send(req).await).await
}

/// What the gateway reserves for one call, at one micro-dollar a token.
fn estimate() -> u64 {
    let counter = pressure_llm::tokens::TokenCounter::new();
    let prompt = counter
        .count_chat("m", &[("user".to_owned(), PROMPT.to_owned())])
        .expect("count");
    prompt + MAX_TOKENS
}

/// The daily spend the store counts for `tenant`, as the admin API shows it.
async fn spent(gw: &TestGateway, tenant: &str) -> u64 {
    let doc = gw
        .admin_get(&format!("/admin/pressure/tenants/{tenant}/limits"))
        .await
        .json();
    doc["usage"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["dimension"] == "costMicroUsdPerDay"))
        .and_then(|r| r["used"].as_u64())
        .unwrap_or_else(|| panic!("no spend for {tenant}: {doc}"))
}

/// Users alice (team-a) and bob (team-b) under org: users 8 calls' worth
/// each, teams 10, the org 12 — the org binds first.
fn hierarchy(est: u64) -> Value {
    json!({
        "enabled": true,
        "limits": { "costMicroUsdPerDay": 1_000 * est },
        "overrides": {
            "org": { "costMicroUsdPerDay": 12 * est + est / 2 },
            "team-a": { "costMicroUsdPerDay": 10 * est, "parent": "org" },
            "team-b": { "costMicroUsdPerDay": 10 * est, "parent": "org" },
            "alice": { "costMicroUsdPerDay": 8 * est, "parent": "team-a" },
            "bob": { "costMicroUsdPerDay": 8 * est, "parent": "team-b" }
        }
    })
}

async fn three_levels_hold(store: Store) {
    const CALLS: usize = 64;
    let est = estimate();
    let org_budget = 12 * est + est / 2;
    let mock = provider().await;
    let up = TestUpstream::demo().await;
    let a = gateway(&store, &mock, &up, hierarchy(est)).await;
    let b = if store.shared() {
        Some(gateway(&store, &mock, &up, hierarchy(est)).await)
    } else {
        None
    };
    let replies = join_all((0..CALLS).map(|i| {
        let gw = match (&b, i % 4 < 2) {
            (Some(b), true) => b,
            _ => &a,
        };
        chat(gw, if i % 2 == 0 { "alice" } else { "bob" })
    }))
    .await;
    let admitted: u64 = replies
        .iter()
        .filter(|r| r.status == 200)
        .count()
        .try_into()
        .expect("count");
    for r in replies.iter().filter(|r| r.status != 200) {
        assert_eq!(r.status, 429, "{:?}", r.body);
        let e = &r.json()["error"];
        assert_eq!(e["code"], "budget_exceeded", "{e}");
        let message = e["message"].as_str().expect("message");
        assert!(
            [
                "gateway:tenant:org",
                "gateway:tenant:team-",
                "gateway:tenant:alice",
                "gateway:tenant:bob"
            ]
            .iter()
            .any(|level| message.contains(level)),
            "the refusal names its level: {message}"
        );
    }
    let billed = mock.stats().billed_micro_usd;
    assert_eq!(
        mock.stats().requests,
        admitted,
        "every admitted call reached the provider once"
    );
    let per_call = billed.div_ceil(admitted.max(1));
    let error = admitted * per_call.saturating_sub(est);
    // Every level counts its whole subtree, as the provider billed it.
    let (org, ta, tb, al, bo) = (
        spent(&a, "org").await,
        spent(&a, "team-a").await,
        spent(&a, "team-b").await,
        spent(&a, "alice").await,
        spent(&a, "bob").await,
    );
    eprintln!("est {est}: {admitted} of {CALLS} admitted, billed {billed}; org {org} teams {ta}/{tb} users {al}/{bo}");
    assert_eq!(org, billed, "the root counts everything");
    assert_eq!((ta, tb), (al, bo), "each team counts its one user");
    assert_eq!(al + bo, billed);
    for (level, spent, budget) in [
        ("org", org, org_budget),
        ("team-a", ta, 10 * est),
        ("team-b", tb, 10 * est),
        ("alice", al, 8 * est),
        ("bob", bo, 8 * est),
    ] {
        assert!(
            spent <= budget + error,
            "{level} spent {spent} over {budget} + error {error}"
        );
    }
    // Refused only once the org (the tightest level) was full to within
    // one estimate: the reserved spend never exceeds the admitted calls'
    // estimates.
    assert!(
        admitted * est + est > org_budget,
        "{admitted} calls of {est} admitted under an org budget of {org_budget}: a refusal with room left"
    );
    assert!(
        usize::try_from(admitted).is_ok_and(|a| a < CALLS),
        "the budgets refused nothing"
    );
    // The summary's tree (the dashboard draws it) and /metrics show each
    // level's spend.
    let summary = a.admin_get("/admin/pressure/summary").await.json();
    let nodes = summary["hierarchy"]["nodes"].as_array().expect("nodes").clone();
    let order: Vec<&str> = nodes.iter().filter_map(|n| n["tenant"].as_str()).collect();
    assert_eq!(order, ["org", "team-a", "team-b", "alice", "bob"], "{summary}");
    assert_eq!(nodes[1]["parent"], "org");
    assert_eq!(
        nodes[0]["budgets"][0]["spent"].as_u64(),
        Some(billed),
        "{}",
        nodes[0]
    );
    let metrics = String::from_utf8(a.admin_get("/metrics").await.body.to_vec()).expect("utf-8");
    for (level, spent) in [("org", org), ("team-a", ta), ("team-b", tb)] {
        let line = format!(
            "pressure_tenant_spend_micro_usd{{tenant=\"{level}\",dimension=\"costMicroUsdPerDay\"}} {spent}"
        );
        assert!(metrics.lines().any(|l| l == line), "{line} missing");
    }
    if let Some(b) = b {
        assert_eq!(spent(&b, "org").await, billed, "both gateways read one count");
        b.stop().await;
    }
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_levels_hold_under_64_concurrent_calls_in_memory() {
    tokio::time::timeout(Duration::from_secs(60), three_levels_hold(Store::Memory))
        .await
        .expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_levels_hold_under_64_concurrent_calls_on_redis() {
    tokio::time::timeout(
        Duration::from_secs(60),
        three_levels_hold(Store::Redis(RedisServer::start())),
    )
    .await
    .expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_levels_hold_under_64_concurrent_calls_on_a_cluster() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .expect("cluster");
    tokio::time::timeout(
        Duration::from_secs(90),
        three_levels_hold(Store::Cluster(cluster)),
    )
    .await
    .expect("bounded");
}

/// Requests per minute: alice 100 of her own, team-a 3 for all its
/// members, org unlimited by rate.
fn rate_hierarchy() -> Value {
    json!({
        "enabled": true,
        "limits": { "requestsPerMinute": 1000 },
        "overrides": {
            "team-a": { "requestsPerMinute": 3, "parent": "org" },
            "alice": { "requestsPerMinute": 100, "parent": "team-a" },
            "carol": { "parent": "team-a" }
        }
    })
}

async fn a_refusal_names_its_level(store: Store) {
    let mock = provider().await;
    let up = TestUpstream::demo().await;
    let gw = gateway(&store, &mock, &up, rate_hierarchy()).await;
    for _ in 0..3 {
        assert_eq!(http_get(&gw, "alice").await.status, 200);
    }
    for tenant in ["alice", "carol"] {
        let r = http_get(&gw, tenant).await;
        assert_eq!(r.status, 429, "{:?}", r.body);
        let message = r.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            message.contains("gateway:tenant:team-a"),
            "names the team: {message}"
        );
        assert!(
            message.contains("requestsPerMinute"),
            "names the dimension: {message}"
        );
    }
    // Nothing of the refused requests stays on the levels that had room.
    let used = |s: pressure_core::ResourceStats| s.usage.get("requestsPerMinute").copied();
    assert_eq!(used(gw.stats("gateway:tenant:alice").await), Some(3));
    assert_eq!(used(gw.stats("gateway:tenant:org").await), Some(3));
    assert_eq!(used(gw.stats("gateway:tenant:team-a").await), Some(3));
    // Another tenant of the org, outside the team, still has room.
    assert_eq!(http_get(&gw, "dave").await.status, 200);
    let doc = gw.admin_get("/admin/pressure/tenants/team-a/limits").await.json();
    assert_eq!(doc["parent"], "org", "{doc}");
    assert_eq!(doc["children"], json!(["alice", "carol"]), "{doc}");
    let doc = gw.admin_get("/admin/pressure/tenants/alice/limits").await.json();
    assert_eq!(doc["ancestors"], json!(["team-a", "org"]), "{doc}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_names_its_level_and_keeps_nothing_in_memory() {
    tokio::time::timeout(Duration::from_secs(30), a_refusal_names_its_level(Store::Memory))
        .await
        .expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_names_its_level_and_keeps_nothing_on_redis() {
    tokio::time::timeout(
        Duration::from_secs(30),
        a_refusal_names_its_level(Store::Redis(RedisServer::start())),
    )
    .await
    .expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_names_its_level_and_keeps_nothing_on_a_cluster() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .expect("cluster");
    tokio::time::timeout(
        Duration::from_secs(60),
        a_refusal_names_its_level(Store::Cluster(cluster)),
    )
    .await
    .expect("bounded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_set_live_on_one_gateway_charges_on_the_other() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let store = Store::Redis(RedisServer::start());
        let mock = provider().await;
        let up = TestUpstream::demo().await;
        let a = gateway(&store, &mock, &up, rate_hierarchy()).await;
        let b = gateway(&store, &mock, &up, rate_hierarchy()).await;
        // erin is a root: her request is hers alone.
        assert_eq!(http_get(&b, "erin").await.status, 200);
        let put = admin(
            &a,
            http::Method::PUT,
            "/admin/pressure/tenants/erin/parent",
            r#"{"parent": "team-a"}"#,
        )
        .await;
        assert_eq!(put.status, 200, "{:?}", put.body);
        assert_eq!(put.json()["ancestors"], json!(["team-a", "org"]));
        // Within 1 s the other gateway charges erin to team-a too.
        let mut charged = false;
        for _ in 0..20 {
            assert_eq!(http_get(&b, "erin").await.status, 200);
            let team = b.stats("gateway:tenant:team-a").await;
            if team.usage.get("requestsPerMinute").copied().unwrap_or(0) > 0 {
                charged = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(charged, "the live parent reached the other gateway within 1 s");

        // A cycle, a self-parent, a chain over maxDepth (4): 400, nothing stored.
        for (tenant, body, needle) in [
            ("org", r#"{"parent": "alice"}"#, "cycle"),
            ("org", r#"{"parent": "org"}"#, "own parent"),
        ] {
            let r = admin(
                &a,
                http::Method::PUT,
                &format!("/admin/pressure/tenants/{tenant}/parent"),
                body,
            )
            .await;
            assert_eq!(r.status, 400, "{tenant} {body}: {:?}", r.body);
            assert!(String::from_utf8_lossy(&r.body).contains(needle), "{:?}", r.body);
        }
        let r = admin(
            &a,
            http::Method::PUT,
            "/admin/pressure/tenants/frank/parent",
            r#"{"parent": "alice"}"#,
        )
        .await;
        assert_eq!(r.status, 200, "frank → alice → team-a → org is 4 deep");
        let r = admin(
            &a,
            http::Method::PUT,
            "/admin/pressure/tenants/gina/parent",
            r#"{"parent": "frank"}"#,
        )
        .await;
        assert_eq!(r.status, 400, "5 deep: {:?}", r.body);
        assert!(
            String::from_utf8_lossy(&r.body).contains("maxDepth"),
            "{:?}",
            r.body
        );
        // Hostile ids and bodies.
        let long = "x".repeat(300);
        for (path, body) in [
            (
                format!("/admin/pressure/tenants/{long}/parent"),
                r#"{"parent": "org"}"#.to_owned(),
            ),
            (
                "/admin/pressure/tenants/hank/parent".to_owned(),
                format!(r#"{{"parent": "{long}"}}"#),
            ),
            (
                "/admin/pressure/tenants/hank/parent".to_owned(),
                r#"{"parent": 7}"#.to_owned(),
            ),
            (
                "/admin/pressure/tenants/hank/parent".to_owned(),
                r#"{"parent": "org", "x": 1}"#.to_owned(),
            ),
            (
                "/admin/pressure/tenants/hank/parent".to_owned(),
                "not json".to_owned(),
            ),
        ] {
            let r = admin(&a, http::Method::PUT, &path, &body).await;
            assert_eq!(r.status, 400, "{path} {body}: {:?}", r.body);
        }
        let doc = a.admin_get("/admin/pressure/tenants/hank/limits").await.json();
        assert_eq!(doc["parent"], Value::Null, "nothing stored: {doc}");
        // DELETE: erin back to the config (none).
        let r = admin(
            &a,
            http::Method::DELETE,
            "/admin/pressure/tenants/erin/parent",
            "",
        )
        .await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(r.json()["parent"], Value::Null);
        a.stop().await;
        b.stop().await;
    })
    .await
    .expect("bounded");
}

/// A call refused by a level's budget spends none of the levels' requests:
/// the request the tenant layer counted when it came in is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_a_budget_refuses_spends_no_request_on_any_level() {
    tokio::time::timeout(Duration::from_secs(30), async {
        let est = estimate();
        let mock = provider().await;
        let up = TestUpstream::demo().await;
        let per_tenant = json!({
            "enabled": true,
            "limits": { "requestsPerMinute": 100 },
            "overrides": {
                "team": { "requestsPerMinute": 100, "costMicroUsdPerDay": est + est / 2 },
                "ivan": { "requestsPerMinute": 100, "parent": "team" }
            }
        });
        let gw = gateway(&Store::Memory, &mock, &up, per_tenant).await;
        assert_eq!(chat(&gw, "ivan").await.status, 200);
        // The team's budget now holds less than one estimate.
        for _ in 0..4 {
            let r = chat(&gw, "ivan").await;
            assert_eq!(r.status, 429, "{:?}", r.body);
            assert_eq!(r.json()["error"]["code"], "budget_exceeded");
        }
        let used = |s: pressure_core::ResourceStats| s.usage.get("requestsPerMinute").copied();
        assert_eq!(
            used(gw.stats("gateway:tenant:ivan").await),
            Some(1),
            "only the admitted call"
        );
        assert_eq!(
            used(gw.stats("gateway:tenant:team").await),
            Some(1),
            "only the admitted call"
        );
        gw.stop().await;
    })
    .await
    .expect("bounded");
}
