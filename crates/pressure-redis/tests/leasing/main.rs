//! Quota leasing (`"leasing"` on a limit): fleets of two and four
//! instances (separate `RedisBackend`s, separate connections) hammering one
//! hot key, on a Redis and on the 3-master cluster; a killed instance; a
//! cold key.
//!
//! What is measured honestly: each admission is stamped on the instance
//! side with the local time just before and just after its decision (the
//! true admission time — in Redis for a store grant, in memory for a leased
//! one — lies between), and no interval of length W may *certainly* hold
//! more than N (admissions whose whole stamp interval lies inside it). The
//! store's own count, sampled by the usage script, must never exceed N.

#[path = "../support.rs"]
mod support;

use pressure_core::{AcquireOptions, Acquisition, Leasing, Limits, ResourceBroker};
use pressure_redis::keys::ResourceKeys;
use pressure_redis::{RedisBackend, RedisConfig};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

const N: u64 = 1_000;
const W: Duration = Duration::from_secs(1);

fn hot_limits(ttl_ms: u64) -> Limits {
    Limits::default()
        .requests_per_second(N)
        .leasing(Leasing::new(100_000, ttl_ms))
}

/// Admissions of one instance: (before, after) its decision, in ns since
/// the shared start.
type Stamps = Vec<(u64, u64)>;

/// Drives `id` from one broker per config for `windows` windows, each in
/// a tight loop (`pace` `None`: saturation) or one decision per `pace`; returns every admission's stamps (sorted) and the
/// largest count the store reported while they ran, and the decisions the
/// instances answered from leases in memory.
async fn hammer(
    configs: Vec<RedisConfig>,
    id: &str,
    limits: Limits,
    windows: u32,
    pace: Option<Duration>,
) -> (Stamps, u64, u64) {
    let mut brokers = Vec::new();
    for c in configs {
        let b = support::broker_with(c).await;
        b.register_limit(id, limits.clone()).expect("valid");
        brokers.push(Arc::new(b));
    }
    let start = Instant::now();
    let end = start + W * windows;
    let mut tasks = Vec::new();
    for b in &brokers {
        let (b, id) = (Arc::clone(b), id.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut stamps = Vec::new();
            let mut tick = pace.map(tokio::time::interval);
            while Instant::now() < end {
                if let Some(t) = &mut tick {
                    t.tick().await;
                }
                let before = start.elapsed().as_nanos() as u64;
                let a = b
                    .try_acquire(&id, AcquireOptions::default())
                    .await
                    .expect("answers");
                let after = start.elapsed().as_nanos() as u64;
                if let Acquisition::Granted(_) = a {
                    stamps.push((before, after));
                }
                tokio::task::yield_now().await;
            }
            stamps
        }));
    }
    // The store's own count, sampled while the fleet runs.
    let sampler = {
        let (b, id) = (Arc::clone(&brokers[0]), id.to_owned());
        tokio::spawn(async move {
            let mut peak = 0;
            while Instant::now() < end {
                for s in b.stats().await {
                    if s.resource == id {
                        peak = peak.max(s.usage.get("requestsPerSecond").copied().unwrap_or(0));
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            peak
        })
    };
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("instance"));
    }
    all.sort_unstable();
    let leased = brokers
        .iter()
        .map(|b| b.backend().status().leased_decisions)
        .sum();
    (all, sampler.await.expect("sampler"), leased)
}

/// Most admissions whose whole stamp interval lies in some [x, x + w).
fn certainly_in_any_window(stamps: &[(u64, u64)], w: u64) -> usize {
    let mut best = 0;
    for (i, &(x, _)) in stamps.iter().enumerate() {
        let n = stamps[i..]
            .iter()
            .take_while(|(b, _)| *b < x + w)
            .filter(|(_, a)| *a < x + w)
            .count();
        best = best.max(n);
    }
    best
}

/// Admissions in whole windows after the first (whose burst would flatter
/// the figure), as a share of N.
fn used_share(stamps: &[(u64, u64)], windows: u64) -> f64 {
    let w = W.as_nanos() as u64;
    let (start, end) = (w, windows * w);
    let n = stamps.iter().filter(|(b, _)| *b >= start && *b < end).count();
    n as f64 / (N * (windows - 1)) as f64
}

