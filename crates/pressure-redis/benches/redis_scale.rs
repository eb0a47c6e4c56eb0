//! Scale on Redis Cluster (issue 24, `docs/scale.md`): a fleet of broker
//! instances as separate OS processes against clusters of 1, 2 and 3
//! masters, on many keys and on one hot key, quota leasing off and on.
//!
//! The bench starts each cluster itself (`pressure-testkit`: loopback free
//! ports, gone when it ends) and re-executes itself as `BENCH_PROCS`
//! (default 4) worker processes per case. Every worker runs `BENCH_TASKS`
//! (default 8) tokio tasks deciding in a closed loop for `BENCH_SECS`
//! (default 3), all workers starting at the same wall-clock instant; each
//! task stops at the end or after `BENCH_MAX_PER_TASK` decisions.
//!
//! Cases, for each cluster size in `BENCH_SHARDS` (default `1,2,3`), of
//! `BENCH_MODES` (default `keys,free,saturated`) in that order, each with
//! `BENCH_LEASING` (default `off,on`, a case per entry, in that order):
//!
//! * **keys** — `BENCH_KEYS` (default 10 000) tenants, every decision on a
//!   random one; each a `requestsPerSecond` limit of 10⁹ (never reached).
//! * **hot, free** — one key every decision, the same limit never reached:
//!   what one key admits per second.
//! * **hot, saturated** — one key every decision, `requestsPerSecond` =
//!   `BENCH_N` (default 2 000), far below the offered rate.
//!
//! Leasing on is `maxShare` `BENCH_SHARE_PPM` / 10⁶ (default 0.1) and
//! `ttlMs` `BENCH_TTL_MS` (default 50). The backend is the
//! default one with `timeoutMs` 1000; its deny cache (on by default: a
//! refusal the store gave until T is repeated locally until T) is off with
//! `BENCH_DENY_CACHE=0`.
//!
//! Per case it prints: decisions/s (sum of the workers); store operations
//! per decision and per admission (script calls — `EVALSHA`, `EVAL`,
//! `FCALL` and their `_RO` forms — from `INFO commandstats` of every
//! master, after minus before, give-backs at worker exit included); the
//! busiest master's script calls/s and the server time per call (`usec`
//! over `calls`: wall time inside the script); the CPU time of all masters
//! per script call (`INFO cpu`, user + sys, I/O included) and of all
//! workers per decision (`/proc/self/task/*/schedstat`), the figures that
//! say how many cores a rate needs; the bytes clients sent and received per script call
//! (`total_net_input_bytes`/`total_net_output_bytes`, same deltas); p50 and
//! p99 latency of one decision (each worker's histogram, merged); and on the
//! saturated hot key the accuracy: every admission is stamped with the wall clock
//! just before and just after its decision (the true admission time lies
//! between), and `max adm/N` is the most admissions *certainly* inside any
//! interval of length W = 1 s (both stamps in it), over N — it must not
//! exceed 1.0 — followed by the most *possibly* inside one (the stamps
//! overlap it): the true worst window lies between the two; `mean adm/N`
//! is the admissions per whole second of the run over N (the used share). Times are measured, never asserted.
//!
//! ```text
//! cargo bench -p pressure-redis --bench redis_scale
//! benches/scale.sh        # the same, with the machine before and after
//! ```

// A bench measures time: the house rule against `Instant::now` and
// `SystemTime::now` (clippy.toml) keeps limiter arithmetic on the injected
// Clock, and nothing here is limiter arithmetic. The workers share the wall
// clock (a common start, admission stamps comparable across processes);
// `tokio::time::Instant::now` takes a lock on every call with the
// `test-util` feature the dev-dependencies enable, which would perturb the
// latencies measured.
#![allow(clippy::disallowed_methods)]

