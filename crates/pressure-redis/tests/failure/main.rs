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

/// How a reachable Redis refuses to decide: each answers every call with an
/// error reply (not a timeout, not a closed socket).
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// `maxmemory` reached under `noeviction`: writes get `OOM`.
    Oom,
    /// Demoted to a replica (`REPLICAOF`): writes get `READONLY`.
    ReadOnly,
    /// A script past the busy threshold: everything gets `BUSY`.
    Busy,
}

/// `CONFIG SET name value` on `c`.
fn config_set(c: &mut redis::Connection, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(c)
        .unwrap_or_else(|e| panic!("CONFIG SET {name} {value}: {e}"));
}

/// Starts `refusal` on `srv` (`other`: a second server to replicate from);
/// returns what ends it.
fn refuse(refusal: Refusal, srv: &RedisServer, other: &RedisServer) -> Box<dyn FnOnce() + Send> {
    let mut c = support::conn(srv);
    match refusal {
        Refusal::Oom => {
            config_set(&mut c, "maxmemory-policy", "noeviction");
            config_set(&mut c, "maxmemory", "1");
            Box::new(move || config_set(&mut c, "maxmemory", "0"))
        }
        Refusal::ReadOnly => {
            let _: () = redis::cmd("REPLICAOF")
                .arg("127.0.0.1")
                .arg(other.port())
                .query(&mut c)
                .expect("replicaof");
            Box::new(move || {
                let _: () = redis::cmd("REPLICAOF")
                    .arg("NO")
                    .arg("ONE")
                    .query(&mut c)
                    .expect("replicaof no one");
            })
        }
        Refusal::Busy => {
            config_set(&mut c, "busy-reply-threshold", "20");
            let mut spinner = support::conn(srv);
            let spin = std::thread::spawn(move || {
                // Runs until SCRIPT KILL: read-only, so it can be killed.
                let _ = redis::cmd("EVAL")
                    .arg("local i = 0 while true do i = i + 1 end")
                    .arg(0)
                    .query::<redis::Value>(&mut spinner);
            });
            // Past the threshold, every other client gets BUSY.
            // Up to 10 s in 5 ms steps.
            let busy = (0..2_000).any(|_| {
                std::thread::sleep(Duration::from_millis(5));
                matches!(redis::cmd("PING").query::<String>(&mut c), Err(e) if e.code() == Some("BUSY"))
            });
            assert!(busy, "never busy");
            Box::new(move || {
                let _ = redis::cmd("SCRIPT").arg("KILL").query::<()>(&mut c);
                spin.join().expect("the spinning client ends");
            })
        }
    }
}

