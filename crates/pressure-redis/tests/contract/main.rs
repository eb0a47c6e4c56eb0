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
}

pressure_core::contract_suite!(Redis);