use hdrhistogram::Histogram;
use pressure_core::{AcquireOptions, Acquisition, Leasing, Limits, ResourceBroker};
use pressure_redis::{RedisBackend, RedisConfig};
use pressure_testkit::RedisCluster;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The window of every limit (`requestsPerSecond`).
const W_NS: u64 = 1_000_000_000;
/// The limit of the many-keys and the free hot-key cases: never reached.
const FREE_N: u64 = 1_000_000_000;
/// Environment variable that makes this binary a worker.
const WORKER: &str = "PRESSURE_SCALE_WORKER";

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Nanoseconds since the Unix epoch: the one clock all the worker
/// processes share, for the common start and the admission stamps.
fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn histogram() -> Histogram<u64> {
    // 1 ns .. 60 s, 3 significant digits.
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

fn main() {
    if std::env::var_os(WORKER).is_some() {
        worker();
    } else {
        coordinator();
    }
}

// ---------------------------------------------------------------- worker

/// What one worker is asked to do (from its environment).
#[derive(Debug, Clone)]
struct Spec {
    nodes: Vec<String>,
    /// Resource ids are `<prefix>:<i>`.
    prefix: String,
    keys: u64,
    n: u64,
    leasing: bool,
    share_ppm: u32,
    ttl_ms: u64,
    tasks: usize,
    max_per_task: u64,
    /// Stamp every admission (the saturated hot key).
    stamps: bool,
}

impl Spec {
    fn from_env() -> Self {
        let var = |n: &str| std::env::var(n).unwrap_or_default();
        Self {
            nodes: var("SCALE_NODES").split(',').map(str::to_owned).collect(),
            prefix: var("SCALE_PREFIX"),
            keys: env("SCALE_KEYS", 1).max(1),
            n: env("SCALE_N", 1_000),
            leasing: env("SCALE_LEASING", 0) == 1,
            share_ppm: env("SCALE_SHARE_PPM", 100_000) as u32,
            ttl_ms: env("SCALE_TTL_MS", 50),
            tasks: env("SCALE_TASKS", 8) as usize,
            max_per_task: env("SCALE_MAX_PER_TASK", 50_000_000),
            stamps: env("SCALE_STAMPS", 0) == 1,
        }
    }

    fn limits(&self) -> Limits {
        let mut l = Limits::default().requests_per_second(self.n);
        if self.leasing {
            l = l.leasing(Leasing::new(self.share_ppm, self.ttl_ms));
        }
        l
    }
}

/// One task's tally.
struct Tally {
    decisions: u64,
    admitted: u64,
    errors: u64,
    hist: Histogram<u64>,
    /// Wall-clock (before, after) of each admission on the hot key.
    stamps: Vec<(u64, u64)>,
}

/// Registers the limits, warms up, says `ready`, waits for `go START SECS`
/// on stdin, runs, prints its tally and exits. A hard deadline ends the
/// process whatever happens.
fn worker() {
    let spec = Spec::from_env();
    let hard = Duration::from_secs(env("SCALE_HARD_SECS", 120));
    std::thread::spawn(move || {
        std::thread::sleep(hard);
        eprintln!("scale worker: hard deadline reached, exiting");
        std::process::exit(3);
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(env("SCALE_THREADS", 1).max(1) as usize)
        .enable_all()
        .build()
        .expect("runtime");
    let broker = rt.block_on(async {
        let backend = RedisBackend::connect(RedisConfig {
            cluster_nodes: spec.nodes.clone(),
            timeout_ms: 1_000,
            deny_cache: env("SCALE_DENY_CACHE", 1) == 1,
            ..RedisConfig::default()
        })
        .await
        .expect("the cluster answers");
        let b = ResourceBroker::builder(backend).build();
        for i in 0..spec.keys {
            b.register_limit(format!("{}:{i}", spec.prefix), spec.limits())
                .expect("valid limits");
        }
        // Warm: scripts loaded on every master, connections open.
        for i in 0..200.min(spec.keys * 50) {
            let id = format!("{}:{}", spec.prefix, i % spec.keys);
            let _ = b.try_acquire(&id, AcquireOptions::default()).await;
        }
        Arc::new(b)
    });
    println!("ready");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return;
    }
    let mut words = line
        .split_whitespace()
        .skip(1)
        .map(|w| w.parse::<u64>().unwrap_or(0));
    let (start, secs) = (words.next().unwrap_or(0), words.next().unwrap_or(1));
    let end = start + secs * 1_000_000_000;
    let ids: Arc<Vec<String>> = Arc::new((0..spec.keys).map(|i| format!("{}:{i}", spec.prefix)).collect());
    let cpu_before = cpu_ns();
    let tallies = rt.block_on(async {
        let now = wall_ns();
        if start > now {
            tokio::time::sleep(Duration::from_nanos(start - now)).await;
        }
        let mut handles = Vec::new();
        for _ in 0..spec.tasks {
            let (b, ids, spec) = (Arc::clone(&broker), Arc::clone(&ids), spec.clone());
            handles.push(tokio::spawn(async move { run_task(&b, &ids, &spec, end).await }));
        }
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.expect("task"));
        }
        out
    });
    let cpu = cpu_ns().saturating_sub(cpu_before);
    let status = broker.backend().status();
    let mut hist = histogram();
    let mut out = String::new();
    let (mut d, mut a, mut e) = (0, 0, 0);
    for t in &tallies {
        d += t.decisions;
        a += t.admitted;
        e += t.errors;
        hist.add(&t.hist).expect("same bounds");
        for (b, f) in &t.stamps {
            out.push_str(&format!("s {b} {f}\n"));
        }
    }
    for v in hist.iter_recorded() {
        out.push_str(&format!("h {} {}\n", v.value_iterated_to(), v.count_at_value()));
    }
    out.push_str(&format!(
        "t {d} {a} {e} {} {} {cpu}\n",
        status.lease_calls, status.leased_decisions
    ));
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(out.as_bytes());
    let _ = stdout.flush();
    drop(stdout);
    // Leases still held go back now (counted by the coordinator: it reads
    // the masters' statistics after the workers have exited).
    rt.block_on(async move {
        drop(broker);
        tokio::time::sleep(Duration::from_millis(100)).await;
    });
}

