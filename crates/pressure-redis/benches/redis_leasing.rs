//! Quota leasing on one hot key: decisions per second and store
//! operations per decision for 1 and 4 instances (separate `RedisBackend`s
//! in one process), leasing off and on, against a `redis-server` of its own.
//!
//! Each instance runs `BENCH_TASKS` (default 8) tasks deciding in a closed
//! loop for `BENCH_SECS` (default 3) on one resource whose limit is never
//! reached (`requestsPerMinute` = 10⁹; leasing `maxShare` 0.1, `ttlMs`
//! 1000). Store operations are the server's `EVALSHA` calls
//! (`INFO commandstats` after `CONFIG RESETSTAT`): acquisitions, lease
//! takes and give-backs. Prints the machine before and after and one table.
//!
//! ```text
//! cargo bench -p pressure-redis --bench redis_leasing
//! ```

use pressure_core::{AcquireOptions, Leasing, Limits, ResourceBroker};
use pressure_redis::{RedisBackend, RedisConfig};
use pressure_testkit::RedisServer;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn evalsha_calls(c: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(c)
        .unwrap_or_default();
    info.lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// One case: decisions per second and EVALSHA calls per decision.
async fn case(url: &str, instances: usize, leasing: bool, secs: u64, tasks: usize) -> (f64, f64) {
    let id = format!("lbench:{instances}:{leasing}");
    let mut limits = Limits::default().requests_per_minute(1_000_000_000);
    if leasing {
        limits = limits.leasing(Leasing::new(100_000, 1_000));
    }
    let mut brokers = Vec::new();
    for _ in 0..instances {
        let backend = RedisBackend::connect(RedisConfig {
            timeout_ms: 1_000,
            ..RedisConfig::new(url)
        })
        .await
        .expect("redis answers");
        let b = ResourceBroker::builder(backend).build();
        b.register_limit(&id, limits.clone()).expect("valid");
        // Warm: scripts loaded, the key hot.
        for _ in 0..100 {
            let _ = b.try_acquire(&id, AcquireOptions::default()).await;
        }
        brokers.push(Arc::new(b));
    }
    let mut c = redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .expect("connects");
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query::<()>(&mut c)
        .expect("resetstat");
    let decisions = Arc::new(AtomicU64::new(0));
    let start = tokio::time::Instant::now();
    let end = start + Duration::from_secs(secs);
    let mut handles = Vec::new();
    for b in &brokers {
        for _ in 0..tasks {
            let (b, id, decisions) = (Arc::clone(b), id.clone(), Arc::clone(&decisions));
            handles.push(tokio::spawn(async move {
                let mut n = 0;
                while tokio::time::Instant::now() < end {
                    let _ = b.try_acquire(&id, AcquireOptions::default()).await;
                    n += 1;
                    tokio::task::yield_now().await;
                }
                decisions.fetch_add(n, Ordering::Relaxed);
            }));
        }
    }
    for h in handles {
        h.await.expect("task");
    }
    let elapsed = start.elapsed().as_secs_f64();
    let d = decisions.load(Ordering::Relaxed);
    let ops = evalsha_calls(&mut c);
    drop(brokers);
    (d as f64 / elapsed, ops as f64 / d.max(1) as f64)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    eprintln!("{}", pressure_testkit::machine("before"));
    let secs = env("BENCH_SECS", 3);
    let tasks = env("BENCH_TASKS", 8) as usize;
    let srv = RedisServer::start();
    let url = srv.url();
    println!("| instances | leasing | decisions/s | store ops/decision | × vs off |");
    println!("|---|---|---|---|---|");
    for instances in [1, 4] {
        let (off, off_ops) = case(&url, instances, false, secs, tasks).await;
        println!("| {instances} | off | {off:.0} | {off_ops:.4} | 1.0 |");
        let (on, on_ops) = case(&url, instances, true, secs, tasks).await;
        println!("| {instances} | on | {on:.0} | {on_ops:.4} | {:.1} |", on / off);
    }
    eprintln!("{}", pressure_testkit::machine("after"));
}