/// A fleet on `configs` under saturation (a short lease: the used share
/// must reach 90 %), or paced at one decision per ms per instance with a
/// longer lease whose units are used throughout its life (the case where
/// a batch counted only at its start would exceed N).
async fn fleet(configs: Vec<RedisConfig>, name: &str, paced: bool) {
    let instances = configs.len();
    let id = format!("{}:leasing:{name}:{paced}", support::run_id());
    let windows = 4;
    let (ttl_ms, pace) = if paced {
        (200, Some(Duration::from_millis(1)))
    } else {
        (20, None)
    };
    let (stamps, store_peak, leased) = hammer(configs, &id, hot_limits(ttl_ms), windows, pace).await;
    let peak = certainly_in_any_window(&stamps, W.as_nanos() as u64);
    let used = used_share(&stamps, u64::from(windows));
    println!(
        "leasing {name} (paced: {paced}, ttl {ttl_ms} ms): {instances} instances, {} admitted, peak {peak} in any W (N = {N}), \
         store count peak {store_peak}, used {:.1} % of N, {leased} decided from leases",
        stamps.len(),
        used * 100.0
    );
    assert!(
        peak as u64 <= N,
        "{peak} admissions certainly within one W > N = {N}"
    );
    assert!(store_peak <= N, "the store counted {store_peak} > N = {N}");
    if !paced {
        assert!(used >= 0.90, "used share {used}");
    }
    assert!(
        leased * 2 > stamps.len() as u64,
        "most admissions come from leases: {leased} of {}",
        stamps.len()
    );
}