/// CPU time this process's threads have run, ns (the first field of
/// `/proc/self/task/*/schedstat`; 0 where that cannot be read). The
/// threads of a worker live until its end, so a difference is its CPU.
fn cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

async fn run_task(b: &ResourceBroker<RedisBackend>, ids: &[String], spec: &Spec, end: u64) -> Tally {
    let mut t = Tally {
        decisions: 0,
        admitted: 0,
        errors: 0,
        hist: histogram(),
        stamps: Vec::new(),
    };
    let mut x = rand::random::<u64>() | 1;
    while t.decisions < spec.max_per_task {
        let before = wall_ns();
        if before >= end {
            break;
        }
        // xorshift: a uniformly spread key without a syscall.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let id = &ids[(x % ids.len() as u64) as usize];
        let t0 = Instant::now();
        let a = b.try_acquire(id, AcquireOptions::default()).await;
        let ns = t0.elapsed().as_nanos() as u64;
        t.hist.saturating_record(ns.max(1));
        t.decisions += 1;
        match a {
            Ok(Acquisition::Granted(_)) => {
                t.admitted += 1;
                if spec.stamps {
                    t.stamps.push((before, wall_ns()));
                }
            }
            Ok(Acquisition::Denied(_)) => {}
            Err(_) => t.errors += 1,
        }
        // A decision from a lease completes without awaiting: let the
        // other tasks (and the runtime's I/O) run.
        tokio::task::yield_now().await;
    }
    t
}

// ----------------------------------------------------------- coordinator

/// Counters of one master from `INFO`.
#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    scripts: u64,
    /// Server time spent in the scripts, µs (`usec=`).
    usec: u64,
    net_in: u64,
    net_out: u64,
    /// `used_cpu_user` + `used_cpu_sys`, µs.
    cpu_us: u64,
}

