//! Leases never leak, on a Redis of the test's own behind a delaying TCP
//! proxy (loopback only): an acquisition whose reply was lost (Redis slower
//! than `timeoutMs`, so the script runs after the caller gave up) and a
//! release that never arrived both give their concurrency slot back within
//! about a second of Redis answering again — not after the 30 s lease TTL.

#[path = "../own_store/redis.rs"]
mod own_redis;
#[path = "../own_store/proxy.rs"]
mod proxy;

use own_redis::OwnRedis;
use pressure_core::{AcquireOptions, DenialCause, Limits, Permit, ResourceBroker};
use pressure_redis::keys::ResourceKeys;
use pressure_redis::{FailureMode, RedisBackend, RedisConfig};
use proxy::Proxy;
use std::time::Duration;
use tokio::time::Instant;

const SLOTS: usize = 5;

async fn broker(proxy: &Proxy, mode: FailureMode) -> ResourceBroker<RedisBackend> {
    let backend = RedisBackend::connect(RedisConfig {
        url: proxy.url(),
        failure_mode: mode,
        timeout_ms: 50,
        ..RedisConfig::default()
    })
    .await
    .expect("redis answers through the proxy");
    let b = ResourceBroker::builder(backend).build();
    // The default lease TTL (30 s): only recovery can free a ghost in time.
    b.register_limit("g", Limits::default().max_concurrent_requests(SLOTS as u64))
        .expect("valid");
    b
}

/// Leases Redis itself counts for the resource (read directly, not through
/// the proxy).
fn leases_in_redis(srv: &OwnRedis) -> usize {
    let key = ResourceKeys::new("pressure", "g").state;
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(&key)
        .query(&mut srv.conn())
        .expect("hkeys");
    fields.iter().filter(|f| f.starts_with("l:")).count()
}

