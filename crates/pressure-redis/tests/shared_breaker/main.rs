//! The shared circuit breaker store (`lua/breaker.lua`) against a real
//! `redis-server`: two backends with their own connections stand for two
//! instances of a fleet. Opening, the shared window, the fleet-wide probe
//! quota per epoch, reopening under a new epoch and closing.

#[path = "../support.rs"]
mod support;

use pressure_core::shared_breaker::{
    CircuitRules, OutcomeCounts, ProbeGrant, ProbeOutcome, SharedBreakerStore, SharedCircuit, SharedState,
};
use pressure_redis::{RedisBackend, RedisConfig};
use std::time::Duration;

const OPEN_WAIT_MS: u64 = 200;

fn rules(probes: u32) -> CircuitRules {
    CircuitRules {
        window_ms: 10_000,
        bucket_ms: 1_000,
        minimum_calls: 10,
        failure_rate_threshold: 0.5,
        slow_call_rate_threshold: 1.0,
        open_wait_ms: OPEN_WAIT_MS,
        half_open_probes: probes,
    }
}

/// Two instances: backends with their own connections to the test server.
async fn fleet() -> (RedisBackend, RedisBackend) {
    let url = support::redis_url();
    let a = RedisBackend::connect(support::config(url.clone()))
        .await
        .expect("redis");
    let b = RedisBackend::connect(support::config(url)).await.expect("redis");
    (a, b)
}

fn name(test: &str) -> String {
    format!("{}-{test}/model", support::run_id())
}

fn counts(calls: u64, failures: u64) -> OutcomeCounts {
    OutcomeCounts {
        calls,
        failures,
        slow: 0,
    }
}

/// Opens `n` by a forced open from its current epoch and waits until it
/// is half-open; returns the half-open state.
async fn half_open(store: &RedisBackend, n: &str, r: &CircuitRules) -> SharedCircuit {
    let before = store.read(n).await.expect("read");
    let opened = store
        .open(n, r, before.epoch, Duration::from_millis(OPEN_WAIT_MS))
        .await
        .expect("open");
    assert_eq!(opened.state, SharedState::Open);
    tokio::time::sleep(Duration::from_millis(OPEN_WAIT_MS + 50)).await;
    let s = store.read(n).await.expect("read");
    assert_eq!(s.state, SharedState::HalfOpen, "{s:?}");
    assert_eq!(s.epoch, opened.epoch, "half-open keeps the epoch it opened in");
    s
}

#[tokio::test]
async fn a_fresh_breaker_is_closed_at_epoch_zero() {
    let (a, _) = fleet().await;
    assert_eq!(a.read(&name("fresh")).await.expect("read"), SharedCircuit::FRESH);
}

#[tokio::test]
async fn failures_seen_by_two_instances_open_it_for_both() {
    let (a, b) = fleet().await;
    let n = name("window");
    let r = rules(2);
    // Each instance alone is below minimumCalls (10); together they are not.
    let s = a.record(&n, &r, counts(5, 3)).await.expect("record");
    assert_eq!(s.state, SharedState::Closed);
    let s = b.record(&n, &r, counts(5, 3)).await.expect("record");
    assert_eq!(s.state, SharedState::Open, "6 of 10 calls failed fleet-wide");
    assert_eq!(s.epoch, 1);
    assert!(s.retry_in > Duration::ZERO && s.retry_in <= Duration::from_millis(OPEN_WAIT_MS));
    let seen = a.read(&n).await.expect("read");
    assert_eq!(
        (seen.state, seen.epoch),
        (SharedState::Open, 1),
        "the other instance sees it open"
    );
    // Outcomes of calls admitted before it opened are dropped, not counted.
    let s = a.record(&n, &r, counts(100, 100)).await.expect("record");
    assert_eq!((s.state, s.epoch), (SharedState::Open, 1));
}

#[tokio::test]
async fn a_healthy_window_stays_closed() {
    let (a, b) = fleet().await;
    let n = name("healthy");
    let r = rules(2);
    for store in [&a, &b, &a, &b] {
        let s = store.record(&n, &r, counts(10, 4)).await.expect("record");
        assert_eq!(s.state, SharedState::Closed, "40 % < 50 %");
    }
}

#[tokio::test]
async fn probes_are_a_fleet_wide_quota_per_epoch() {
    let (a, b) = fleet().await;
    let n = name("quota");
    let r = rules(2);
    let before = a.read(&n).await.expect("read");
    a.open(&n, &r, before.epoch, Duration::from_millis(OPEN_WAIT_MS))
        .await
        .expect("open");
    // Open: no probe for anyone.
    match b.acquire_probe(&n, &r).await.expect("probe") {
        ProbeGrant::Refused(s) => assert_eq!(s.state, SharedState::Open),
        g => panic!("granted while open: {g:?}"),
    }
    tokio::time::sleep(Duration::from_millis(OPEN_WAIT_MS + 50)).await;
    let g1 = a.acquire_probe(&n, &r).await.expect("probe");
    let g2 = b.acquire_probe(&n, &r).await.expect("probe");
    let (ProbeGrant::Granted { epoch: e1 }, ProbeGrant::Granted { epoch: e2 }) = (g1, g2) else {
        panic!("two probes fit a quota of two: {g1:?} {g2:?}");
    };
    assert_eq!(e1, e2, "one epoch");
    for store in [&a, &b] {
        match store.acquire_probe(&n, &r).await.expect("probe") {
            ProbeGrant::Refused(s) => {
                assert_eq!(s.state, SharedState::HalfOpen);
                assert_eq!(s.probes_granted, 2);
            }
            g => panic!("a third probe in the fleet: {g:?}"),
        }
    }
    // A released probe gives its slot back.
    a.report_probe(&n, &r, e1, ProbeOutcome::Released)
        .await
        .expect("release");
    assert!(matches!(
        b.acquire_probe(&n, &r).await.expect("probe"),
        ProbeGrant::Granted { epoch } if epoch == e1
    ));
}