fn stats(url: &str) -> Stats {
    let info: String = redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .and_then(|mut c| redis::cmd("INFO").arg("all").query(&mut c))
        .unwrap_or_default();
    let field = |line: &str, name: &str| -> u64 {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let mut s = Stats::default();
    for l in info.lines() {
        let l = l.trim();
        if let Some(rest) = l.strip_prefix("cmdstat_") {
            let (cmd, values) = rest.split_once(':').unwrap_or((rest, ""));
            if matches!(
                cmd,
                "evalsha" | "eval" | "evalsha_ro" | "eval_ro" | "fcall" | "fcall_ro"
            ) {
                s.scripts += field(values, "calls=");
                s.usec += field(values, "usec=");
            }
        } else if let Some(v) = l.strip_prefix("total_net_input_bytes:") {
            s.net_in = v.parse().unwrap_or(0);
        } else if let Some(v) = l.strip_prefix("total_net_output_bytes:") {
            s.net_out = v.parse().unwrap_or(0);
        } else if let Some(v) = l
            .strip_prefix("used_cpu_user:")
            .or_else(|| l.strip_prefix("used_cpu_sys:"))
        {
            s.cpu_us += (v.parse::<f64>().unwrap_or(0.0) * 1e6) as u64;
        }
    }
    s
}

/// What the coordinator asks of every case.
struct Plan {
    procs: usize,
    tasks: u64,
    secs: u64,
    keys: u64,
    n: u64,
    share_ppm: u64,
    ttl_ms: u64,
    threads: u64,
    max_per_task: u64,
    deny_cache: bool,
}

/// The keys of a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `BENCH_KEYS` tenants, limit never reached.
    Keys,
    /// One key, limit never reached: admissions per second on a hot key.
    HotFree,
    /// One key, `BENCH_N`/s, far below the offered rate.
    HotSaturated,
}

impl Mode {
    fn label(self, keys: u64) -> String {
        match self {
            Mode::Keys => format!("{keys} keys"),
            Mode::HotFree => "1 hot, free".to_owned(),
            Mode::HotSaturated => "1 hot, saturated".to_owned(),
        }
    }
}

/// The result of one case.
struct Row {
    decisions_per_s: f64,
    ops_per_decision: f64,
    busiest_calls_per_s: f64,
    /// Server time per script call, µs (`INFO commandstats`).
    usec_per_call: f64,
    bytes_in_per_call: f64,
    bytes_out_per_call: f64,
    /// Redis CPU (all masters) per script call, µs (`INFO cpu`).
    server_cpu_per_call_us: f64,
    /// Worker CPU (all processes) per decision, µs.
    client_cpu_per_decision_us: f64,
    p50_us: f64,
    p99_us: f64,
    admitted_per_s: f64,
    /// Admissions answered from a lease in memory, over all admissions.
    leased_share: f64,
    /// Saturated hot key only: max admissions certainly inside any W, over
    /// N; mean admissions per whole window, over N.
    accuracy: Option<Accuracy>,
    errors: u64,
}

fn spawn_worker(
    plan: &Plan,
    nodes: &[String],
    prefix: &str,
    (keys, n, stamps): (u64, u64, bool),
    leasing: bool,
) -> Child {
    let exe = std::env::current_exe().expect("own path");
    Command::new(exe)
        .env(WORKER, "1")
        .env("SCALE_NODES", nodes.join(","))
        .env("SCALE_PREFIX", prefix)
        .env("SCALE_KEYS", keys.to_string())
        .env("SCALE_N", n.to_string())
        .env("SCALE_STAMPS", if stamps { "1" } else { "0" })
        .env("SCALE_LEASING", if leasing { "1" } else { "0" })
        .env("SCALE_SHARE_PPM", plan.share_ppm.to_string())
        .env("SCALE_TTL_MS", plan.ttl_ms.to_string())
        .env("SCALE_TASKS", plan.tasks.to_string())
        .env("SCALE_THREADS", plan.threads.to_string())
        .env("SCALE_MAX_PER_TASK", plan.max_per_task.to_string())
        .env("SCALE_HARD_SECS", (plan.secs + 90).to_string())
        .env("SCALE_DENY_CACHE", if plan.deny_cache { "1" } else { "0" })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn a worker")
}