fn configs(count: usize, base: impl Fn() -> RedisConfig) -> Vec<RedisConfig> {
    (0..count).map(|_| base()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_and_four_instances_never_exceed_n_and_use_the_limit() {
    for paced in [false, true] {
        fleet(configs(2, || support::config(support::redis_url())), "two", paced).await;
        fleet(
            configs(4, || support::config(support::redis_url())),
            "four",
            paced,
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_on_the_cluster_never_exceed_n() {
    let cluster = || RedisConfig {
        cluster_nodes: support::cluster_nodes(),
        ..support::config(String::new())
    };
    fleet(configs(4, cluster), "cluster", false).await;
    fleet(configs(4, cluster), "cluster", true).await;
}

/// The lease records (`q:<id>` fields) in the resource's hash, and `q`.
fn records(url: &str, key: &str) -> (Vec<(String, String)>, u64) {
    let mut c = redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .expect("connects");
    let all: Vec<(String, String)> = redis::cmd("HGETALL").arg(key).query(&mut c).expect("hgetall");
    let q = all
        .iter()
        .find(|(f, _)| f == "q")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    (all.into_iter().filter(|(f, _)| f.starts_with("q:")).collect(), q)
}

/// Decides `count` times as fast as it can.
async fn burst(b: &ResourceBroker<RedisBackend>, id: &str, count: usize) {
    for _ in 0..count {
        let _ = b
            .try_acquire(id, AcquireOptions::default())
            .await
            .expect("answers");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instance_gives_its_lease_budget_back_within_its_ttl() {
    let id = format!("{}:leasing:killed", support::run_id());
    let ttl = Duration::from_millis(300);
    // A long window: the units stay counted, only the budget comes back.
    let limits = Limits::default()
        .requests_per_minute(100_000)
        .leasing(Leasing::new(500_000, ttl.as_millis() as u64));
    let url = support::redis_url();
    let dead = support::broker_with(support::config(url.clone())).await;
    dead.register_limit(&id, limits.clone()).expect("valid");
    let key = ResourceKeys::new(&dead.backend().config().key_prefix, &id).state;
    burst(&dead, &id, 200).await;
    let (held, q) = records(&url, &key);
    assert_eq!(held.len(), 1, "the hot instance holds one lease: {held:?}");
    assert!(q > 0, "its units are in the budget");
    // Killed: no drop, nothing given back.
    std::mem::forget(dead);

    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    let live = support::broker_with(support::config(url.clone())).await;
    live.register_limit(&id, limits).expect("valid");
    burst(&live, &id, 200).await;
    let (now_held, q_now) = records(&url, &key);
    assert!(
        now_held.iter().all(|r| !held.contains(r)),
        "the dead lease's record was swept: {now_held:?} (dead: {held:?})"
    );
    let sum: u64 = now_held
        .iter()
        .filter_map(|(_, v)| v.split(' ').nth(1)?.parse::<u64>().ok())
        .sum();
    assert_eq!(q_now, sum, "the budget counts the live leases only");
    drop(live);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_key_makes_one_store_call_per_decision_like_leasing_off() {
    // A Redis of its own: its command counts are this test's alone.
    let srv = support::RedisServer::start();
    let config = RedisConfig {
        deny_cache: false,
        ..support::config(srv.url())
    };
    let b = support::broker_with(config).await;
    let on = format!("{}:leasing:cold-on", support::run_id());
    let off = format!("{}:leasing:cold-off", support::run_id());
    let base = Limits::default().requests_per_minute(5);
    b.register_limit(&on, base.clone().leasing(Leasing::new(1_000_000, 1_000)))
        .expect("valid");
    b.register_limit(&off, base).expect("valid");
    let mut c = support::conn(&srv);
    let evalsha = |c: &mut redis::Connection| -> u64 {
        let info: String = redis::cmd("INFO").arg("commandstats").query(c).expect("info");
        info.lines()
            .find(|l| l.starts_with("cmdstat_evalsha:"))
            .and_then(|l| l.split("calls=").nth(1))
            .and_then(|v| v.split(',').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let decide = |id: &str| {
        let (b, id) = (&b, id.to_owned());
        async move {
            match b
                .try_acquire(&id, AcquireOptions::default())
                .await
                .expect("answers")
            {
                Acquisition::Granted(_) => None,
                Acquisition::Denied(d) => Some(d.dimension),
            }
        }
    };
    // Load the scripts (a first EVALSHA may meet NOSCRIPT).
    let (_, _) = (decide(&on).await, decide(&off).await);
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query::<()>(&mut c)
        .expect("resetstat");
    let steps = 8;
    for _ in 0..steps {
        // 2.5 decisions per lease TTL: below the rate that leases.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let (a, z) = (decide(&on).await, decide(&off).await);
        assert_eq!(a, z, "leasing on and off decide alike on a cold key");
    }
    assert_eq!(
        evalsha(&mut c),
        2 * steps,
        "one store call per decision, on and off"
    );
    let stats = b.stats().await;
    let allowed = |id: &str| {
        stats
            .iter()
            .find(|s| s.resource == id)
            .map(|s| (s.allowed, s.denied))
    };
    assert_eq!(allowed(&on), allowed(&off));
    assert_eq!(
        allowed(&on),
        Some((5, 4)),
        "5 per minute: 5 granted, then denials"
    );
    let status = b.backend().status();
    assert_eq!(
        (status.lease_calls, status.leased_decisions),
        (0, 0),
        "no lease on a cold key"
    );
}

/// A leased unit may be used until its lease ends, so the store counts the
/// batch from the lease's end, not from its start (a batch counted at its
/// start would leave the window while its last units are still in use).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_counts_from_the_end_of_its_lease() {
    let url = support::redis_url();
    let b = support::broker_with(support::config(url.clone())).await;
    let ttl_ms = 500;
    let leasing = Leasing::new(500_000, ttl_ms);
    for (name, limits) in [
        ("window", Limits::default().requests_per_second(N)),
        ("gcra", Limits::default().requests_per_second(N).gcra(None)),
    ] {
        let id = format!("{}:leasing:dated:{name}", support::run_id());
        b.register_limit(&id, limits.clone().leasing(leasing))
            .expect("valid");
        let key = ResourceKeys::new(&b.backend().config().key_prefix, &id).state;
        burst(&b, &id, 10).await;
        let (held, _) = records(&url, &key);
        assert_eq!(held.len(), 1, "{name}: one lease held: {held:?}");
        let mut rec = held[0].1.split(' ').map(|v| v.parse::<u64>().expect("number"));
        let (end_us, units) = (rec.next().expect("expiry"), rec.next().expect("units"));
        assert!(units > 0, "{name}: a batch");
        let mut c = support::conn_url(&url);
        let fields: Vec<(String, String)> = redis::cmd("HGETALL").arg(&key).query(&mut c).expect("hgetall");
        let get = |f: &str| {
            fields
                .iter()
                .find(|(k, _)| k == f)
                .map(|(_, v)| v.parse::<u64>().unwrap_or(0))
        };
        if name == "window" {
            // Sub-window fields `w0:<k>` of requestsPerSecond, k in steps of W/30.
            let step = 1_000_000u64.div_ceil(30);
            let dated: u64 = fields
                .iter()
                .filter_map(|(f, v)| {
                    let k: u64 = f.strip_prefix("w0:")?.parse().ok()?;
                    (k * step > end_us).then(|| v.parse::<u64>().unwrap_or(0))
                })
                .sum();
            assert!(
                dated > units,
                "window: {dated} units counted after the lease's end {end_us}, batch {units}"
            );
        } else {
            let t = 1_000_000 / N;
            let tat = get("g0").expect("a TAT");
            assert!(
                tat >= end_us + units * t,
                "gcra: TAT {tat} < lease end {end_us} + {units} units"
            );
        }
    }
}

/// A lease call whose caller goes away (its future dropped while the store
/// is frozen) is settled when the store answers: the batch it took goes
/// back whole, and the spent lease it ended too; the store counts only the
/// decisions callers got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_for_a_vanished_caller_goes_back_whole() {
    let srv = support::RedisServer::start();
    let b = support::broker_with(support::config(srv.url())).await;
    let id = format!("{}:leasing:vanished", support::run_id());
    let ttl = Duration::from_millis(300);
    let limits = Limits::default()
        .requests_per_minute(N)
        .leasing(Leasing::new(500_000, ttl.as_millis() as u64));
    b.register_limit(&id, limits).expect("valid");
    let key = ResourceKeys::new(&b.backend().config().key_prefix, &id).state;
    burst(&b, &id, 20).await;
    let calls = b.backend().status().lease_calls;
    assert!(calls > 0, "the key is hot: it leases");
    // The lease runs out; the next decision takes a new one (still hot).
    tokio::time::sleep(ttl + Duration::from_millis(20)).await;
    srv.pause(true);
    let gone = tokio::time::timeout(
        Duration::from_millis(100),
        b.try_acquire(&id, AcquireOptions::default()),
    )
    .await;
    assert!(gone.is_err(), "the caller gave up while the store was frozen");
    assert_eq!(
        b.backend().status().lease_calls,
        calls + 1,
        "a lease call was in flight"
    );
    srv.pause(false);
    let usage = || async {
        let stats = b.stats().await;
        let s = stats.iter().find(|s| s.resource == id).expect("registered");
        s.usage.get("requestsPerMinute").copied().unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (held, q) = records(&srv.url(), &key);
        if held.is_empty() && q == 0 && usage().await == 20 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not settled: records {held:?}, q {q}, usage {} (20 decisions were granted)",
            usage().await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(b.backend().status().cancel_releases > 0, "counted as given back");
}

/// An instance shut down cleanly (its broker dropped) gives its lease back
/// at once, long before the lease's TTL: the budget and the unused units.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_instance_gives_its_lease_back_at_once() {
    let id = format!("{}:leasing:dropped", support::run_id());
    let limits = Limits::default()
        .requests_per_minute(N)
        .leasing(Leasing::new(500_000, 60_000));
    let url = support::redis_url();
    let b = support::broker_with(support::config(url.clone())).await;
    b.register_limit(&id, limits).expect("valid");
    let key = ResourceKeys::new(&b.backend().config().key_prefix, &id).state;
    let observer = support::broker_with(support::config(url.clone())).await;
    observer
        .register_limit(&id, Limits::default().requests_per_minute(N))
        .expect("valid");
    burst(&b, &id, 20).await;
    let (held, q) = records(&url, &key);
    assert!(held.len() == 1 && q > 0, "a lease is held: {held:?}");
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (held, q) = records(&url, &key);
        let stats = observer.stats().await;
        let used = stats
            .iter()
            .find(|s| s.resource == id)
            .and_then(|s| s.usage.get("requestsPerMinute").copied());
        if held.is_empty() && q == 0 && used == Some(20) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not given back: records {held:?}, q {q}, count {used:?} (20 granted)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