#[tokio::test]
async fn a_failed_probe_reopens_it_under_a_new_epoch() {
    let (a, b) = fleet().await;
    let n = name("reopen");
    let r = rules(2);
    let h = half_open(&a, &n, &r).await;
    let ProbeGrant::Granted { epoch } = a.acquire_probe(&n, &r).await.expect("probe") else {
        panic!("half-open grants a probe");
    };
    let ProbeGrant::Granted { .. } = b.acquire_probe(&n, &r).await.expect("probe") else {
        panic!("half-open grants a second probe");
    };
    assert_eq!(epoch, h.epoch);
    let s = b
        .report_probe(&n, &r, epoch, ProbeOutcome::Failure)
        .await
        .expect("report");
    assert_eq!(s.state, SharedState::Open);
    assert_eq!(s.epoch, epoch + 1, "a new epoch");
    assert!(s.retry_in > Duration::ZERO);
    // The other probe of the old epoch succeeds: too late, nothing changes.
    let s = a
        .report_probe(&n, &r, epoch, ProbeOutcome::Success)
        .await
        .expect("report");
    assert_eq!((s.state, s.epoch), (SharedState::Open, epoch + 1));
    // A stale open (from the old epoch) does not extend the new one either.
    let stale = a
        .open(&n, &r, epoch, Duration::from_secs(60))
        .await
        .expect("open");
    assert!(stale.retry_in <= Duration::from_millis(OPEN_WAIT_MS), "{stale:?}");
    // The new epoch probes again, with a fresh quota.
    tokio::time::sleep(Duration::from_millis(OPEN_WAIT_MS + 50)).await;
    assert!(matches!(
        a.acquire_probe(&n, &r).await.expect("probe"),
        ProbeGrant::Granted { epoch: e } if e == epoch + 1
    ));
}

#[tokio::test]
async fn all_probes_succeeding_close_it_for_the_fleet() {
    let (a, b) = fleet().await;
    let n = name("close");
    let r = rules(2);
    half_open(&a, &n, &r).await;
    let ProbeGrant::Granted { epoch } = a.acquire_probe(&n, &r).await.expect("probe") else {
        panic!("probe");
    };
    let ProbeGrant::Granted { .. } = b.acquire_probe(&n, &r).await.expect("probe") else {
        panic!("probe");
    };
    let s = a
        .report_probe(&n, &r, epoch, ProbeOutcome::Success)
        .await
        .expect("report");
    assert_eq!(s.state, SharedState::HalfOpen, "one of two probes reported");
    let s = b
        .report_probe(&n, &r, epoch, ProbeOutcome::Success)
        .await
        .expect("report");
    assert_eq!((s.state, s.epoch), (SharedState::Closed, epoch + 1));
    assert_eq!(a.read(&n).await.expect("read").state, SharedState::Closed);
    // Closed with a fresh window: old failures are gone.
    let s = a.record(&n, &r, counts(9, 9)).await.expect("record");
    assert_eq!(s.state, SharedState::Closed, "9 calls < minimumCalls");
    let s = b.record(&n, &r, counts(1, 1)).await.expect("record");
    assert_eq!((s.state, s.epoch), (SharedState::Open, epoch + 2));
}

#[tokio::test]
async fn an_open_from_the_current_epoch_extends_it_never_shortens_it() {
    let (a, b) = fleet().await;
    let n = name("extend");
    let r = rules(1);
    let s = a.open(&n, &r, 0, Duration::from_secs(5)).await.expect("open");
    assert_eq!((s.state, s.epoch), (SharedState::Open, 1));
    let s = b.open(&n, &r, 1, Duration::from_millis(100)).await.expect("open");
    assert!(s.retry_in > Duration::from_secs(4), "not shortened: {s:?}");
    let s = b.open(&n, &r, 1, Duration::from_secs(30)).await.expect("open");
    assert!(s.retry_in > Duration::from_secs(29), "extended: {s:?}");
    assert_eq!(s.epoch, 1, "an extension is no transition");
}

#[tokio::test]
async fn a_store_that_is_down_answers_an_error_not_a_state() {
    let srv = support::RedisServer::start();
    let store = RedisBackend::connect(support::config(srv.url()))
        .await
        .expect("redis");
    drop(srv);
    let n = name("down");
    let r = rules(1);
    assert!(store.read(&n).await.is_err());
    assert!(store.acquire_probe(&n, &r).await.is_err());
    assert!(store.record(&n, &r, counts(10, 10)).await.is_err());
}

/// The same script on a Redis Cluster: both keys of a breaker share its
/// hash tag, so every operation runs on one node.
#[tokio::test]
async fn a_cluster_holds_the_shared_state_too() {
    let config = || RedisConfig {
        cluster_nodes: support::cluster_nodes(),
        timeout_ms: support::TIMEOUT_MS,
        connect_timeout_ms: support::CONNECT_TIMEOUT_MS,
        ..RedisConfig::default()
    };
    let a = RedisBackend::connect(config()).await.expect("cluster");
    let b = RedisBackend::connect(config()).await.expect("cluster");
    let r = rules(1);
    for i in 0..6 {
        let n = name(&format!("cluster-{i}"));
        let s = a.record(&n, &r, counts(10, 10)).await.expect("record");
        assert_eq!(s.state, SharedState::Open);
        assert_eq!(b.read(&n).await.expect("read").state, SharedState::Open);
    }
}