fn run_case(plan: &Plan, nodes: &[String], prefix: &str, mode: Mode, leasing: bool) -> Row {
    let (keys, n) = match mode {
        Mode::Keys => (plan.keys, FREE_N),
        Mode::HotFree => (1, FREE_N),
        Mode::HotSaturated => (1, plan.n),
    };
    let saturated = mode == Mode::HotSaturated;
    let mut children: Vec<Child> = (0..plan.procs)
        .map(|_| spawn_worker(plan, nodes, prefix, (keys, n, saturated), leasing))
        .collect();
    let mut readers = Vec::new();
    for c in &mut children {
        let mut r = BufReader::new(c.stdout.take().expect("piped"));
        let mut line = String::new();
        let _ = r.read_line(&mut line);
        if line.trim() != "ready" {
            eprintln!("scale: a worker did not get ready ({line:?})");
        }
        readers.push(r);
    }
    let before: Vec<Stats> = nodes.iter().map(|u| stats(u)).collect();
    // On the saturated key the warm-up's admissions leave the window first.
    let start = wall_ns() + 200_000_000 + if saturated { W_NS } else { 0 };
    for c in &mut children {
        if let Some(stdin) = c.stdin.as_mut() {
            let _ = writeln!(stdin, "go {start} {}", plan.secs);
            let _ = stdin.flush();
        }
    }
    let mut hist = histogram();
    let mut stamps: Vec<(u64, u64)> = Vec::new();
    let (mut decisions, mut admitted, mut errors, mut leased) = (0u64, 0u64, 0u64, 0u64);
    let mut client_cpu_ns = 0u64;
    for r in readers {
        for line in r.lines().map_while(Result::ok) {
            let mut w = line.split_whitespace();
            let kind = w.next().unwrap_or("");
            let v: Vec<u64> = w.filter_map(|x| x.parse().ok()).collect();
            match (kind, &v[..]) {
                ("s", [b, a]) => stamps.push((*b, *a)),
                ("h", [value, count]) => {
                    let _ = hist.record_n(*value, *count);
                }
                ("t", [d, a, e, _calls, served, cpu]) => {
                    client_cpu_ns += cpu;
                    decisions += d;
                    admitted += a;
                    errors += e;
                    leased += served;
                }
                _ => {}
            }
        }
    }
    for mut c in children {
        let _ = c.wait();
    }
    let after: Vec<Stats> = nodes.iter().map(|u| stats(u)).collect();
    let delta: Vec<Stats> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| Stats {
            scripts: a.scripts.saturating_sub(b.scripts),
            usec: a.usec.saturating_sub(b.usec),
            net_in: a.net_in.saturating_sub(b.net_in),
            net_out: a.net_out.saturating_sub(b.net_out),
            cpu_us: a.cpu_us.saturating_sub(b.cpu_us),
        })
        .collect();
    let calls: u64 = delta.iter().map(|d| d.scripts).sum();
    let busiest = delta.iter().map(|d| d.scripts).max().unwrap_or(0);
    let usec: u64 = delta.iter().map(|d| d.usec).sum();
    let (net_in, net_out): (u64, u64) = (
        delta.iter().map(|d| d.net_in).sum(),
        delta.iter().map(|d| d.net_out).sum(),
    );
    let secs = plan.secs as f64;
    let accuracy = saturated.then(|| accuracy(&mut stamps, start, plan.secs, n));
    Row {
        decisions_per_s: decisions as f64 / secs,
        ops_per_decision: calls as f64 / decisions.max(1) as f64,
        busiest_calls_per_s: busiest as f64 / secs,
        usec_per_call: usec as f64 / calls.max(1) as f64,
        bytes_in_per_call: net_in as f64 / calls.max(1) as f64,
        bytes_out_per_call: net_out as f64 / calls.max(1) as f64,
        server_cpu_per_call_us: delta.iter().map(|d| d.cpu_us).sum::<u64>() as f64 / calls.max(1) as f64,
        client_cpu_per_decision_us: client_cpu_ns as f64 / 1_000.0 / decisions.max(1) as f64,
        p50_us: hist.value_at_quantile(0.50) as f64 / 1_000.0,
        p99_us: hist.value_at_quantile(0.99) as f64 / 1_000.0,
        admitted_per_s: admitted as f64 / secs,
        leased_share: leased as f64 / admitted.max(1) as f64,
        accuracy,
        errors,
    }
}

