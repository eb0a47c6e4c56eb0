//! Per-tenant limit overrides (docs/architecture.md#budgets-one-tenant-quota-across-both-flows), through real gateways:
//!
//! * two gateways on one Redis (`pressure-testkit`'s own `redis-server`): a
//!   tenant exhausted on gateway A is admitted by A again once gateway B's
//!   admin API raised its limit (within a propagation bound of 2 s), and
//!   refused again once B removed the override; both agree on `GET`;
//! * one gateway in memory: an override given before a tenant's first
//!   request is what it registers with; raising and removing it applies at
//!   once, usage kept; a config override shows as `config`;
//! * a reload that changes a config override applies it to a registered
//!   tenant, usage kept;
//! * a bad body is a `400` naming the field, a missing or wrong admin
//!   token a `401`, a bad tenant id a `400`, a bad config override an
//!   invalid config naming its path.

use super::support;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use pressure_testkit::RedisServer;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Once;
use std::time::Duration;
use support::{bounded, hs256_auth, token, Reply, TestGateway, TestUpstream};
use tokio::time::Instant;

/// The environment variable holding the admin token of these tests.
const ADMIN_TOKEN_ENV: &str = "PRESSURE_GATEWAY_TESTS_OVERRIDES_ADMIN_TOKEN";
const ADMIN_TOKEN: &str = "overrides-admin-token";

/// How long another gateway may take to apply a live override.
const PROPAGATION_BOUND: Duration = Duration::from_secs(2);

fn admin_token_env() -> &'static str {
    static SET: Once = Once::new();
    SET.call_once(|| std::env::set_var(ADMIN_TOKEN_ENV, ADMIN_TOKEN));
    ADMIN_TOKEN_ENV
}

/// A gateway section: every tenant 2 requests a minute by default, plus
/// `overrides`, on `backend`, with an admin token.
fn config(up: &TestUpstream, backend: Value, overrides: Value) -> Value {
    json!({
        "upstreams": { "demo": { "url": up.url(), "pathPrefix": "/" } },
        "backend": backend,
        "auth": hs256_auth(),
        "admin": { "tokenEnv": admin_token_env() },
        "pressure": { "perTenant": {
            "enabled": true,
            "limits": { "requestsPerMinute": 2 },
            "overrides": overrides,
        } },
    })
}

/// One request of `tenant` through `gw`'s proxy; its status.
async fn request(gw: &TestGateway, tenant: &str) -> StatusCode {
    let auth = format!("Bearer {}", token(tenant));
    let replies = gw.burst(1, "/api/x", &[("authorization", &auth)]).await;
    replies[0].status
}

/// `method path` on `gw`'s admin listener with `body`, and the admin token
/// unless `token` is `None`.
async fn admin(gw: &TestGateway, method: Method, path: &str, body: &str, token: Option<&str>) -> Reply {
    let mut req = Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", gw.admin))
        .header("content-type", "application/json");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = req
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("request");
    Reply::read(gw.send(req).await).await
}

fn limits_path(tenant: &str) -> String {
    format!("/admin/pressure/tenants/{tenant}/limits")
}

