//! Redis memory per idle resource, per limit shape: what one tenant seen once
//! costs the store until its key expires (`cargo bench -p pressure-redis
//! --bench redis_memory`).
//!
//! For each shape, `N` (default 2,000; `PRESSURE_MEMORY_N`) resources are
//! registered on a `RedisBackend` over a `redis-server` of the bench's own
//! (`pressure-testkit`, free loopback port), each takes one acquisition and
//! gives its permit back — a tenant that made one request — and the bench
//! reports, per resource: `MEMORY USAGE` of its key (the key, its hash
//! fields and Redis's per-key overhead, `SAMPLES 0`), the growth of
//! `used_memory` divided by `N` (what the server really pays, allocator
//! rounding included), the key's PTTL (how long it is paid for) and the
//! number of hash fields. One line per shape, then a Markdown table.

use pressure_core::{AcquireOptions, Limits, ResourceBroker};
use pressure_redis::keys::ResourceKeys;
use pressure_redis::{RedisBackend, RedisConfig};
use pressure_testkit::RedisServer;
use std::time::Duration;

async fn used_memory(c: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(c)
        .await
        .expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory in INFO")
}

struct Row {
    shape: &'static str,
    memory_usage: u64,
    used_per_key: u64,
    pttl_ms: i64,
    fields: u64,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    eprintln!("{}", pressure_testkit::machine("before"));
    let n: usize = std::env::var("PRESSURE_MEMORY_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let srv = RedisServer::start();
    let client = redis::Client::open(srv.url()).expect("url");
    let mut admin = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis answers");
    let backend = RedisBackend::connect(RedisConfig {
        timeout_ms: 1_000,
        ..RedisConfig::new(srv.url())
    })
    .await
    .expect("redis answers");
    let broker = ResourceBroker::builder(backend).build();
    let lease = Duration::from_secs(30);
    let shapes: [(&str, Limits); 6] = [
        (
            "requestsPerSecond window",
            Limits::default().requests_per_second(5),
        ),
        (
            "requestsPerMinute window",
            Limits::default().requests_per_minute(6_000),
        ),
        (
            "requestsPerMinute gcra",
            Limits::default().requests_per_minute(60).gcra(Some(10)),
        ),
        (
            "maxConcurrentRequests",
            Limits::default().max_concurrent_requests(64).lease_ttl(lease),
        ),
        (
            "tokensPerMinute window",
            Limits::default().tokens_per_minute(100_000),
        ),
        (
            "requestsPerMinute + tokensPerMinute + maxConcurrentRequests",
            Limits::default()
                .requests_per_minute(6_000)
                .tokens_per_minute(100_000)
                .max_concurrent_requests(64)
                .lease_ttl(lease),
        ),
    ];
    let mut rows = Vec::new();
    for (s, (shape, limits)) in shapes.into_iter().enumerate() {
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut admin)
            .await
            .expect("FLUSHALL");
        let before = used_memory(&mut admin).await;
        let mut keys = Vec::with_capacity(n);
        for i in 0..n {
            let id = format!("gateway:tenant:t{s}-{i:06}");
            broker.register_limit(&id, limits.clone()).expect("valid");
            let a = broker
                .try_acquire(&id, AcquireOptions::default().tokens(200, 0))
                .await
                .expect("answers");
            assert!(a.allowed(), "{shape}: the first acquisition fits");
            drop(a);
            keys.push(ResourceKeys::new("pressure", &id).state);
        }
        // The permits' releases are delivered in the background.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let after = used_memory(&mut admin).await;
        let sample = &keys[n / 2];
        let memory_usage: u64 = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(sample)
            .arg("SAMPLES")
            .arg(0)
            .query_async(&mut admin)
            .await
            .expect("MEMORY USAGE");
        let pttl_ms: i64 = redis::cmd("PTTL")
            .arg(sample)
            .query_async(&mut admin)
            .await
            .expect("PTTL");
        let fields: u64 = redis::cmd("HLEN")
            .arg(sample)
            .query_async(&mut admin)
            .await
            .expect("HLEN");
        let row = Row {
            shape,
            memory_usage,
            used_per_key: after.saturating_sub(before) / n as u64,
            pttl_ms,
            fields,
        };
        println!(
            "{}: MEMORY USAGE {} B, used_memory/key {} B, PTTL {} ms, {} fields",
            row.shape, row.memory_usage, row.used_per_key, row.pttl_ms, row.fields
        );
        rows.push(row);
        // Forget the resources: the next shape starts from an empty broker.
        for i in 0..n {
            let _ = broker.unregister(&format!("gateway:tenant:t{s}-{i:06}"));
        }
    }
    println!();
    println!("| shape (one acquisition, then idle) | MEMORY USAGE | used_memory per key | hash fields | expires after |");
    println!("|---|---:|---:|---:|---:|");
    for r in rows {
        println!(
            "| {} | {} B | {} B | {} | {:.1} s |",
            r.shape,
            r.memory_usage,
            r.used_per_key,
            r.fields,
            r.pttl_ms as f64 / 1_000.0
        );
    }
    eprintln!("{}", pressure_testkit::machine("after"));
}
