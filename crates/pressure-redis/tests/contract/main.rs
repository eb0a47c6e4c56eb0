//! The backend contract suite against a real Redis: the test binary's own
//! `redis-server` on a free loopback port (`pressure-testkit`), or
//! `PRESSURE_REDIS_URL`.

#[path = "../support.rs"]
mod support;

use pressure_core::contract::Harness;
use pressure_core::ResourceBroker;
use pressure_redis::RedisBackend;

/// Each broker has its own connections: a fleet of one store.
struct Redis;

impl Harness for Redis {
    type B = RedisBackend;

    async fn broker(&self) -> ResourceBroker<RedisBackend> {
        support::broker().await
    }

    fn unique(&self, name: &str) -> String {
        format!("{}:contract:{name}", support::run_id())
    }

    fn shared_store(&self) -> bool {
        true
    }

    async fn gated(&self) -> Option<pressure_core::contract::Gated<RedisBackend>> {
        Some(support::gated_broker().await)
    }

    async fn shifted_broker(&self) -> (ResourceBroker<RedisBackend>, pressure_core::clock::WallShift) {
        support::shifted_broker_with(support::config(support::redis_url())).await
    }
}

pressure_core::contract_suite!(Redis);

/// An acquisition dropped in flight is settled by the cancellation path,
/// and the status counts it (`pressure_redis_cancel_releases_total` in the
/// gateway's metrics): the caller went away, its lease went back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_acquisition_is_counted_by_the_cancellation_path() {
    use pressure_core::{AcquireOptions, Limits};
    use std::time::Duration;
    let (b, gate) = support::gated_broker().await;
    b.register_limit(
        "cut",
        Limits::default()
            .max_concurrent_requests(1)
            .lease_ttl(Duration::from_secs(60)),
    )
    .expect("valid");
    let before = b.backend().status();
    assert_eq!((before.cancelled_calls, before.cancel_releases), (0, 0));
    gate.hold();
    let mut acquisition = Box::pin(b.try_acquire("cut", AcquireOptions::default()));
    assert!(
        tokio::time::timeout(Duration::from_millis(100), &mut acquisition)
            .await
            .is_err(),
        "answered although the store was frozen"
    );
    drop(acquisition);
    gate.open();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while b.backend().status().cancel_releases == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            b.backend().status()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let after = b.backend().status();
    assert_eq!(
        (after.cancelled_calls, after.cancel_releases),
        (1, 1),
        "{after:?}"
    );
    // The release is counted when it is sent; it lands on Redis a moment
    // later (a spawned give-back): wait for it, bounded.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let next = loop {
        let next = b
            .try_acquire("cut", AcquireOptions::default())
            .await
            .expect("answers");
        if next.allowed() || tokio::time::Instant::now() >= deadline {
            break next;
        }
        drop(next);
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(next.allowed(), "the slot came back");
}

/// A resource asked for in another group (a tenant moved to another
/// organisation) moves to that group's keys: its usage starts empty there,
/// handles obtained before count there too, and a change of limits keeps
/// it in its group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_regrouped_resource_counts_on_its_new_groups_keys() {
    use pressure_core::{AcquireOptions, LimitTemplate, Limits};
    use pressure_redis::keys::ResourceKeys;
    use redis::AsyncCommands;
    let b = support::broker().await;
    let id = Redis.unique("moved-tenant");
    let (old_root, new_root) = (Redis.unique("root-a"), Redis.unique("root-b"));
    let template = LimitTemplate::new(&Limits::default().requests_per_minute(10)).expect("valid");
    let first = b
        .lazy_limit_in_group(&id, &old_root, &template)
        .expect("registers");
    for _ in 0..3 {
        assert!(first
            .try_acquire(AcquireOptions::default())
            .await
            .expect("answers")
            .allowed());
    }
    let usage = |b: &pressure_core::ResourceBroker<RedisBackend>| {
        let (b, id) = (b.clone(), id.clone());
        async move { b.resource_stats(&id).await.expect("stats").usage["requestsPerMinute"] }
    };
    assert_eq!(usage(&b).await, 3);
    let moved = b.lazy_limit_in_group(&id, &new_root, &template).expect("moves");
    assert_eq!(usage(&b).await, 0, "the new group's keys start empty");
    assert!(moved
        .try_acquire(AcquireOptions::default())
        .await
        .expect("answers")
        .allowed());
    assert!(first
        .try_acquire(AcquireOptions::default())
        .await
        .expect("answers")
        .allowed());
    assert_eq!(usage(&b).await, 2, "the old handle follows the move");
    b.set_limits(&id, Limits::default().requests_per_minute(20))
        .expect("valid");
    assert_eq!(usage(&b).await, 2, "a change of limits keeps the group's keys");
    let prefix = b.backend().config().key_prefix.clone();
    let client = redis::Client::open(support::redis_url().as_str()).expect("url");
    let mut con = client.get_multiplexed_async_connection().await.expect("connects");
    let new_key = ResourceKeys::grouped(&prefix, &new_root, &id).state;
    let old_key = ResourceKeys::grouped(&prefix, &old_root, &id).state;
    assert!(
        con.exists::<_, bool>(&new_key).await.expect("EXISTS"),
        "{new_key}"
    );
    assert!(
        con.exists::<_, bool>(&old_key).await.expect("EXISTS"),
        "{old_key} expires by itself"
    );
    // A root is in the group named by its own id, on its plain keys:
    // asking for it in that group moves nothing.
    let root = Redis.unique("plain-root");
    let plain = b.lazy_limit(&root, &template).expect("registers");
    assert!(plain
        .try_acquire(AcquireOptions::default())
        .await
        .expect("answers")
        .allowed());
    let same = b.lazy_limit_in_group(&root, &root, &template).expect("registers");
    assert!(same
        .try_acquire(AcquireOptions::default())
        .await
        .expect("answers")
        .allowed());
    let s = b.resource_stats(&root).await.expect("stats");
    assert_eq!(s.usage["requestsPerMinute"], 2, "the root did not move");
    // A member that becomes a root moves to its plain keys.
    let alone = b.lazy_limit_in_group(&id, &id, &template).expect("moves");
    assert_eq!(usage(&b).await, 0, "its own group's keys start empty");
    assert!(alone
        .try_acquire(AcquireOptions::default())
        .await
        .expect("answers")
        .allowed());
    let plain_key = ResourceKeys::new(&prefix, &id).state;
    assert!(
        con.exists::<_, bool>(&plain_key).await.expect("EXISTS"),
        "{plain_key}"
    );
}