/// On the saturated key: the most admissions certainly inside any interval
/// of length W (both stamps in it) and possibly inside one (the stamps
/// overlap it), over N — the true worst window lies between — and the mean
/// admissions per whole window of the run, over N.
#[derive(Debug, Clone, Copy)]
struct Accuracy {
    certain: f64,
    possible: f64,
    mean: f64,
}

fn accuracy(stamps: &mut [(u64, u64)], start: u64, secs: u64, n: u64) -> Accuracy {
    stamps.sort_unstable();
    // An admission straddles an interval's end only if it began less than
    // the longest decision before it.
    let span = stamps.iter().map(|(b, a)| a - b).max().unwrap_or(0);
    let mut most = 0usize;
    for (i, &(s, _)) in stamps.iter().enumerate() {
        let end = s + W_NS;
        let hi = i + stamps[i..].partition_point(|(b, _)| *b < end);
        let straddling = stamps[i..hi]
            .iter()
            .rev()
            .take_while(|(b, _)| b + span > end)
            .filter(|(_, a)| *a > end)
            .count();
        most = most.max(hi - i - straddling);
    }
    // Possibly inside [s, s + W): began before its end and ended at or
    // after s — every "before" under s + W, less the "after"s under s; the
    // largest such count is at some admission's "after".
    let mut befores: Vec<u64> = stamps.iter().map(|(b, _)| *b).collect();
    let mut afters: Vec<u64> = stamps.iter().map(|(_, a)| *a).collect();
    befores.sort_unstable();
    afters.sort_unstable();
    let possible = afters
        .iter()
        .map(|&s| befores.partition_point(|b| *b < s + W_NS) - afters.partition_point(|a| *a < s))
        .max()
        .unwrap_or(0);
    let windows = (secs * 1_000_000_000 / W_NS).max(1);
    let in_run = stamps
        .iter()
        .filter(|(_, a)| *a >= start && *a < start + windows * W_NS)
        .count();
    Accuracy {
        certain: most as f64 / n as f64,
        possible: possible as f64 / n as f64,
        mean: in_run as f64 / (windows * n) as f64,
    }
}

