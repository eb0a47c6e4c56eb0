//! Failure modes, on a Redis of the test's own: the server is killed,
//! frozen and restarted under load. Each mode behaves as documented, no call
//! hangs past the timeout, nothing panics, one transition each way is
//! counted, and counting returns to Redis within 1 s of it answering again.

#[path = "../support.rs"]
mod support;

use pressure_core::{AcquireOptions, Limits, ResourceBroker};
use pressure_redis::{FailureMode, RedisBackend, RedisConfig};
use std::time::Duration;
use support::RedisServer;
use tokio::time::Instant;

async fn broker(srv: &RedisServer, mode: FailureMode) -> ResourceBroker<RedisBackend> {
    let b = support::broker_with(RedisConfig {
        url: srv.url(),
        failure_mode: mode,
        local_share: 0.5,
        timeout_ms: 50,
        ..RedisConfig::default()
    })
    .await;
    b.register_limit(
        "f",
        Limits::default()
            .requests_per_minute(20)
            .max_concurrent_requests(1_000),
    )
    .expect("valid");
    b
}

/// Tries `n` acquisitions (permits dropped at once) and returns how many
/// were allowed and the slowest call.
async fn burst(b: &ResourceBroker<RedisBackend>, n: usize) -> (usize, Duration) {
    let mut allowed = 0;
    let mut slowest = Duration::ZERO;
    for _ in 0..n {
        let t0 = Instant::now();
        let a = b
            .try_acquire("f", AcquireOptions::default())
            .await
            .expect("never an error");
        slowest = slowest.max(t0.elapsed());
        allowed += usize::from(a.allowed());
    }
    (allowed, slowest)
}

/// Keeps acquiring until the backend counts in Redis again; returns how long
/// it took.
async fn recovery(b: &ResourceBroker<RedisBackend>) -> Duration {
    let t0 = Instant::now();
    while !b.backend().status().healthy {
        assert!(t0.elapsed() < Duration::from_secs(3), "no recovery");
        let _ = b.try_acquire("f", AcquireOptions::default()).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    t0.elapsed()
}

/// Waits until Redis holds no lease of "f" any more and the replies of the
/// detached releases have been read: a release reply read only after the
/// server is killed would count as Redis answering during the outage.
async fn settle(b: &ResourceBroker<RedisBackend>) {
    let t0 = Instant::now();
    loop {
        let s = b.resource_stats("f").await.expect("stats from redis");
        if s.usage.get("maxConcurrentRequests").copied() == Some(0) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "leases never released: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
}

async fn outage(mode: FailureMode, expect_allowed: impl Fn(usize) -> bool) {
    let mut srv = RedisServer::start();
    let b = broker(&srv, mode).await;
    let (allowed, _) = burst(&b, 5).await;
    assert_eq!(allowed, 5, "healthy: counted in redis");
    settle(&b).await;

    srv.stop();
    let (allowed, slowest) = burst(&b, 40).await;
    assert!(
        expect_allowed(allowed),
        "{mode:?}: {allowed} of 40 allowed while redis is down"
    );
    assert!(
        slowest < Duration::from_millis(250),
        "{mode:?}: a call took {slowest:?}"
    );
    let st = b.backend().status();
    assert!(!st.healthy && st.failures > 0 && st.fallbacks > 0, "{st:?}");
    assert_eq!(st.transitions, 1, "one transition to unavailable");

    srv.restart();
    let took = recovery(&b).await;
    assert!(
        took < Duration::from_secs(1),
        "{mode:?}: recovered after {took:?}"
    );
    let st = b.backend().status();
    assert_eq!(st.transitions, 2, "one transition back");
    // Counting in the (new, empty) redis again: whatever acquisitions found
    // it back were counted there (the background probe may have been first,
    // with a PING that counts nothing), and the limit holds.
    let s = b.resource_stats("f").await.expect("stats from redis");
    let used = s.usage.get("requestsPerMinute").copied().unwrap_or(0) as usize;
    assert!(used <= 20, "{mode:?}: {used} counted");
    let (allowed, _) = burst(&b, 25).await;
    assert_eq!(
        allowed,
        20 - used,
        "{mode:?}: the limit holds again after recovery"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_denies_while_redis_is_down() {
    outage(FailureMode::Closed, |allowed| allowed == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_allows_while_redis_is_down() {
    outage(FailureMode::Open, |allowed| allowed == 40).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_counts_a_share_while_redis_is_down() {
    // A local share of 0.5 of 20 per minute: 10 allowed in this process.
    outage(FailureMode::Local, |allowed| allowed == 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_costs_a_timeout_not_a_hang() {
    let srv = RedisServer::start();
    let b = broker(&srv, FailureMode::Closed).await;
    assert_eq!(burst(&b, 3).await.0, 3);
    srv.pause(true);
    let t0 = Instant::now();
    let (allowed, slowest) = burst(&b, 20).await;
    assert_eq!(allowed, 0);
    assert!(slowest < Duration::from_millis(250), "slowest call {slowest:?}");
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "20 calls took {:?}",
        t0.elapsed()
    );
    srv.pause(false);
    let took = recovery(&b).await;
    assert!(took < Duration::from_secs(1), "recovered after {took:?}");
    assert_eq!(burst(&b, 3).await.0, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_and_reconciles_survive_an_outage() {
    let mut srv = RedisServer::start();
    let b = broker(&srv, FailureMode::Local).await;
    let held = b
        .try_acquire("f", AcquireOptions::default())
        .await
        .expect("answers");
    assert!(held.allowed());
    srv.stop();
    let local = b
        .try_acquire("f", AcquireOptions::default())
        .await
        .expect("answers");
    assert!(local.allowed(), "local share admits");
    // Dropping permits of either origin never panics, even with redis down.
    drop(held);
    drop(local);
    srv.restart();
    let _ = recovery(&b).await;
    let s = b.resource_stats("f").await.expect("stats from redis again");
    assert_eq!(s.active, Some(0));
}
