//! The gateway on a Redis that is down when it starts (docs/architecture.md#lifecycle-and-live-reload): it
//! starts in every failure mode and serves accordingly — `closed` refuses
//! with `503 limiter_unavailable` and `Retry-After` (never a fake 429),
//! `open` admits, `local` enforces its share in memory — `/healthz` names the
//! URL and the cause, and once Redis answers, with no traffic meanwhile, the
//! next request is counted by Redis again (the backend probes every 100 ms;
//! the tests wait for `/healthz` to say so, with a deadline that only
//! catches a gateway that never comes back).

use super::support;

use pressure_testkit::RedisServer;
use serde_json::json;
use std::time::Duration;
use support::{bounded, statuses, TestGateway, TestUpstream};
use tokio::time::Instant;

/// The store's per-call timeout, ms. Not a tight 50 ms: on a loaded machine
/// a healthy call can take longer, and in `closed` mode that is a 503 where
/// the test expects Redis to count.
const TIMEOUT_MS: u64 = 1_000;

/// How long the gateway may take to count in Redis again once it answers:
/// many probe intervals, so it bounds a hang, not a slow machine.
const RECOVERY: Duration = Duration::from_secs(10);

/// Waits, without any proxied request, until `/healthz` says the backend is
/// back; fails after [`RECOVERY`].
async fn await_healthy(gw: &TestGateway) {
    let deadline = Instant::now() + RECOVERY;
    loop {
        let h = gw.admin_get("/healthz").await.json();
        if h["status"] == "ok" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not healthy again within {RECOVERY:?} of Redis answering: {h}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A gateway whose route `/limited` allows `per_minute` requests per
/// minute, on the Redis of `redis` in `mode`.
async fn gateway(up: &TestUpstream, redis: &RedisServer, mode: &str, per_minute: u64) -> TestGateway {
    TestGateway::start(json!({
        "upstreams": { "demo": { "url": up.url(), "pathPrefix": "/" } },
        "backend": { "type": "redis", "url": redis.url(), "failureMode": mode,
                     "timeoutMs": TIMEOUT_MS, "localShare": 0.5,
                     "keyPrefix": format!("outage-{mode}-{}", std::process::id()) },
        "pressure": { "perRoute": [{
            "resource": "gateway:route:limited", "pathPrefix": "/limited",
            "limits": { "requestsPerMinute": per_minute } }] },
    }))
    .await
}

/// A server that was up, then stopped: its port refuses connections.
fn stopped_redis() -> RedisServer {
    let mut r = RedisServer::start();
    r.stop();
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_mode_refuses_with_503_while_redis_is_down_then_counts_in_redis() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let mut redis = stopped_redis();
        let gw = gateway(&up, &redis, "closed", 4).await;

        let health = gw.admin_get("/healthz").await;
        assert_eq!(health.status, 200, "liveness stays up");
        let h = health.json();
        assert_eq!(h["status"], "degraded");
        assert_eq!(h["url"], redis.url().trim_end_matches('/'), "{h}");
        assert!(
            h["error"].as_str().is_some_and(|e| e.contains("refused")),
            "the real cause: {h}"
        );

        let refused = gw.get("/limited").await;
        assert_eq!(refused.status, 503, "{:?}", refused.body);
        assert_eq!(refused.json()["error"]["type"], "limiter_unavailable");
        assert!(refused.header("retry-after").is_some(), "503 carries Retry-After");
        let metrics = String::from_utf8_lossy(&gw.admin_get("/metrics").await.body).into_owned();
        assert!(
            metrics.contains("pressure_gateway_limiter_unavailable_total{layer=\"pre_auth\"} 1"),
            "{metrics}"
        );
        assert!(
            !metrics.contains("pressure_gateway_denied_total{"),
            "an outage is not a denial: {metrics}"
        );

        // Redis comes back; no traffic until the gateway says it is back;
        // the next requests are counted by Redis: exactly 4 of 6 pass.
        redis.restart();
        await_healthy(&gw).await;
        let after = gw.burst(6, "/limited", &[]).await;
        let mut codes = statuses(&after);
        codes.sort_unstable();
        assert_eq!(codes, [200, 200, 200, 200, 429, 429], "{codes:?}");
        let s = gw.stats("gateway:route:limited").await;
        assert_eq!(
            s.usage.get("requestsPerMinute"),
            Some(&4),
            "counted by Redis: {s:?}"
        );
        assert_eq!(gw.admin_get("/healthz").await.json()["status"], "ok");
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_mode_admits_while_redis_is_down() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let redis = stopped_redis();
        let gw = gateway(&up, &redis, "open", 2).await;
        assert_eq!(statuses(&gw.burst(5, "/limited", &[]).await), [200; 5]);
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_mode_enforces_its_share_while_redis_is_down() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let redis = stopped_redis();
        // localShare 0.5 of 8 per minute: this instance alone admits 4.
        let gw = gateway(&up, &redis, "local", 8).await;
        let replies = gw.burst(7, "/limited", &[]).await;
        let mut codes = statuses(&replies);
        codes.sort_unstable();
        assert_eq!(codes, [200, 200, 200, 200, 429, 429, 429], "{codes:?}");
        gw.stop().await;
        up.stop().await;
    })
    .await;
}

/// Once Redis answers — with no request meanwhile — the gateway counts in
/// Redis again: a key appears on the first request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_needs_no_traffic() {
    bounded(async {
        let up = TestUpstream::demo().await;
        let mut redis = stopped_redis();
        let gw = gateway(&up, &redis, "open", 100).await;
        redis.restart();
        await_healthy(&gw).await;
        assert_eq!(gw.get("/limited").await.status, 200);
        let s = gw.stats("gateway:route:limited").await;
        assert_eq!(
            s.usage.get("requestsPerMinute"),
            Some(&1),
            "counted by Redis: {s:?}"
        );
        gw.stop().await;
        up.stop().await;
    })
    .await;
}
