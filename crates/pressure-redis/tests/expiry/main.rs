//! Every key a script writes carries an expiry within its bound — the
//! longest window or lease it holds, plus a margin of at most that again
//! (and at most 10 s) — set by the same call that writes it; once the bound
//! has passed, the key is gone. Per limit shape (window, gcra, concurrency,
//! tokens, all together) and per script (acquire, renew, reconcile,
//! release), on Redis and on Redis Cluster (the testkit's own, or
//! `PRESSURE_REDIS_URL` / `PRESSURE_REDIS_CLUSTER`).

#[path = "../support.rs"]
mod support;

use pressure_core::{AcquireOptions, ActualUsage, Limits, ResourceBroker};
use pressure_redis::keys::ResourceKeys;
use pressure_redis::{RedisBackend, RedisConfig};
use std::time::Duration;
use tokio::time::Instant;

/// One window of `w`: 30 sub-windows of `ceil(w / 30)`, kept for 32.
fn window_keep(w: Duration) -> Duration {
    Duration::from_micros((w.as_micros() as u64).div_ceil(30) * 32)
}

/// The bound of a key holding state for `keep`: `keep` plus a margin of at
/// most `keep` (and at most 10 s), rounded up to the next millisecond.
fn bound(keep: Duration) -> Duration {
    keep + keep.min(Duration::from_secs(10)) + Duration::from_millis(2)
}

/// Where a test's brokers keep their state.
#[derive(Clone, Copy, Debug)]
enum Store {
    Single,
    Cluster,
}

impl Store {
    fn config(self) -> RedisConfig {
        match self {
            Store::Single => support::config(support::redis_url()),
            Store::Cluster => RedisConfig {
                cluster_nodes: support::cluster_nodes(),
                ..support::config(String::new())
            },
        }
    }

    /// The PTTL of `key` (ms; -1 without an expiry, -2 gone), asked of
    /// the node that holds it.
    async fn pttl(self, key: &str) -> i64 {
        let mut cmd = redis::cmd("PTTL");
        cmd.arg(key);
        match self {
            Store::Single => {
                let client = redis::Client::open(support::redis_url()).expect("url");
                let mut c = client
                    .get_multiplexed_async_connection()
                    .await
                    .expect("redis answers");
                cmd.query_async(&mut c).await.expect("PTTL")
            }
            Store::Cluster => {
                let client = redis::cluster::ClusterClient::new(support::cluster_nodes()).expect("nodes");
                let mut c = client.get_async_connection().await.expect("cluster answers");
                cmd.query_async(&mut c).await.expect("PTTL")
            }
        }
    }
}

/// A broker on `store` with `limits` on a resource of its own, and the
/// resource's state key.
async fn resource(
    store: Store,
    name: &str,
    limits: Limits,
) -> (ResourceBroker<RedisBackend>, String, String) {
    let config = RedisConfig {
        key_prefix: format!("{}x", support::run_id()),
        ..store.config()
    };
    let key = ResourceKeys::new(&config.key_prefix, name).state;
    let b = support::broker_with(config).await;
    b.register_limit(name, limits).expect("valid");
    (b, name.to_owned(), key)
}

/// The key's PTTL is positive and within `bound` (ms).
async fn expires_within(store: Store, key: &str, bound: Duration, what: &str) {
    let ttl = store.pttl(key).await;
    assert!(
        ttl > 0 && ttl as u128 <= bound.as_millis(),
        "{store:?} {what}: {key} has PTTL {ttl} ms, bound {} ms",
        bound.as_millis()
    );
}

/// The key is gone within `within` after its bound.
async fn gone_within(store: Store, key: &str, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    loop {
        let ttl = store.pttl(key).await;
        if ttl == -2 {
            return;
        }
        assert!(
            ttl != -1 && Instant::now() < deadline,
            "{store:?} {what}: {key} still there (PTTL {ttl} ms)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// After one acquisition the key expires within its bound, and goes.
async fn one_acquisition(store: Store, name: &str, limits: Limits, keep: Duration, wait_gone: bool) {
    let (b, id, key) = resource(store, name, limits).await;
    let permit = b
        .try_acquire(&id, AcquireOptions::default().tokens(100, 0))
        .await
        .expect("answers");
    assert!(permit.allowed());
    expires_within(store, &key, bound(keep), &format!("{name} after one acquisition")).await;
    drop(permit);
    if wait_gone {
        gone_within(store, &key, bound(keep) + Duration::from_secs(2), name).await;
    }
}

async fn shapes(store: Store) {
    let lease = Duration::from_secs(1);
    let cases = [
        (
            "window",
            Limits::default().requests_per_second(10),
            window_keep(Duration::from_secs(1)),
            true,
        ),
        (
            "gcra",
            Limits::default().requests_per_second(10).gcra(Some(5)),
            Duration::from_millis(100),
            true,
        ),
        (
            "leases",
            Limits::default().max_concurrent_requests(2).lease_ttl(lease),
            lease,
            true,
        ),
        // A minute's window: its bound is checked, not waited for.
        (
            "tokens",
            Limits::default().tokens_per_minute(10_000),
            window_keep(Duration::from_secs(60)),
            false,
        ),
        (
            "all",
            Limits::default()
                .requests_per_second(10)
                .input_tokens_per_minute(10_000)
                .max_concurrent_requests(2)
                .lease_ttl(lease),
            window_keep(Duration::from_secs(60)),
            false,
        ),
    ];
    let runs = cases.into_iter().map(|(name, limits, keep, wait)| async move {
        one_acquisition(store, &format!("{name}-{store:?}"), limits, keep, wait).await;
    });
    futures::future::join_all(runs).await;
}

/// Renew, reconcile and release keep the key's expiry within the bound of
/// what it holds; with the permit gone, the key goes.
async fn permit_scripts(store: Store) {
    let lease = Duration::from_millis(1_500);
    let (b, id, key) = resource(
        store,
        &format!("permit-{store:?}"),
        Limits::default()
            .requests_per_second(10)
            .gcra(Some(10))
            .max_concurrent_requests(2)
            .lease_ttl(lease),
    )
    .await;
    let mut permit = b
        .try_acquire(&id, AcquireOptions::default())
        .await
        .expect("answers")
        .into_permit()
        .expect("granted");
    // The lease is the longest thing the key holds.
    let keep = lease;
    expires_within(store, &key, bound(keep), "acquire").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(permit.renew().await.expect("renewed"));
    expires_within(store, &key, bound(keep), "renew").await;
    permit
        .reconcile(ActualUsage {
            requests: 3,
            input_tokens: 0,
            output_tokens: 0,
            cost_micro_usd: 0,
        })
        .await
        .expect("reconciled");
    expires_within(store, &key, bound(keep), "reconcile").await;
    permit.release().await.expect("released");
    expires_within(store, &key, bound(keep), "release").await;
    gone_within(store, &key, bound(keep) + Duration::from_secs(2), "permit").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shape_expires_within_its_bound_on_redis() {
    shapes(Store::Single).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shape_expires_within_its_bound_on_a_cluster() {
    shapes(Store::Cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_reconcile_and_release_keep_the_expiry_on_redis() {
    permit_scripts(Store::Single).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_reconcile_and_release_keep_the_expiry_on_a_cluster() {
    permit_scripts(Store::Cluster).await;
}
