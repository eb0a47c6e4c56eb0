//! Shared helpers of the Redis tests: the server address, unique ids, and
//! brokers with their own connections.

#![allow(dead_code, unreachable_pub)]

use pressure_core::ResourceBroker;
use pressure_redis::{RedisBackend, RedisConfig};

/// `PRESSURE_REDIS_URL`, or the local default.
pub fn redis_url() -> String {
    std::env::var("PRESSURE_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A prefix unique to this test process, so runs never share state.
pub fn run_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| format!("t{:08x}", rand_u32()))
}

fn rand_u32() -> u32 {
    let t = std::time::SystemTime::UNIX_EPOCH
        .elapsed()
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    t ^ std::process::id().rotate_left(16)
}

/// A broker over a new `RedisBackend` with `config`.
pub async fn broker_with(config: RedisConfig) -> ResourceBroker<RedisBackend> {
    let backend = RedisBackend::connect(config).await.expect("redis answers");
    ResourceBroker::builder(backend).build()
}

/// A broker over a new `RedisBackend` on the test server.
pub async fn broker() -> ResourceBroker<RedisBackend> {
    broker_with(RedisConfig::new(redis_url())).await
}

/// `PRESSURE_REDIS_CLUSTER` (comma-separated node URLs), or the three nodes
/// of `scripts/redis-cluster.sh`.
pub fn cluster_nodes() -> Vec<String> {
    std::env::var("PRESSURE_REDIS_CLUSTER")
        .unwrap_or_else(|_| "redis://127.0.0.1:7101,redis://127.0.0.1:7102,redis://127.0.0.1:7103".into())
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}