/// A Redis that answers with an error reply that says it cannot decide
/// follows the failure mode exactly as a Redis that is down does: `open`
/// admits, `closed` refuses, `local` counts its share in memory; the health
/// flips to unavailable and back once each way (one log line each), and
/// counting returns to Redis once the refusal ends, with no traffic.
async fn refused(refusal: Refusal, mode: FailureMode, expect_allowed: impl Fn(usize) -> bool) {
    let srv = RedisServer::start();
    let other = RedisServer::start();
    let b = broker(&srv, mode).await;
    assert_eq!(burst(&b, 5).await.0, 5, "healthy: counted in redis");
    let end = refuse(refusal, &srv, &other);
    let (allowed, _) = burst(&b, 40).await;
    assert!(
        expect_allowed(allowed),
        "{refusal:?} {mode:?}: {allowed} of 40 allowed"
    );
    let st = b.backend().status();
    assert!(
        !st.healthy && st.failures > 0 && st.transitions == 1 && st.fallbacks > 0,
        "{refusal:?}: the store's refusal is an outage: {st:?}"
    );
    assert_eq!(st.unhealthy_shards.len(), 1, "{st:?}");
    assert!(
        st.last_error
            .as_deref()
            .is_some_and(|e| e.to_ascii_uppercase().contains(match refusal {
                Refusal::Oom => "OOM",
                Refusal::ReadOnly => "READONLY",
                Refusal::Busy => "BUSY",
            })),
        "the cause is named: {st:?}"
    );
    tokio::task::spawn_blocking(end).await.expect("ended");
    // No traffic: the background task's write probe finds it back.
    let deadline = Instant::now() + RECOVERY;
    while !b.backend().status().healthy {
        assert!(
            Instant::now() < deadline,
            "no recovery: {:?}",
            b.backend().status()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let st = b.backend().status();
    assert_eq!(st.transitions, 2, "one transition each way: {st:?}");
    assert!(st.unhealthy_shards.is_empty(), "{st:?}");
    // Counting in Redis again, from where it was (a replica resync may
    // have emptied it: then from zero).
    let (allowed, _) = burst(&b, 3).await;
    assert_eq!(allowed, 3);
    assert_eq!(b.backend().status().transitions, 2, "no flapping");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oom_follows_each_failure_mode() {
    refused(Refusal::Oom, FailureMode::Open, |n| n == 40).await;
    refused(Refusal::Oom, FailureMode::Closed, |n| n == 0).await;
    refused(Refusal::Oom, FailureMode::Local, |n| n == 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readonly_follows_each_failure_mode() {
    refused(Refusal::ReadOnly, FailureMode::Open, |n| n == 40).await;
    refused(Refusal::ReadOnly, FailureMode::Closed, |n| n == 0).await;
    refused(Refusal::ReadOnly, FailureMode::Local, |n| n == 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_follows_each_failure_mode() {
    refused(Refusal::Busy, FailureMode::Open, |n| n == 40).await;
    refused(Refusal::Busy, FailureMode::Closed, |n| n == 0).await;
    refused(Refusal::Busy, FailureMode::Local, |n| n == 10).await;
}

/// Many calls at once on one connection wait in the process for their
/// turn; that wait is not the store being slow. With the product's default
/// 50 ms timeout, 5,000 concurrent decisions take Redis itself longer than
/// the timeout to answer in turn: each is still answered by Redis, exactly
/// the limit is granted, and the store stays healthy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_on_one_connection_is_not_an_outage() {
    const CALLS: usize = 5_000;
    let srv = RedisServer::start();
    let b = support::broker_with(RedisConfig {
        url: srv.url(),
        failure_mode: FailureMode::Open,
        connections: 1,
        timeout_ms: 50,
        ..support::config(srv.url())
    })
    .await;
    b.register_limit("burst", Limits::default().requests_per_minute(1_000))
        .expect("valid");
    let b = std::sync::Arc::new(b);
    let calls = (0..CALLS).map(|_| {
        let b = std::sync::Arc::clone(&b);
        tokio::spawn(async move {
            let a = b
                .try_acquire("burst", AcquireOptions::default())
                .await
                .expect("answers");
            a.allowed()
        })
    });
    let allowed = futures::future::join_all(calls)
        .await
        .into_iter()
        .filter(|r| *r.as_ref().expect("joined"))
        .count();
    let st = b.backend().status();
    assert_eq!(
        (allowed, st.fallbacks, st.failures, st.transitions),
        (1_000, 0, 0, 0),
        "exactly the limit, every decision from redis: {st:?}"
    );
}

/// A release that a master acknowledged and then lost (it stalled past
/// the cluster's node timeout, woke, answered what was queued for it, and
/// resynced as a replica of its promoted replica) is delivered again: the
/// slot comes back within a second of the store answering, not after the
/// lease TTL. The lost write is made by hand here — the lease put back
/// into the hash after its delivery — which is what the resync does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_lost_after_an_outage_is_delivered_again() {
    let srv = RedisServer::start();
    let b = broker(&srv, FailureMode::Closed).await;
    let mut held = b
        .try_acquire("f", AcquireOptions::default())
        .await
        .expect("answers");
    assert!(held.allowed());
    let key = pressure_redis::keys::ResourceKeys::new(&b.backend().config().key_prefix, "f").state;
    let mut c = support::conn(&srv);
    let fields: Vec<(String, String)> = redis::cmd("HGETALL").arg(&key).query(&mut c).expect("state");
    let leases: Vec<(String, String)> = fields.into_iter().filter(|(f, _)| f.starts_with("l:")).collect();
    assert_eq!(leases.len(), 1, "one lease held");
    srv.pause(true);
    // Its release gets no answer in time: handed on, delivered later.
    let _ = held.release().await;
    srv.pause(false);
    recovery(&b).await;
    pending_releases_reach(&b, |n| n == 0, "the release delivered").await;
    let active = || async {
        let s = b.resource_stats("f").await.expect("stats");
        s.usage.get("maxConcurrentRequests").copied()
    };
    let deadline = Instant::now() + RECOVERY;
    while active().await != Some(0) {
        assert!(Instant::now() < deadline, "the release never landed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The resync: the lease is back in the hash as if never released.
    let _: () = redis::cmd("HSET")
        .arg(&key)
        .arg(&leases[0].0)
        .arg(&leases[0].1)
        .query(&mut c)
        .expect("put back");
    assert_eq!(active().await, Some(1), "the lost write holds the slot");
    let deadline = Instant::now() + Duration::from_secs(3);
    while active().await != Some(0) {
        assert!(
            Instant::now() < deadline,
            "the slot is still taken 3 s later (lease TTL 30 s): {:?}",
            b.backend().status()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A nest follows the failure mode as a whole while Redis is down:
/// `closed` refuses at level 0 as an outage, `open` grants every level,
/// `local` decides the whole nest on the in-memory fallback, all or nothing
/// (its organisation's local share refuses at level 1); once Redis answers,
/// nests count there again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nest_follows_the_failure_mode_as_a_whole() {
    use pressure_core::{DenialCause, LimitTemplate, Nest, NestAcquisition};
    for mode in [FailureMode::Closed, FailureMode::Open, FailureMode::Local] {
        let mut srv = RedisServer::start();
        let b = broker(&srv, mode).await;
        let key = LimitTemplate::new(&Limits::default().requests_per_minute(20)).expect("valid");
        let org = LimitTemplate::new(&Limits::default().requests_per_minute(8)).expect("valid");
        let nest = Nest::new(vec![
            b.lazy_limit_in_group("k", "o", &key).expect("registers"),
            b.lazy_limit_in_group("o", "o", &org).expect("registers"),
        ]);
        let healthy = nest
            .try_acquire(AcquireOptions::default())
            .await
            .expect("answers");
        assert!(healthy
            .permits()
            .is_some_and(|p| p.iter().all(|p| !p.grant().fallback)));
        srv.stop();
        let mut granted = 0;
        for i in 0..12 {
            let out = tokio::time::timeout(HANG, nest.try_acquire(AcquireOptions::default()))
                .await
                .unwrap_or_else(|_| panic!("{mode:?}: nest {i} hangs"))
                .expect("never an error");
            match (mode, out) {
                (FailureMode::Closed, NestAcquisition::Denied { level, denial }) => {
                    assert_eq!((level, denial.cause), (0, DenialCause::Unavailable));
                }
                (FailureMode::Open | FailureMode::Local, NestAcquisition::Granted(p)) => {
                    assert_eq!(p.len(), 2);
                    assert!(p.iter().all(|p| p.grant().fallback), "{mode:?}: {p:?}");
                    granted += 1;
                }
                (FailureMode::Local, NestAcquisition::Denied { level, denial }) => {
                    assert_eq!((level, denial.cause), (1, DenialCause::Exhausted), "{mode:?}");
                }
                (mode, out) => panic!("{mode:?}: nest {i}: {out:?}"),
            }
        }
        let expected = match mode {
            FailureMode::Closed => 0,
            FailureMode::Open => 12,
            // Half of the organisation's 8 per minute, in this process.
            _ => 4,
        };
        assert_eq!(granted, expected, "{mode:?}");
        srv.restart();
        let deadline = Instant::now() + RECOVERY;
        loop {
            let out = nest
                .try_acquire(AcquireOptions::default())
                .await
                .expect("answers");
            if out
                .permits()
                .is_some_and(|p| p.iter().all(|p| !p.grant().fallback))
            {
                break;
            }
            assert!(Instant::now() < deadline, "{mode:?}: no recovery: {out:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let s = b.resource_stats("o").await.expect("stats from redis");
        assert!(
            s.usage["requestsPerMinute"] >= 1,
            "{mode:?}: counted in redis again"
        );
    }
}
