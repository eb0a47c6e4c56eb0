//! The backend contract suite against a Redis Cluster: the test binary's
//! own 3-master cluster on free loopback ports (`pressure-testkit`), or
//! `PRESSURE_REDIS_CLUSTER` (comma-separated node URLs).
//!
//! When no cluster can be had, these tests fail rather than skip.

#[path = "../support.rs"]
mod support;

use pressure_core::contract::Harness;
use pressure_core::ResourceBroker;
use pressure_redis::keys::ResourceKeys;
use pressure_redis::{RedisBackend, RedisConfig};
use std::collections::HashMap;

/// Each broker has its own cluster connection: a fleet of one store.
struct Cluster;

impl Harness for Cluster {
    type B = RedisBackend;

    async fn broker(&self) -> ResourceBroker<RedisBackend> {
        support::broker_with(RedisConfig {
            cluster_nodes: support::cluster_nodes(),
            timeout_ms: support::TIMEOUT_MS,
            connect_timeout_ms: support::CONNECT_TIMEOUT_MS,
            ..RedisConfig::default()
        })
        .await
    }

    fn unique(&self, name: &str) -> String {
        format!("{}:cluster:{name}", support::run_id())
    }

    fn shared_store(&self) -> bool {
        true
    }

    async fn gated(&self) -> Option<pressure_core::contract::Gated<RedisBackend>> {
        Some(support::gated_cluster_broker().await)
    }

    async fn shifted_broker(&self) -> (ResourceBroker<RedisBackend>, pressure_core::clock::WallShift) {
        support::shifted_broker_with(RedisConfig {
            cluster_nodes: support::cluster_nodes(),
            timeout_ms: support::TIMEOUT_MS,
            connect_timeout_ms: support::CONNECT_TIMEOUT_MS,
            ..RedisConfig::default()
        })
        .await
    }
}

pressure_core::contract_suite!(Cluster);

async fn keyslot(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(conn)
        .await
        .expect("CLUSTER KEYSLOT answers")
}

