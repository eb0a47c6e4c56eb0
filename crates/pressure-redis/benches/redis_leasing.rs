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
//! A second table is the *saturated* key: `requestsPerSecond` =
//! `BENCH_SAT_N` (default 2 000), far below the offered rate, leasing
//! `maxShare` 0.1 and `ttlMs` `BENCH_SAT_TTL_MS` (default 50, the range the
//! docs advise for per-second limits): store operations per decision and
//! the share of N used (admissions over N × seconds; the lease bound says
//! at least W / (W + ttl + 2W/30) when every admission is leased). The
//! deny cache is on (the default), so most refusals cost no call either
//! way.
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

/// What one case measured.
struct Measured {
    decisions_per_s: f64,
    ops_per_decision: f64,
    admitted: u64,
}

/// One case: decisions per second and EVALSHA calls per decision, on a key
/// whose limit is never reached (`saturated` `None`) or `Some((N, ttl_ms))`
/// a second.
async fn case(
    url: &str,
    instances: usize,
    leasing: bool,
    secs: u64,
    tasks: usize,
    saturated: Option<(u64, u64)>,
) -> Measured {
    let id = format!("lbench:{instances}:{leasing}:{}", saturated.is_some());
    let mut limits = match saturated {
        None => Limits::default().requests_per_minute(1_000_000_000),
        Some((n, _)) => Limits::default().requests_per_second(n),
    };
    if leasing {
        let ttl_ms = saturated.map_or(1_000, |(_, ttl)| ttl);
        limits = limits.leasing(Leasing::new(100_000, ttl_ms));
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
    if saturated.is_some() {
        // The warm-up's admissions leave the window before the run.
        tokio::time::sleep(Duration::from_millis(1_100)).await;
    }
    let mut c = redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .expect("connects");
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query::<()>(&mut c)
        .expect("resetstat");
    let decisions = Arc::new(AtomicU64::new(0));
    let admitted = Arc::new(AtomicU64::new(0));
    let start = tokio::time::Instant::now();
    let end = start + Duration::from_secs(secs);
    let mut handles = Vec::new();
    for b in &brokers {
        for _ in 0..tasks {
            let (b, id) = (Arc::clone(b), id.clone());
            let (decisions, admitted) = (Arc::clone(&decisions), Arc::clone(&admitted));
            handles.push(tokio::spawn(async move {
                let (mut n, mut yes) = (0, 0);
                while tokio::time::Instant::now() < end {
                    if let Ok(a) = b.try_acquire(&id, AcquireOptions::default()).await {
                        yes += u64::from(a.allowed());
                    }
                    n += 1;
                    tokio::task::yield_now().await;
                }
                decisions.fetch_add(n, Ordering::Relaxed);
                admitted.fetch_add(yes, Ordering::Relaxed);
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
    Measured {
        decisions_per_s: d as f64 / elapsed,
        ops_per_decision: ops as f64 / d.max(1) as f64,
        admitted: admitted.load(Ordering::Relaxed),
    }
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
        let off = case(&url, instances, false, secs, tasks, None).await;
        println!(
            "| {instances} | off | {:.0} | {:.4} | 1.0 |",
            off.decisions_per_s, off.ops_per_decision
        );
        let on = case(&url, instances, true, secs, tasks, None).await;
        println!(
            "| {instances} | on | {:.0} | {:.4} | {:.1} |",
            on.decisions_per_s,
            on.ops_per_decision,
            on.decisions_per_s / off.decisions_per_s
        );
    }
    let (n, ttl_ms) = (
        env("BENCH_SAT_N", 2_000).max(1),
        env("BENCH_SAT_TTL_MS", 50).clamp(10, 60_000),
    );
    let w = 1_000.0;
    println!();
    println!(
        "Saturated: requestsPerSecond N = {n}, leasing maxShare 0.1, ttlMs {ttl_ms} \
         (all-leased floor W / (W + ttl + 2W/30) = {:.3})",
        w / (w + ttl_ms as f64 + 2.0 * w / 30.0)
    );
    println!();
    println!("| instances | leasing | decisions/s | store ops/decision | admitted/s | used share of N |");
    println!("|---|---|---|---|---|---|");
    for instances in [1, 4] {
        for leasing in [false, true] {
            let m = case(&url, instances, leasing, secs, tasks, Some((n, ttl_ms))).await;
            let per_s = m.admitted as f64 / secs as f64;
            println!(
                "| {instances} | {} | {:.0} | {:.4} | {per_s:.0} | {:.3} |",
                if leasing { "on" } else { "off" },
                m.decisions_per_s,
                m.ops_per_decision,
                per_s / n as f64
            );
        }
    }
    eprintln!("{}", pressure_testkit::machine("after"));
}