fn coordinator() {
    let machine_before = pressure_testkit::machine("before");
    eprintln!("{machine_before}");
    let plan = Plan {
        procs: env("BENCH_PROCS", 4).max(1) as usize,
        tasks: env("BENCH_TASKS", 8).max(1),
        secs: env("BENCH_SECS", 3).clamp(1, 30),
        keys: env("BENCH_KEYS", 10_000).max(2),
        n: env("BENCH_N", 2_000).max(1),
        share_ppm: env("BENCH_SHARE_PPM", 100_000).clamp(1, 1_000_000),
        ttl_ms: env("BENCH_TTL_MS", 50).clamp(10, 60_000),
        threads: env("BENCH_THREADS", 1).max(1),
        max_per_task: env("BENCH_MAX_PER_TASK", 50_000_000).max(1),
        deny_cache: env("BENCH_DENY_CACHE", 1) == 1,
    };
    let list = |name: &str, default: &str| -> Vec<String> {
        std::env::var(name)
            .unwrap_or_else(|_| default.into())
            .split(',')
            .map(|s| s.trim().to_owned())
            .collect()
    };
    let modes: Vec<Mode> = list("BENCH_MODES", "keys,free,saturated")
        .iter()
        .filter_map(|m| match m.as_str() {
            "keys" => Some(Mode::Keys),
            "free" => Some(Mode::HotFree),
            "saturated" => Some(Mode::HotSaturated),
            _ => None,
        })
        .collect();
    let leasings: Vec<bool> = list("BENCH_LEASING", "off,on")
        .iter()
        .filter_map(|l| match l.as_str() {
            "off" => Some(false),
            "on" => Some(true),
            _ => None,
        })
        .collect();
    let shards: Vec<usize> = std::env::var("BENCH_SHARDS")
        .unwrap_or_else(|_| "1,2,3".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|s| (1..=16).contains(s))
        .collect();
    println!(
        "{} worker processes × {} tasks ({} runtime thread each), {} s per case; \
         keys: {} tenants, limit {}/s each (never reached); hot, free: one key, the same limit; \
         hot, saturated: one key, N = {}/s; leasing on: maxShare {}, ttlMs {}; deny cache {}",
        plan.procs,
        plan.tasks,
        plan.threads,
        plan.secs,
        plan.keys,
        FREE_N,
        plan.n,
        plan.share_ppm as f64 / 1e6,
        plan.ttl_ms,
        if plan.deny_cache { "on" } else { "off" }
    );
    println!();
    println!(
        "| keys | shards | leasing | decisions/s | admitted/s | from lease | store ops/decision \
         | store ops/admission | busiest shard calls/s | server µs/call | server CPU µs/call \
         | client CPU µs/decision | bytes in/out per call | p50 µs | p99 µs | max adm/N in any W (certain–possible) | mean adm/N |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut results: Vec<(Mode, usize, bool, Row)> = Vec::new();
    let mut case = 0;
    for &s in &shards {
        let cluster = match RedisCluster::try_start_masters(s) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("scale: no {s}-master cluster: {e}");
                continue;
            }
        };
        let nodes = cluster.urls();
        for &mode in &modes {
            for &leasing in &leasings {
                case += 1;
                let prefix = format!("scale{case}");
                let r = run_case(&plan, &nodes, &prefix, mode, leasing);
                let (max, mean) = r.accuracy.map_or(("–".to_owned(), "–".to_owned()), |a| {
                    (
                        format!("{:.3}–{:.3}", a.certain, a.possible),
                        format!("{:.3}", a.mean),
                    )
                });
                println!(
                    "| {} | {s} | {} | {:.0} | {:.0} | {:.1}% | {:.4} | {:.4} | {:.0} | {:.1} | {:.1} | {:.2} | {:.0}/{:.0} | {:.2} | {:.2} | {max} | {mean} |",
                    mode.label(plan.keys),
                    if leasing { "on" } else { "off" },
                    r.decisions_per_s,
                    r.admitted_per_s,
                    r.leased_share * 100.0,
                    r.ops_per_decision,
                    r.ops_per_decision * r.decisions_per_s / r.admitted_per_s.max(1e-9),
                    r.busiest_calls_per_s,
                    r.usec_per_call,
                    r.server_cpu_per_call_us,
                    r.client_cpu_per_decision_us,
                    r.bytes_in_per_call,
                    r.bytes_out_per_call,
                    r.p50_us,
                    r.p99_us,
                );
                if r.errors > 0 {
                    eprintln!("scale: {} decisions failed in this case", r.errors);
                }
                results.push((mode, s, leasing, r));
            }
        }
        drop(cluster);
    }
    println!();
    let find = |mode: Mode, s: usize, leasing: bool| {
        results
            .iter()
            .find(|(m, sh, l, _)| *m == mode && *sh == s && *l == leasing)
            .map(|(_, _, _, r)| r)
    };
    for leasing in [false, true] {
        let on = if leasing { "on" } else { "off" };
        for s in [2, 3] {
            if let (Some(a), Some(c)) = (find(Mode::Keys, 1, leasing), find(Mode::Keys, s, leasing)) {
                println!(
                    "many keys, leasing {on}: decisions/s {s} shards / 1 shard = {:.2}",
                    c.decisions_per_s / a.decisions_per_s.max(1e-9)
                );
            }
        }
    }
    for &s in &shards {
        for mode in [Mode::HotFree, Mode::HotSaturated] {
            if let (Some(off), Some(on)) = (find(mode, s, false), find(mode, s, true)) {
                println!(
                    "{}, {s} shard(s): decisions/s leasing on / off = {:.2}; store ops/decision on {:.4}, off {:.4}",
                    mode.label(plan.keys),
                    on.decisions_per_s / off.decisions_per_s.max(1e-9),
                    on.ops_per_decision,
                    off.ops_per_decision
                );
            }
        }
    }
    println!();
    println!("{machine_before}");
    println!("{}", pressure_testkit::machine("after"));
}
