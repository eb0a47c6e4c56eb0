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
