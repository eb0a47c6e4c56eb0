//! Shared helpers of the Redis tests: the server address, unique ids, and
//! brokers with their own connections.
//!
//! The servers come from `pressure-testkit`: a `redis-server` and a
//! 3-master Redis Cluster that the test binary starts on free loopback
//! ports on first use and that go away with it (`PRESSURE_REDIS_URL` /
//! `PRESSURE_REDIS_CLUSTER` point the tests at existing ones instead).
//! Tests that kill, freeze or restart a server start a
//! [`RedisServer`](pressure_testkit::RedisServer) of their own.

#![allow(dead_code, unreachable_pub, unused_imports)]

use pressure_core::ResourceBroker;
use pressure_redis::{RedisBackend, RedisConfig};

pub use pressure_testkit::{cluster_nodes, redis_url, RedisCluster, RedisServer};

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

/// The per-call timeout of the tests' brokers, ms (the failure-mode tests
/// set their own).
///
/// Not the 50 ms default: these tests check what the store decides, and on
/// a loaded machine a call can take longer than 50 ms with nothing wrong;
/// in the default `closed` failure mode that timeout is a refusal with a
/// 1 s wait, which a test then reads as the limit's answer (seen: "wait
/// 1s" from a GCRA bucket whose wait is at most 100 ms).
pub const TIMEOUT_MS: u64 = 1_000;
/// The connect timeout of the tests' brokers, ms: likewise generous (a
/// cluster connection is several round trips).
pub const CONNECT_TIMEOUT_MS: u64 = 5_000;

/// The config of a test broker on `url`: defaults, with [`TIMEOUT_MS`] and
/// [`CONNECT_TIMEOUT_MS`].
pub fn config(url: impl Into<String>) -> RedisConfig {
    RedisConfig {
        timeout_ms: TIMEOUT_MS,
        connect_timeout_ms: CONNECT_TIMEOUT_MS,
        ..RedisConfig::new(url)
    }
}

/// A broker over a new `RedisBackend` with `config`.
pub async fn broker_with(config: RedisConfig) -> ResourceBroker<RedisBackend> {
    let backend = RedisBackend::connect(config).await.expect("redis answers");
    ResourceBroker::builder(backend).build()
}

/// A broker over a new `RedisBackend` on the test server.
pub async fn broker() -> ResourceBroker<RedisBackend> {
    broker_with(config(redis_url())).await
}

/// A broker over `config` without a deny cache, and the shift of its
/// calendar wall time (`RedisBackend::wall_shift`), for the calendar
/// checks that move it.
#[allow(dead_code)]
pub async fn shifted_broker_with(
    config: RedisConfig,
) -> (ResourceBroker<RedisBackend>, pressure_core::clock::WallShift) {
    let b = broker_with(RedisConfig {
        deny_cache: false,
        ..config
    })
    .await;
    let shift = b.backend().wall_shift().clone();
    (b, shift)
}

/// A plain (blocking) connection to `srv`, for assertions.
pub fn conn(srv: &RedisServer) -> redis::Connection {
    redis::Client::open(srv.url())
        .and_then(|c| c.get_connection())
        .expect("connects")
}

/// A plain (blocking) connection to the server at `url`, for assertions.
pub fn conn_url(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .expect("connects")
}

/// A store gate over a server (or cluster) of its own: held, it is frozen
/// (`SIGSTOP`: it reads and answers nothing, its sockets stay open); open,
/// it runs on and answers what it was sent meanwhile.
pub struct Frozen<S> {
    store: S,
    pause: fn(&S, bool),
}

impl<S: Send + Sync> pressure_core::contract::StoreGate for Frozen<S> {
    fn hold(&self) {
        (self.pause)(&self.store, true);
    }
    fn open(&self) {
        (self.pause)(&self.store, false);
    }
}

/// A broker over a Redis of its own, and the gate that freezes it.
pub async fn gated_broker() -> (
    ResourceBroker<RedisBackend>,
    Box<dyn pressure_core::contract::StoreGate>,
) {
    let srv = RedisServer::start();
    let b = broker_with(config(srv.url())).await;
    (
        b,
        Box::new(Frozen {
            store: srv,
            pause: RedisServer::pause,
        }),
    )
}

/// A broker over a Redis Cluster of its own, and the gate that freezes it.
pub async fn gated_cluster_broker() -> (
    ResourceBroker<RedisBackend>,
    Box<dyn pressure_core::contract::StoreGate>,
) {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .expect("cluster starts");
    let b = broker_with(RedisConfig {
        cluster_nodes: cluster.urls(),
        ..config(String::new())
    })
    .await;
    (
        b,
        Box::new(Frozen {
            store: cluster,
            pause: RedisCluster::pause,
        }),
    )
}
