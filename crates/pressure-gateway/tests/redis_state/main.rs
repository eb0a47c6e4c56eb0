//! What the gateway leaves in Redis: nothing a vanished client or a one-off
//! tenant could make live longer than its window or lease.
//!
//! * A reset storm — clients that send a request and reset the connection
//!   at once, while other clients keep the gateway busy — leaves no lease
//!   behind: the route's usage is back to 0 long before the lease TTL, and
//!   every slot is usable at once (docs/architecture.md#the-redis-backend, cancellation-safe).
//! * 300 one-off tenants leave 0 keys behind once their windows are over,
//!   and every key the gateway wrote carries an expiry within its bound
//!   (docs/architecture.md#the-redis-backend, every key expires).
//!
//! Each test starts its own `redis-server` (`pressure-testkit`) on a free
//! loopback port.

use super::support;

use axum::extract::State;
use axum::routing::get;
use axum::Router;
use futures::future::join_all;
use pressure_testkit::RedisServer;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{hs256_auth, statuses, token, TestGateway, TestUpstream};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The route's concurrency limit and lease TTL.
const SLOTS: usize = 64;
const LEASE_TTL_MS: u64 = 30_000;

/// Clients that reset right after sending, requests each, and the clients
/// that keep the gateway busy meanwhile.
const RESETTERS: usize = 12;
const RESETS_EACH: usize = 250;
const BUSY: usize = 4;

/// An upstream whose `/storm/fast` answers at once and whose `/storm/hold`
/// answers once [`SLOTS`] requests are inside together (or after 10 s), so
/// `SLOTS` concurrent requests through the gateway pass only if every slot
/// is free.
async fn storm_upstream() -> TestUpstream {
    #[derive(Clone, Default)]
    struct Gate {
        inside: Arc<AtomicUsize>,
        all_in: Arc<Notify>,
    }
    async fn hold(State(g): State<Gate>) -> &'static str {
        let notified = g.all_in.notified();
        if g.inside.fetch_add(1, Ordering::SeqCst) + 1 >= SLOTS {
            g.all_in.notify_waiters();
        } else {
            let _ = tokio::time::timeout(Duration::from_secs(10), notified).await;
        }
        "held"
    }
    TestUpstream::start(
        Router::new()
            .route("/storm/fast", get(|| async { "fast" }))
            .route("/storm/hold", get(hold))
            .with_state(Gate::default()),
    )
    .await
}