async fn put(gw: &TestGateway, tenant: &str, limits: Value) -> Value {
    let r = admin(
        gw,
        Method::PUT,
        &limits_path(tenant),
        &limits.to_string(),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    r.json()
}

async fn delete(gw: &TestGateway, tenant: &str) -> Value {
    let r = admin(gw, Method::DELETE, &limits_path(tenant), "", Some(ADMIN_TOKEN)).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    r.json()
}

async fn get(gw: &TestGateway, tenant: &str) -> Value {
    let r = admin(gw, Method::GET, &limits_path(tenant), "", Some(ADMIN_TOKEN)).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    r.json()
}

/// The `used` of `dimension` in a `GET` document.
fn used(doc: &Value, dimension: &str) -> Option<u64> {
    doc["usage"]
        .as_array()?
        .iter()
        .find(|row| row["dimension"] == dimension)?["used"]
        .as_u64()
}

/// The `requestsPerMinute` of the limits in a `GET` document.
fn limit(doc: &Value) -> Option<u64> {
    doc["limits"]["requestsPerMinute"].as_u64()
}

/// Requests of `tenant` on `gw` until one answers `want`, for at most
/// [`PROPAGATION_BOUND`]; the statuses seen before. Denials consume
/// nothing, so waiting for an admission costs no quota.
async fn until(gw: &TestGateway, tenant: &str, want: StatusCode) -> Vec<StatusCode> {
    let deadline = Instant::now() + PROPAGATION_BOUND;
    let mut seen = Vec::new();
    loop {
        let status = request(gw, tenant).await;
        if status == want {
            return seen;
        }
        seen.push(status);
        assert!(
            Instant::now() < deadline,
            "no {want} for {tenant} within {PROPAGATION_BOUND:?}: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_override_on_one_gateway_applies_on_the_other() {
    bounded(async {
        let redis = RedisServer::start();
        let up = TestUpstream::demo().await;
        let backend = json!({ "type": "redis", "url": redis.url(), "timeoutMs": 1000 });
        let a = TestGateway::start(config(&up, backend.clone(), json!({}))).await;
        let b = TestGateway::start(config(&up, backend, json!({}))).await;

        assert_eq!(request(&a, "acme").await, StatusCode::OK);
        assert_eq!(request(&a, "acme").await, StatusCode::OK);
        assert_eq!(request(&a, "acme").await, StatusCode::TOO_MANY_REQUESTS);

        let doc = put(&b, "acme", json!({ "requestsPerMinute": 10 })).await;
        assert_eq!(doc["source"], "live");
        assert_eq!(limit(&doc), Some(10), "{doc}");
        // B never saw acme: the usage is the store's, the fleet's.
        assert_eq!(used(&doc, "requestsPerMinute"), Some(2), "{doc}");

        let refused = until(&a, "acme", StatusCode::OK).await;
        assert!(
            refused.iter().all(|s| *s == StatusCode::TOO_MANY_REQUESTS),
            "{refused:?}"
        );
        let doc = get(&a, "acme").await;
        assert_eq!(
            (doc["source"].clone(), doc["enforced"].clone()),
            (json!("live"), json!(true))
        );
        assert_eq!(used(&doc, "requestsPerMinute"), Some(3), "{doc}");
        assert_eq!(doc["usage"][0]["limit"], 10);

        let doc = delete(&b, "acme").await;
        assert_eq!(doc["source"], "default");
        assert_eq!(limit(&doc), Some(2), "{doc}");
        let admitted = until(&a, "acme", StatusCode::TOO_MANY_REQUESTS).await;
        assert!(admitted.iter().all(|s| *s == StatusCode::OK), "{admitted:?}");
        assert_eq!(request(&b, "acme").await, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(get(&a, "acme").await["source"], "default");

        a.stop().await;
        b.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_in_memory_apply_at_once_and_wait_for_unknown_tenants() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(config(
            &up,
            json!({ "type": "memory" }),
            json!({ "vip": { "requestsPerMinute": 4, "maxConcurrentRequests": 3 } }),
        ))
        .await;

        // Given before the tenant's first request: it registers with it.
        let doc = put(&gw, "newco", json!({ "requestsPerMinute": 1 })).await;
        assert_eq!(doc["source"], "live");
        assert_eq!(
            doc["usage"],
            json!([{ "dimension": "requestsPerMinute", "used": 0, "limit": 1 }])
        );
        assert_eq!(request(&gw, "newco").await, StatusCode::OK);
        assert_eq!(request(&gw, "newco").await, StatusCode::TOO_MANY_REQUESTS);

        // Raised: admitted at once, the usage kept.
        put(&gw, "newco", json!({ "requestsPerMinute": 3 })).await;
        assert_eq!(request(&gw, "newco").await, StatusCode::OK);
        assert_eq!(request(&gw, "newco").await, StatusCode::OK);
        assert_eq!(request(&gw, "newco").await, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(used(&get(&gw, "newco").await, "requestsPerMinute"), Some(3));

        // Removed: the template (2) again, with 3 used.
        let doc = delete(&gw, "newco").await;
        assert_eq!(doc["source"], "default");
        assert_eq!(request(&gw, "newco").await, StatusCode::TOO_MANY_REQUESTS);

        let doc = get(&gw, "vip").await;
        assert_eq!(doc["source"], "config");
        assert_eq!(limit(&doc), Some(4));
        assert_eq!(doc["limits"]["maxConcurrentRequests"], 3);
        assert_eq!(
            doc["usage"][1],
            json!({ "dimension": "maxConcurrentRequests", "used": 0, "limit": 3 })
        );
        // A live override is a full replacement, also of a config one.
        let doc = put(&gw, "vip", json!({ "requestsPerMinute": 1 })).await;
        assert_eq!(limit(&doc), Some(1), "{doc}");
        assert_eq!(delete(&gw, "vip").await["source"], "config");

        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_applies_a_changed_config_override_keeping_the_usage() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let memory = json!({ "type": "memory" });
        let section = |rpm: u64| {
            config(
                &up,
                memory.clone(),
                json!({ "acme": { "requestsPerMinute": rpm } }),
            )
        };
        let gw = TestGateway::start(section(3)).await;
        for _ in 0..3 {
            assert_eq!(request(&gw, "acme").await, StatusCode::OK);
        }
        assert_eq!(request(&gw, "acme").await, StatusCode::TOO_MANY_REQUESTS);

        let mut raised = section(4);
        raised["listen"] = json!(gw.addr.to_string());
        raised["admin"]["listen"] = json!(gw.admin.to_string());
        let text = json!({ "gateway": raised }).to_string();
        let cfg = pressure_gateway::config::parse_in(&text, Path::new(".")).expect("valid");
        gw.gateway().apply(cfg).expect("reloaded");

        assert_eq!(request(&gw, "acme").await, StatusCode::OK, "one more");
        assert_eq!(
            request(&gw, "acme").await,
            StatusCode::TOO_MANY_REQUESTS,
            "usage kept"
        );
        assert_eq!(limit(&get(&gw, "acme").await), Some(4));

        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_with_what_is_wrong() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let gw = TestGateway::start(config(&up, json!({ "type": "memory" }), json!({}))).await;
        let path = limits_path("acme");

        let r = admin(
            &gw,
            Method::PUT,
            &path,
            r#"{"requestsPerMinute":0}"#,
            Some(ADMIN_TOKEN),
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert_eq!(r.json()["error"]["path"], "requestsPerMinute");
        let r = admin(
            &gw,
            Method::PUT,
            &path,
            r#"{"requestsPerMinute":"ten"}"#,
            Some(ADMIN_TOKEN),
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert_eq!(r.json()["error"]["path"], "requestsPerMinute");
        let r = admin(&gw, Method::PUT, &path, "{}", Some(ADMIN_TOKEN)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "no dimension at all");

        let r = admin(&gw, Method::PUT, &path, r#"{"requestsPerMinute":5}"#, None).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        let r = admin(&gw, Method::DELETE, &path, "", Some("wrong")).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        let r = admin(&gw, Method::GET, &path, "", None).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        // Nothing of that changed the tenant.
        assert_eq!(get(&gw, "acme").await["source"], "default");

        let long = limits_path(&"a".repeat(257));
        let r = admin(
            &gw,
            Method::PUT,
            &long,
            r#"{"requestsPerMinute":5}"#,
            Some(ADMIN_TOKEN),
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);

        let bad = json!({ "gateway": {
            "listen": "127.0.0.1:0",
            "upstreams": { "demo": { "url": up.url(), "pathPrefix": "/" } },
            "auth": hs256_auth(),
            "pressure": { "perTenant": { "enabled": true, "limits": { "requestsPerMinute": 2 },
                "overrides": { "acme": { "requestsPerMinute": 0 } } } },
        } });
        let e = pressure_gateway::config::parse_in(&bad.to_string(), Path::new(".")).expect_err("invalid");
        assert!(
            e.to_string()
                .contains("gateway.pressure.perTenant.overrides.acme.requestsPerMinute"),
            "{e}"
        );

        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_whose_subscription_broke_catches_up_when_it_reconnects() {
    bounded(async {
        let redis = RedisServer::start();
        let up = TestUpstream::demo().await;
        let backend = json!({ "type": "redis", "url": redis.url(), "timeoutMs": 1000 });
        let a = TestGateway::start(config(&up, backend.clone(), json!({}))).await;
        let b = TestGateway::start(config(&up, backend, json!({}))).await;
        assert_eq!(request(&a, "acme").await, StatusCode::OK);
        assert_eq!(request(&a, "acme").await, StatusCode::OK);
        assert_eq!(request(&a, "acme").await, StatusCode::TOO_MANY_REQUESTS);

        // Every subscription is cut; the write's announcement reaches no one.
        let mut conn = pressure_redis::connect(
            &pressure_redis::RedisConfig::new(redis.url()),
            Duration::from_secs(5),
        )
        .await
        .expect("redis answers");
        // Both watchers subscribed first (they start with their gateways).
        let channel = "pressure:{config}:tenant-overrides:changed";
        let deadline = Instant::now() + PROPAGATION_BOUND;
        loop {
            let (_, n): (String, i64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(channel)
                .query_async(&mut conn)
                .await
                .expect("PUBSUB NUMSUB");
            if n == 2 {
                break;
            }
            assert!(Instant::now() < deadline, "{n} subscribers of {channel}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("pubsub")
            .query_async(&mut conn)
            .await
            .expect("CLIENT KILL");
        // Each gateway watches two shared hashes: the live overrides and
        // the live tenant parents (nested budgets).
        assert_eq!(killed, 4, "the two gateways' subscriptions, two each");
        put(&b, "acme", json!({ "requestsPerMinute": 10 })).await;

        // A reads the whole hash again when it has subscribed again.
        let refused = until(&a, "acme", StatusCode::OK).await;
        assert!(
            refused.iter().all(|s| *s == StatusCode::TOO_MANY_REQUESTS),
            "{refused:?}"
        );
        assert_eq!(get(&a, "acme").await["source"], "live");

        a.stop().await;
        b.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_unreachable_a_write_is_503_and_changes_nothing() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let port = support::dead_port().await;
        let backend = json!({ "type": "redis", "url": format!("redis://127.0.0.1:{port}"),
                              "connectTimeoutMs": 200, "timeoutMs": 100 });
        let gw = TestGateway::start(config(&up, backend, json!({}))).await;
        let r = admin(
            &gw,
            Method::PUT,
            &limits_path("acme"),
            r#"{"requestsPerMinute":5}"#,
            Some(ADMIN_TOKEN),
        )
        .await;
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", r.body);
        assert_eq!(r.json()["error"]["type"], "limiter_unavailable");
        // Limits the Redis backend cannot hold (a gcra rate finer than its
        // microsecond clock) are refused before anything is stored.
        let fine = r#"{"algorithm":"gcra","tokensPerMinute":600000000}"#;
        let r = admin(&gw, Method::PUT, &limits_path("acme"), fine, Some(ADMIN_TOKEN)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
        let doc = get(&gw, "acme").await;
        assert_eq!(doc["source"], "default");
        assert!(doc["usage"]["error"].is_string(), "{doc}");
        gw.stop().await;
        up.stop().await;
    })
    .await;
}
