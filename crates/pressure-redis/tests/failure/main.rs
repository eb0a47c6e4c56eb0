//! Failure modes, on a Redis of the test's own: the server is killed,
//! frozen and restarted under load. Each mode behaves as documented, no call
//! hangs past the timeout, nothing panics, one transition each way is
//! counted, and counting returns to Redis once it answers again.
//!
//! No assertion here depends on how fast the machine is: the call timeout
//! is long enough that a healthy call on a loaded machine never reaches it,
//! what must wait for the timeout is checked against it from below ("not
//! before the configured value"), and the upper bounds are many times the
//! configured value: they catch a hang, not a slow run.

#[path = "../support.rs"]
mod support;

use pressure_core::{AcquireOptions, Limits, ResourceBroker};
use pressure_redis::{FailureMode, RedisBackend, RedisConfig};
use std::time::Duration;
use support::RedisServer;
use tokio::time::Instant;

/// The brokers' per-call timeout. Not the 50 ms default: on a loaded
/// machine a healthy call can take longer than that, and in `closed` mode a
/// timeout is a refusal the test would read as the outage starting early.
const TIMEOUT: Duration = Duration::from_millis(support::TIMEOUT_MS);

/// Longest any one call may take: the timeout, and twice as much again for
/// a loaded machine to get round to it (a call answered at once takes
/// microseconds). A call that is not bounded by the timeout waits for as
/// long as Redis stays down, or at least for the connection's own response
/// timeout (four times the call timeout), which is longer than this.
const HANG: Duration = Duration::from_millis(3 * support::TIMEOUT_MS);

/// How long Redis may take to be counting again once it answers: the
/// background task reconnects and probes every 100 ms, so this only bounds
/// a backend that never finds its way back.
const RECOVERY: Duration = Duration::from_secs(10);

async fn broker(srv: &RedisServer, mode: FailureMode) -> ResourceBroker<RedisBackend> {
    let b = support::broker_with(RedisConfig {
        url: srv.url(),
        failure_mode: mode,
        local_share: 0.5,
        timeout_ms: support::TIMEOUT_MS,
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

/// Tries `n` acquisitions, one after another, releasing each granted permit
/// before the next (awaited: its reply is read before this returns, so none
/// arrives later to count as Redis answering); returns how many were allowed
/// and how long each call took. Fails, rather than hangs, when a call takes
/// longer than [`HANG`].
async fn burst(b: &ResourceBroker<RedisBackend>, n: usize) -> (usize, Vec<Duration>) {
    let mut allowed = 0;
    let mut took = Vec::with_capacity(n);
    for i in 0..n {
        let t0 = Instant::now();
        let mut a = tokio::time::timeout(HANG, b.try_acquire("f", AcquireOptions::default()))
            .await
            .unwrap_or_else(|_| panic!("call {i} of {n} hangs: no answer within {HANG:?}"))
            .expect("never an error");
        took.push(t0.elapsed());
        allowed += usize::from(a.allowed());
        tokio::time::timeout(HANG, a.release())
            .await
            .unwrap_or_else(|_| panic!("release {i} of {n} hangs"))
            .expect("a release never fails to the caller");
    }
    (allowed, took)
}

/// Keeps acquiring until the backend counts in Redis again.
async fn recovery(b: &ResourceBroker<RedisBackend>) {
    let deadline = Instant::now() + RECOVERY;
    while !b.backend().status().healthy {
        assert!(
            Instant::now() < deadline,
            "no recovery within {RECOVERY:?} of redis answering: {:?}",
            b.backend().status()
        );
        let _ = b.try_acquire("f", AcquireOptions::default()).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn outage(mode: FailureMode, expect_allowed: impl Fn(usize) -> bool) {
    let mut srv = RedisServer::start();
    let b = broker(&srv, mode).await;
    let (allowed, _) = burst(&b, 5).await;
    assert_eq!(allowed, 5, "healthy: counted in redis");
    let s = b.resource_stats("f").await.expect("stats from redis");
    assert_eq!(
        s.usage.get("maxConcurrentRequests").copied(),
        Some(0),
        "every lease released in redis: {s:?}"
    );
    let st = b.backend().status();
    assert!(st.healthy && st.failures == 0 && st.transitions == 0, "{st:?}");

    srv.stop();
    let (allowed, took) = burst(&b, 40).await;
    assert!(
        expect_allowed(allowed),
        "{mode:?}: {allowed} of 40 allowed while redis is down"
    );
    let slowest = took.iter().max().copied().unwrap_or_default();
    assert!(
        slowest < HANG,
        "{mode:?}: a call took {slowest:?}, timeout {TIMEOUT:?}"
    );
    let st = b.backend().status();
    assert!(!st.healthy && st.failures > 0 && st.fallbacks > 0, "{st:?}");
    assert_eq!(st.transitions, 1, "one transition to unavailable: {st:?}");

    srv.restart();
    recovery(&b).await;
    let st = b.backend().status();
    assert_eq!(st.transitions, 2, "one transition back: {st:?}");
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
    assert_eq!(b.backend().status().transitions, 2, "no flap after recovery");
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

/// A frozen Redis (its sockets open, nothing answered) costs the call that
/// finds it one timeout, not a hang; the calls after it get the failure
/// mode at once (one call per probe interval tries Redis again), not a
/// timeout each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_costs_a_timeout_not_a_hang() {
    const CALLS: usize = 20;
    let srv = RedisServer::start();
    let b = broker(&srv, FailureMode::Closed).await;
    assert_eq!(burst(&b, 3).await.0, 3);
    srv.pause(true);
    let (allowed, took) = burst(&b, CALLS).await;
    assert_eq!(allowed, 0, "closed denies while redis is frozen");
    // The first call found Redis healthy, asked it, and waited out the
    // timeout: not before the configured value.
    assert!(
        took[0] >= TIMEOUT,
        "the first call gave up after {:?}, before the {TIMEOUT:?} timeout",
        took[0]
    );
    // Those that asked Redis are the ones that waited the timeout; the rest
    // were answered by the failure mode without asking. A call answered at
    // once takes microseconds, far from the timeout however loaded the
    // machine; one per probe interval (100 ms) may ask again.
    let asked = took.iter().filter(|t| **t >= TIMEOUT).count();
    assert!(
        asked <= CALLS / 4,
        "{asked} of {CALLS} calls waited for the frozen redis: {took:?}"
    );
    let st = b.backend().status();
    assert!(!st.healthy && st.fallbacks >= CALLS as u64, "{st:?}");
    assert_eq!(st.transitions, 1, "{st:?}");
    srv.pause(false);
    recovery(&b).await;
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
    // Dropping permits of either origin never panics, even with redis down;
    // the release of the lease held in redis cannot be delivered and waits
    // (beside whatever the failed call above left to give back).
    let before = b.backend().status().pending_releases;
    drop(held);
    drop(local);
    pending_releases_reach(&b, |n| n > before, "the undeliverable release queued").await;
    srv.restart();
    recovery(&b).await;
    pending_releases_reach(&b, |n| n == 0, "the queued release delivered").await;
    let s = b.resource_stats("f").await.expect("stats from redis again");
    assert_eq!(s.active, Some(0));
}

/// Waits until the backend's count of undelivered releases satisfies `ok`.
async fn pending_releases_reach(b: &ResourceBroker<RedisBackend>, ok: impl Fn(u64) -> bool, what: &str) {
    let deadline = Instant::now() + RECOVERY;
    while !ok(b.backend().status().pending_releases) {
        assert!(
            Instant::now() < deadline,
            "{what}: not within {RECOVERY:?}: {:?}",
            b.backend().status()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