/// One request, then a reset (`SO_LINGER` 0) after `spin` yields: the
/// request is cut at varying points of its admission.
async fn send_and_reset(addr: std::net::SocketAddr, spin: usize) {
    let Ok(mut s) = TcpStream::connect(addr).await else {
        return;
    };
    let _ = s
        .write_all(b"GET /storm/fast HTTP/1.1\r\nHost: storm\r\n\r\n")
        .await;
    for _ in 0..spin {
        tokio::task::yield_now().await;
    }
    // Linger 0 makes the close a reset, at once (the deprecation is about a
    // linger > 0 blocking the thread on drop).
    #[allow(deprecated)]
    let _ = s.set_linger(Some(Duration::ZERO));
    drop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_storm_leaves_no_lease_behind_on_redis() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let redis = RedisServer::start();
        let up = storm_upstream().await;
        let gw = TestGateway::start(json!({
            "upstreams": { "storm": { "url": up.url(), "pathPrefix": "/" } },
            "backend": { "type": "redis", "url": redis.url(), "timeoutMs": 1000 },
            "pressure": { "perRoute": [{
                "resource": "gateway:route:storm", "pathPrefix": "/storm",
                "limits": { "maxConcurrentRequests": SLOTS, "leaseTtlMs": LEASE_TTL_MS } }] },
        }))
        .await;

        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let busy: Vec<_> = (0..BUSY)
            .map(|_| {
                let (client, url, stop) = (gw.client(), gw.url("/storm/fast"), Arc::clone(&stop));
                tokio::spawn(async move {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        if let Ok(r) = client.get(url.parse().expect("url")).await {
                            let _ = http_body_util::BodyExt::collect(r.into_body()).await;
                        }
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        let addr = gw.addr;
        let resetters: Vec<_> = (0..RESETTERS)
            .map(|c| {
                tokio::spawn(async move {
                    for i in 0..RESETS_EACH {
                        send_and_reset(addr, (c + i) % 6).await;
                    }
                })
            })
            .collect();
        for r in resetters {
            r.await.expect("resetter");
        }
        stop.store(true, Ordering::Relaxed);
        let busy_requests: u64 = join_all(busy).await.into_iter().map(|r| r.expect("busy")).sum();

        // The leases are back long before their TTL (30 s).
        let freed_within = Duration::from_secs(5);
        let start = Instant::now();
        let mut left = u64::MAX;
        while start.elapsed() < freed_within {
            let s = gw.stats("gateway:route:storm").await;
            left = s.usage.get("maxConcurrentRequests").copied().unwrap_or(u64::MAX);
            if left == 0 && s.active == Some(0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let metrics = String::from_utf8_lossy(&gw.admin_get("/metrics").await.body).into_owned();
        let counted = |name: &str| {
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
                .unwrap_or_else(|| panic!("{name} missing from /metrics"))
        };
        let (cancelled, released) = (
            counted("pressure_redis_cancelled_calls_total"),
            counted("pressure_redis_cancel_releases_total"),
        );
        let replies = join_all((0..SLOTS).map(|_| gw.get("/storm/hold"))).await;
        let codes = statuses(&replies);
        let refused = codes.iter().filter(|c| **c == 429).count();
        eprintln!(
            "reset storm: {} resets, {busy_requests} busy requests; slots left after {:?}: {left}; \
             {refused} of {SLOTS} concurrent requests refused; calls settled after their caller left: \
             {cancelled}, of which grants given back: {released}",
            RESETTERS * RESETS_EACH,
            start.elapsed()
        );
        assert_eq!(left, 0, "leases left in Redis after the storm");
        assert_eq!(codes, vec![200; SLOTS], "every slot usable at once");
        gw.stop().await;
        up.stop().await;
    })
    .await
    .expect("the storm test outlived its bound");
}

/// Every key under `prefix` with its PTTL (ms).
async fn keys_with_ttl(redis: &RedisServer, prefix: &str) -> Vec<(String, i64)> {
    let client = redis::Client::open(redis.url()).expect("redis url");
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis answers");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(&mut c)
        .await
        .expect("KEYS");
    let mut out = Vec::with_capacity(keys.len());
    for k in keys {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&k)
            .query_async(&mut c)
            .await
            .expect("PTTL");
        out.push((k, ttl));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_off_tenants_leave_no_key_behind_once_their_windows_are_over() {
    const TENANTS: usize = 300;
    const LEASE_MS: u64 = 2_000;
    tokio::time::timeout(Duration::from_secs(60), async {
        let redis = RedisServer::start();
        let up = TestUpstream::demo().await;
        let prefix = "onceoff";
        let gw = TestGateway::start(json!({
            "upstreams": { "demo": { "url": up.url(), "pathPrefix": "/" } },
            "backend": { "type": "redis", "url": redis.url(), "timeoutMs": 1000, "keyPrefix": prefix },
            "auth": hs256_auth(),
            "pressure": {
                "perRoute": [{
                    "resource": "gateway:route:api", "pathPrefix": "/api",
                    "limits": { "maxConcurrentRequests": 1000, "leaseTtlMs": LEASE_MS } }],
                "perTenant": { "enabled": true, "limits": { "requestsPerSecond": 5 } },
            },
        }))
        .await;

        let client = gw.client();
        // When each tenant's last request was answered.
        let mut done = Vec::with_capacity(TENANTS);
        for t in 0..TENANTS {
            let bearer = format!("Bearer {}", token(&format!("once-{t}")));
            for _ in 0..2 {
                let req = http::Request::get(gw.url("/api/echo"))
                    .header("authorization", &bearer)
                    .body(http_body_util::Full::new(bytes::Bytes::new()))
                    .expect("request");
                let resp = client.request(req).await.expect("gateway answers");
                assert_eq!(resp.status(), 200);
                let _ = http_body_util::BodyExt::collect(resp.into_body()).await;
            }
            done.push(tokio::time::Instant::now());
        }

        // Every key carries an expiry within its bound: the longest window
        // or lease plus its margin (at most the window again, at most 10 s).
        // The first tenants' keys may be gone already; a tenant answered
        // within the last second before the listing ended (a 1 s window is
        // kept at least 32/30 s) still has its key, however slowly the
        // machine sent the requests.
        let keys = keys_with_ttl(&redis, prefix).await;
        let listed = tokio::time::Instant::now();
        let recent = done
            .iter()
            .filter(|&&d| listed.duration_since(d) < Duration::from_secs(1))
            .count();
        assert!(
            recent >= 1,
            "the last tenant was answered more than a second before the listing"
        );
        assert!(
            keys.len() >= recent && keys.len() <= TENANTS + 1,
            "one key per tenant and the route: {} keys, {recent} tenants answered within the last second",
            keys.len()
        );
        // A window of W has 30 sub-windows of ceil(W / 30) and is kept for
        // 32 of them; the expiry is at most twice that (ms, rounded up).
        let window_bound = |w_us: u64| 2 * w_us.div_ceil(30) * 32 / 1_000 + 2;
        let bad: Vec<_> = keys
            .iter()
            .filter(|(k, ttl)| {
                let bound = if k.contains("route") {
                    2 * LEASE_MS + 2
                } else {
                    window_bound(1_000_000)
                };
                // -2: expired between KEYS and PTTL; 0: expiring in
                // this millisecond (PTTL rounds down). -1 is a key
                // without an expiry.
                !matches!(*ttl, -2 | 0) && (*ttl < 0 || *ttl > bound as i64)
            })
            .collect();
        assert!(
            bad.is_empty(),
            "{} keys without an expiry in their bound: {:?}",
            bad.len(),
            &bad[..bad.len().min(5)]
        );

        // Once the tenants' windows (1 s) and the route's leases (2 s) are
        // over, and their margins, no key is left.
        let deadline = Instant::now() + Duration::from_secs(15);
        let left = loop {
            let left = keys_with_ttl(&redis, prefix).await;
            if left.is_empty() || Instant::now() > deadline {
                break left;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        assert!(left.is_empty(), "keys left: {left:?}");
        gw.stop().await;
        up.stop().await;
    })
    .await
    .expect("the tenants test outlived its bound");
}