/// Waits (up to 1 s) until Redis holds no lease of the resource: permits
/// dropped by the test release in the background.
async fn no_leases_in_redis(srv: &OwnRedis) {
    let t0 = Instant::now();
    while leases_in_redis(srv) != 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "{} leases left in redis",
            leases_in_redis(srv)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls until all `SLOTS` slots can be held at once; returns how long it
/// took, failing after `bound`.
async fn all_slots_back(b: &ResourceBroker<RedisBackend>, bound: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        let mut held: Vec<Permit<RedisBackend>> = Vec::new();
        for _ in 0..SLOTS {
            if let Some(p) = b
                .try_acquire("g", AcquireOptions::default())
                .await
                .expect("answers")
                .into_permit()
            {
                if p.grant().lease.is_some() && !p.grant().fallback {
                    held.push(p);
                }
            }
        }
        if held.len() == SLOTS {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < bound,
            "only {} of {SLOTS} slots back after {:?}",
            held.len(),
            t0.elapsed()
        );
        drop(held);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn lost_acquisitions_give_their_slots_back(mode: FailureMode) {
    let srv = OwnRedis::start();
    let proxy = Proxy::start(srv.port).await;
    let b = broker(&proxy, mode).await;
    all_slots_back(&b, Duration::from_secs(2)).await;
    no_leases_in_redis(&srv).await;

    // Redis answers after 150 ms, the callers give up after 50 ms.
    proxy.set_delay(Duration::from_millis(150));
    let tasks: Vec<_> = (0..SLOTS)
        .map(|_| {
            let b = b.clone();
            tokio::spawn(async move {
                b.try_acquire("g", AcquireOptions::default())
                    .await
                    .expect("the failure mode answers")
            })
        })
        .collect();
    for t in tasks {
        let a = t.await.expect("task");
        match mode {
            FailureMode::Closed => {
                let d = a.denial().expect("closed denies during the stall");
                assert_eq!(d.cause, DenialCause::Unavailable);
            }
            _ => {
                let p = a.permit().expect("open allows during the stall");
                assert!(p.grant().fallback && p.grant().lease.is_none());
            }
        }
    }
    // The scripts still reach Redis and take their leases (the ghosts);
    // the releases sent after them take them back, or tombstone them.
    tokio::time::sleep(Duration::from_millis(400)).await;
    proxy.set_delay(Duration::ZERO);
    let fast_again = Instant::now();
    let took = all_slots_back(&b, Duration::from_millis(1_500)).await;
    println!(
        "{mode:?}: all {SLOTS} slots back {:?} after redis was fast again",
        fast_again.elapsed()
    );
    assert!(took < Duration::from_millis(1_500));
    // The probe's own permits go back too, and no ghost is left.
    no_leases_in_redis(&srv).await;
    // The client counts a release as pending until its reply is read, a
    // moment after Redis applied it: wait for the count (bounded), too.
    let t0 = Instant::now();
    while b.backend().status().pending_releases != 0 && t0.elapsed() < Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(b.backend().status().pending_releases, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_mode_lost_acquisitions_give_their_slots_back() {
    lost_acquisitions_give_their_slots_back(FailureMode::Closed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_mode_lost_acquisitions_give_their_slots_back() {
    lost_acquisitions_give_their_slots_back(FailureMode::Open).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_that_never_arrived_are_delivered_later() {
    let srv = OwnRedis::start();
    let proxy = Proxy::start(srv.port).await;
    let b = broker(&proxy, FailureMode::Closed).await;
    let mut held = Vec::new();
    for _ in 0..SLOTS {
        held.push(
            b.try_acquire("g", AcquireOptions::default())
                .await
                .expect("answers")
                .into_permit()
                .expect("granted"),
        );
    }
    assert_eq!(leases_in_redis(&srv), SLOTS);
    // The network holds everything, then the connections are cut: the
    // releases sent meanwhile never reach Redis.
    proxy.set_delay(Duration::from_secs(30));
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    proxy.cut();
    assert_eq!(leases_in_redis(&srv), SLOTS, "the releases were lost on the way");
    assert!(
        b.backend().status().pending_releases > 0,
        "and are waiting to be retried"
    );
    proxy.set_delay(Duration::ZERO);
    let took = all_slots_back(&b, Duration::from_millis(1_500)).await;
    println!("slots back {took:?} after the network recovered");
    assert_eq!(b.backend().status().pending_releases, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_arriving_after_its_release_reserves_nothing() {
    // The release overtakes its acquisition (another connection, or the
    // acquisition stuck in a buffer): the tombstone it leaves makes the late
    // script reserve nothing.
    let srv = OwnRedis::start();
    let proxy = Proxy::start(srv.port).await;
    let b = broker(&proxy, FailureMode::Closed).await;
    let key = ResourceKeys::new("pressure", "g").state;
    let mut c = srv.conn();
    let release = redis::Script::new(concat!(
        include_str!("../../lua/outlive.lua"),
        include_str!("../../lua/release.lua")
    ));
    let acquire = redis::Script::new(concat!(
        include_str!("../../lua/calendar.lua"),
        include_str!("../../lua/acquire.lua")
    ));
    let lease = "00000000deadbeef";
    let freed: i64 = release
        .key(&key)
        .arg(60_000_000u64)
        .arg(lease)
        .invoke(&mut c)
        .expect("release");
    assert_eq!(freed, 0, "nothing to free yet");
    // acquire.lua with no rate dimension, concurrency 5, TTL 30 s, that lease.
    let out: Vec<i64> = acquire
        .key(&key)
        .arg(0)
        .arg(5)
        .arg(30_000_000u64)
        .arg(lease)
        .arg(0)
        .invoke(&mut c)
        .expect("acquire");
    assert_eq!(out[0], 2, "refused by the tombstone: {out:?}");
    assert_eq!(leases_in_redis(&srv), 0);
    // The tombstone is used up: all slots are free.
    all_slots_back(&b, Duration::from_secs(1)).await;
}