/// The two keys of one resource share a slot (so one script can touch both),
/// while resources whose ids differ only by hostile characters — braces,
/// colons, spaces, unicode — land in slots of their own.
#[tokio::test]
async fn one_slot_per_resource_and_distinct_slots_across_resources() {
    let node = support::cluster_nodes()
        .into_iter()
        .next()
        .expect("a cluster node");
    let client = redis::Client::open(node.as_str()).expect("valid node url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("the cluster node answers");
    let ids = [
        "tenant",
        "tenant}",
        "{tenant}",
        "{tenant",
        "tenant:s",
        "tenant}:s",
        "tenant 1",
        "tenant%201",
        "}{",
        "{}",
        "",
        "日本語",
        "gateway:tenant:x}:c",
        "a{b}c",
        "model {gpt} : eu-west",
    ];
    let prefix = RedisConfig::default().key_prefix;
    let mut slots: HashMap<i64, &str> = HashMap::new();
    for id in ids {
        let k = ResourceKeys::new(&prefix, id);
        let state = keyslot(&mut conn, &k.state).await;
        // Any other key of the same resource (same hash tag) lands in the
        // same slot: the tag, not the rest of the key, decides.
        let sibling = k.sibling("q");
        let other = keyslot(&mut conn, &sibling).await;
        assert_eq!(state, other, "{id:?}: {} and {sibling} share a slot", k.state);
        if let Some(other) = slots.insert(state, id) {
            panic!("{id:?} and {other:?} land in the same slot {state}");
        }
    }
    assert_eq!(slots.len(), ids.len());
}

/// One master of a cluster of the test's own frozen: only the resources
/// whose slots it serves follow the failure mode; a resource on another
/// master keeps counting in Redis, and the status names the one shard out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_frozen_master_lifts_only_its_own_slots() {
    use pressure_core::{AcquireOptions, Limits};
    use pressure_redis::FailureMode;
    use std::time::Duration;
    let cluster = tokio::task::spawn_blocking(support::RedisCluster::start)
        .await
        .expect("cluster starts");
    let b = support::broker_with(RedisConfig {
        cluster_nodes: cluster.urls(),
        failure_mode: FailureMode::Closed,
        timeout_ms: support::TIMEOUT_MS,
        connect_timeout_ms: support::CONNECT_TIMEOUT_MS,
        ..RedisConfig::default()
    })
    .await;
    // A resource on the first master (slots 0..5461) and one on the last
    // (10923..16384).
    let client = redis::Client::open(cluster.urls()[0].as_str()).expect("url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("connects");
    let prefix = b.backend().config().key_prefix.clone();
    let (mut first, mut last) = (None, None);
    for i in 0..1_000 {
        let id = format!("shard-{i}");
        let slot = keyslot(&mut conn, &ResourceKeys::new(&prefix, &id).state).await;
        if slot < 5_461 && first.is_none() {
            first = Some(id);
        } else if slot >= 10_923 && last.is_none() {
            last = Some(id);
        }
    }
    let (first, last) = (
        first.expect("a key on the first"),
        last.expect("a key on the last"),
    );
    for id in [&first, &last] {
        b.register_limit(id, Limits::default().requests_per_minute(1_000))
            .expect("valid");
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while b.backend().status().shards != 3 {
        assert!(tokio::time::Instant::now() < deadline, "slot map never read");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Traffic before the freeze: each master has the acquire script (a
    // first EVALSHA's NOSCRIPT makes the client load it on every master,
    // the frozen one too, and wait for all).
    for id in [&first, &last] {
        let a = b
            .try_acquire(id, AcquireOptions::default())
            .await
            .expect("answers");
        assert!(a.allowed());
    }
    let node = cluster.node(0).expect("first master");
    node.pause(true);
    // The frozen master's resource: one timeout, then the failure mode.
    let a = b
        .try_acquire(&first, AcquireOptions::default())
        .await
        .expect("answers");
    assert!(!a.allowed(), "closed refuses on the frozen shard");
    // The other's: counted in Redis, every call.
    for n in 2..=21u64 {
        let a = b
            .try_acquire(&last, AcquireOptions::default())
            .await
            .expect("answers");
        assert!(
            a.allowed(),
            "call {n} on a healthy shard: {:?}",
            b.backend().status()
        );
    }
    let st = b.backend().status();
    node.pause(false);
    assert_eq!(
        st.unhealthy_shards,
        vec![format!("127.0.0.1:{}", node.port())],
        "{st:?}"
    );
    assert!(!st.healthy && st.transitions == 1, "{st:?}");
    let s = b.resource_stats(&last).await.expect("stats");
    assert_eq!(s.usage.get("requestsPerMinute").copied(), Some(21), "{s:?}");
}

/// The levels of a hierarchy registered in one group share a hash slot
/// (the group's tag), whatever their ids: a nest over them is one script
/// call. A nest over ungrouped resources in different slots is refused as
/// unsupported (no CROSSSLOT from Redis), and charges nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_hierarchy_is_one_slot_and_a_nest_across_slots_is_unsupported() {
    use pressure_core::{AcquireOptions, BackendError, Error, LimitTemplate, Limits, Nest};
    let b = Cluster.broker().await;
    let node = support::cluster_nodes()
        .into_iter()
        .next()
        .expect("a cluster node");
    let client = redis::Client::open(node.as_str()).expect("valid node url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("the cluster node answers");
    let prefix = b.backend().config().key_prefix.clone();
    let root = Cluster.unique("org {acme}");
    let ids = [Cluster.unique("key:1"), Cluster.unique("team }x{"), root.clone()];
    let template = LimitTemplate::new(&Limits::default().requests_per_minute(10)).expect("valid");
    let mut levels = Vec::new();
    let mut slots = Vec::new();
    for id in &ids {
        levels.push(b.lazy_limit_in_group(id, &root, &template).expect("registers"));
        slots.push(keyslot(&mut conn, &ResourceKeys::grouped(&prefix, &root, id).state).await);
    }
    assert!(slots.iter().all(|s| *s == slots[0]), "{slots:?}");
    let nest = Nest::new(levels);
    let granted = nest
        .try_acquire(AcquireOptions::default())
        .await
        .expect("one slot: answers");
    assert!(granted.allowed());
    for id in &ids {
        let s = b.resource_stats(id).await.expect("stats");
        assert_eq!(s.usage.get("requestsPerMinute").copied(), Some(1), "{id}");
    }

    // A root registered without a group (its keys never move) shares the
    // slot of the members registered in its group.
    let root2 = Cluster.unique("org-plain");
    let members = [Cluster.unique("team-of-plain"), Cluster.unique("key-of-plain")];
    let root_h = b.lazy_limit(&root2, &template).expect("registers");
    assert_eq!(
        keyslot(&mut conn, &ResourceKeys::new(&prefix, &root2).state).await,
        keyslot(
            &mut conn,
            &ResourceKeys::grouped(&prefix, &root2, &members[0]).state
        )
        .await
    );
    let mut levels: Vec<_> = members
        .iter()
        .rev()
        .map(|id| b.lazy_limit_in_group(id, &root2, &template).expect("registers"))
        .collect();
    levels.push(root_h);
    assert!(Nest::new(levels)
        .try_acquire(AcquireOptions::default())
        .await
        .expect("one slot: answers")
        .allowed());
    for id in members.iter().chain([&root2]) {
        let s = b.resource_stats(id).await.expect("stats");
        assert_eq!(s.usage.get("requestsPerMinute").copied(), Some(1), "{id}");
    }

    // Ungrouped resources in two different slots.
    let (mut a, mut z) = (None, None);
    for i in 0..1_000 {
        let id = Cluster.unique(&format!("loose-{i}"));
        let slot = keyslot(&mut conn, &ResourceKeys::new(&prefix, &id).state).await;
        if slot < 5_461 && a.is_none() {
            a = Some(id);
        } else if slot >= 10_923 && z.is_none() {
            z = Some(id);
        }
    }
    let (a, z) = (a.expect("a low slot"), z.expect("a high slot"));
    for id in [&a, &z] {
        b.register_limit(id, Limits::default().requests_per_minute(10))
            .expect("valid");
    }
    let loose = Nest::new(vec![
        b.resource(&a).expect("registered"),
        b.resource(&z).expect("registered"),
    ]);
    let e = loose
        .try_acquire(AcquireOptions::default())
        .await
        .expect_err("across slots");
    assert!(
        matches!(&e.error, Error::Backend(BackendError::Unsupported(m)) if m.contains("slot")),
        "{e}"
    );
    for id in [&a, &z] {
        let s = b.resource_stats(id).await.expect("stats");
        assert_eq!(s.usage.get("requestsPerMinute").copied().unwrap_or(0), 0, "{id}");
    }

    // Moved to a group (a tenant re-parented): the same nest now works,
    // on the group's keys.
    let group = Cluster.unique("moved-root");
    let moved: Vec<_> = [&a, &z]
        .into_iter()
        .map(|id| b.lazy_limit_in_group(id, &group, &template).expect("moves"))
        .collect();
    let nest = Nest::new(moved);
    assert!(nest
        .try_acquire(AcquireOptions::default())
        .await
        .expect("one slot now")
        .allowed());
    assert!(loose
        .try_acquire(AcquireOptions::default())
        .await
        .expect("the old handles follow the move")
        .allowed());
    for id in [&a, &z] {
        let s = b.resource_stats(id).await.expect("stats");
        assert_eq!(s.usage.get("requestsPerMinute").copied(), Some(2), "{id}");
    }
}
