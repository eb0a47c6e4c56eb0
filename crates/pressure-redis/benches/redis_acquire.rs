//! Throughput, client latency and Redis server time of `RedisBackend`
//! acquisitions, measured against a real Redis.
//!
//! # What it measures
//!
//! For every case, `TASKS` (default 64) tokio tasks of ONE process call an
//! acquisition in a closed loop on ONE resource for a fixed duration, after a
//! one-second warm-up. Limits are never reached. Per case it reports:
//!
//! * acquisitions per second and the p50 / p99 / p99.9 / max latency of one
//!   call as the caller sees it (hdrhistogram, nanosecond resolution);
//! * the server time from `INFO commandstats` (after `CONFIG RESETSTAT`):
//!   `usec_per_call` of `EVALSHA` (acquisitions, and lease releases in `dim3`), and the
//!   server time per acquisition (all `EVALSHA` microseconds / grants);
//! * the CPU time of this process per acquisition (`/proc/self/stat`): the
//!   client-side cost, which the throughput hides when Redis is the
//!   bottleneck.
//!
//! Cases:
//!
//! | case | driver | what |
//! |---|---|---|
//! | `window1` | broker | `window`, `requestsPerMinute` = 10¹² (one dimension, no lease) |
//! | `gcra1` | broker | `gcra`, `requestsPerSecond` = 10⁶ (one dimension, no lease) |
//! | `dim3` | broker | `window`: `requestsPerMinute` + `tokensPerMinute` + `maxConcurrentRequests` (each 10¹²), 100 + 200 tokens; the permit is dropped at once (lease released by one `EVALSHA` of release.lua) |
//! | `window1-raw` | redis-rs | the exact `EVALSHA` of `window1`, sent straight through a `ConnectionManager` (no broker, no backend): separates our overhead from the client library's |
//! | `window1-generic`, `gcra1-generic`, `dim3-generic` | redis-rs | the same acquisition with the generic `lua/acquire.lua` (what the backend sent before it generated one script per limit shape), fixed lease id, no release: the before/after of the shape scripts in one run |
//! | `gcra-bare` | redis-rs | a minimal one-key GCRA script (`GET` the TAT, `TIME`, `SET .. PX`): the classic redis-cell-like shape, the reference for server time |
//!
//! "broker" means `ResourceBroker::try_acquire` on a `RedisBackend` with the
//! default `RedisConfig` (2 multiplexed connections, 50 ms timeout). The
//! redis-rs cases use 2 `ConnectionManager`s round robin as well.
//!
//! Before each broker case, one acquisition is captured with `MONITOR` and
//! its `EVALSHA` arguments are compared with those derived from the compiled
//! limits for the script generated for the limit's shape (`ARGCHECK` line); the captured command is printed (`CMD` line) so
//! `benches/redis-vs-redis-benchmark.sh` can replay exactly that command with
//! `redis-benchmark`.
//!
//! # Output
//!
//! One machine-readable line per case, space-separated `key=value` pairs:
//!
//! ```text
//! RESULT case=window1 driver=broker tasks=64 secs=10.000 ops=... ops_per_sec=... p50_us=... p99_us=... ...
//! ```
//!
//! plus `CMD case=<case> EVALSHA <sha> <numkeys> <keys..> <args..>`,
//! `ARGCHECK` and `CMDSTATS` (every command's calls and usec in the case)
//! lines.
//!
//! # Running
//!
//! Needs a Redis (≥ 6.2) at `127.0.0.1:6379`, or `PRESSURE_REDIS_URL`. It
//! issues `CONFIG RESETSTAT` (server statistics of that Redis are reset) and
//! writes only keys with the hash tags `{rbench.*}`, deleted at the end.
//!
//! ```text
//! cargo bench -p pressure-redis --bench redis_acquire
//! BENCH_SECS=10 BENCH_AUX_SECS=5 BENCH_TASKS=64 BENCH_CASES=window1,dim3 \
//!     PRESSURE_REDIS_URL=redis://127.0.0.1:6379 cargo bench -p pressure-redis --bench redis_acquire
//! benches/redis-vs-redis-benchmark.sh   # this bench + redis-benchmark, with ratios
//! ```
//!
//! With `BENCH_SCRIPT_DIR` set, the source of every script a case sends is
//! written there as `<sha>.lua` (to load them into another Redis).
//!
//! `BENCH_SECS` (default 10) is the duration of `window1` and `dim3`,
//! `BENCH_AUX_SECS` (default 5) that of the other cases. Without the
//! `--bench` flag that `cargo bench` passes (e.g. under
//! `cargo test --all-targets`) the binary does nothing, so test runs never
//! load a shared Redis.

// Wall-clock timing is the whole point of a benchmark binary. The house rule
// against `std::time::Instant::now` (clippy.toml) keeps limiter arithmetic on
// the injected Clock; nothing here is limiter arithmetic, and
// `tokio::time::Instant::now` (with the `test-util` feature this crate's
// dev-dependencies enable) takes a lock on every call, which would perturb
// the latencies measured.
#![allow(clippy::disallowed_methods)]

use hdrhistogram::Histogram;
use pressure_core::{
    AcquireOptions, Acquisition, Algorithm, Demand, Limits, ResourceBroker, MAX_LIMIT, SUB_WINDOWS,
};
use pressure_redis::keys::ResourceKeys;
use pressure_redis::{RedisBackend, RedisConfig};
use redis::aio::{ConnectionManager, MultiplexedConnection};
use std::collections::BTreeMap;
use std::error::Error;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// The acquire script, byte for byte as the backend loads it (same SHA1).
const ACQUIRE_LUA: &str = concat!(
    include_str!("../lua/calendar.lua"),
    include_str!("../lua/acquire.lua")
);

/// Minimal one-key GCRA (redis-cell-like): the reference for server time.
/// KEYS[1] = TAT key; ARGV = emission interval T (us), tolerance (us), units.
/// Returns {1, 0} when granted, {0, wait_us} when denied.
const BARE_GCRA_LUA: &str = r"local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local nt = tat + tonumber(ARGV[1]) * tonumber(ARGV[3])
local wait = nt - tonumber(ARGV[2]) - now
if wait > 0 then return {0, wait} end
redis.call('SET', KEYS[1], string.format('%.0f', nt), 'PX', math.ceil((nt - now) / 1000) + 1)
return {1, 0}
";

/// The bare GCRA's rate: T = 1 us, tolerance 1 s (as `gcra1`: 10⁶ per second).
const BARE_ARGS: [&str; 3] = ["1", "1000000", "1"];

/// The backend's default key prefix.
const PREFIX: &str = "pressure";

#[derive(Clone, Copy)]
enum Kind {
    /// `ResourceBroker::try_acquire` on a `RedisBackend`.
    Broker,
    /// A prebuilt `EVALSHA` sent with redis-rs.
    Raw,
}

struct Case {
    name: &'static str,
    kind: Kind,
    /// Resource id (broker cases).
    resource: &'static str,
    limits: Option<Limits>,
    opts: AcquireOptions,
    secs: f64,
}

/// What one call returned.
#[derive(Clone, Copy)]
enum Outcome {
    Granted,
    Denied,
    Error,
}

/// One task's count.
struct Tally {
    hist: Histogram<u64>,
    granted: u64,
    denied: u64,
    errors: u64,
}

impl Tally {
    fn new() -> Self {
        Self {
            hist: Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds"),
            granted: 0,
            denied: 0,
            errors: 0,
        }
    }
}

/// What the tasks call.
#[derive(Clone)]
enum Target {
    Broker {
        broker: ResourceBroker<RedisBackend>,
        id: Arc<str>,
        opts: AcquireOptions,
    },
    Raw {
        conns: Arc<Vec<ConnectionManager>>,
        next: Arc<AtomicUsize>,
        cmd: Arc<redis::Cmd>,
    },
}

impl Target {
    #[inline]
    async fn once(&self) -> Outcome {
        match self {
            Target::Broker { broker, id, opts } => match broker.try_acquire(id, *opts).await {
                // Dropping the permit releases its lease (one detached release EVALSHA).
                Ok(Acquisition::Granted(permit)) => {
                    drop(permit);
                    Outcome::Granted
                }
                Ok(Acquisition::Denied(_)) => Outcome::Denied,
                Err(_) => Outcome::Error,
            },
            Target::Raw { conns, next, cmd } => {
                let i = next.fetch_add(1, Ordering::Relaxed) % conns.len();
                let mut conn = conns[i].clone();
                match cmd.query_async::<Vec<i64>>(&mut conn).await {
                    Ok(v) if v.first() == Some(&1) => Outcome::Granted,
                    Ok(_) => Outcome::Denied,
                    Err(_) => Outcome::Error,
                }
            }
        }
    }
}

async fn worker(target: Target, deadline: Instant) -> Tally {
    let mut t = Tally::new();
    loop {
        let t0 = Instant::now();
        if t0 >= deadline {
            break;
        }
        let out = target.once().await;
        let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        t.hist.saturating_record(ns.max(1));
        match out {
            Outcome::Granted => t.granted += 1,
            Outcome::Denied => t.denied += 1,
            Outcome::Error => t.errors += 1,
        }
        if !matches!(out, Outcome::Granted) {
            // A denial from the failure mode (a call timed out on this
            // loaded machine, the backend went unhealthy) completes without
            // awaiting anything: without a yield, 64 such loops keep the
            // runtime's threads busy, the backend's probe never runs, and
            // the rest of the case measures the fallback (seen: 17 M
            // denials, a 4 s stall).
            tokio::task::yield_now().await;
        }
    }
    t
}

/// Runs `tasks` workers for `secs`; returns the merged tally and the elapsed time.
async fn drive(target: &Target, tasks: usize, secs: f64) -> Res<(Tally, Duration)> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let handles: Vec<_> = (0..tasks)
        .map(|_| tokio::spawn(worker(target.clone(), deadline)))
        .collect();
    let mut total = Tally::new();
    for h in handles {
        let t = h.await?;
        total.hist.add(&t.hist)?;
        total.granted += t.granted;
        total.denied += t.denied;
        total.errors += t.errors;
    }
    Ok((total, start.elapsed()))
}

/// `cmdstat_<name>` → (calls, usec) from `INFO commandstats`.
fn parse_cmdstats(info: &str) -> BTreeMap<String, (u64, u64)> {
    let mut out = BTreeMap::new();
    for line in info.lines() {
        let Some(rest) = line.trim().strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        let mut calls = 0;
        let mut usec = 0;
        for kv in fields.split(',') {
            match kv.split_once('=') {
                Some(("calls", v)) => calls = v.parse().unwrap_or(0),
                Some(("usec", v)) => usec = v.parse().unwrap_or(0),
                _ => {}
            }
        }
        out.insert(name.to_owned(), (calls, usec));
    }
    out
}

async fn cmdstats(admin: &mut MultiplexedConnection) -> Res<BTreeMap<String, (u64, u64)>> {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(admin).await?;
    Ok(parse_cmdstats(&info))
}

fn per_call(stats: &BTreeMap<String, (u64, u64)>, name: &str) -> (u64, f64) {
    match stats.get(name) {
        Some(&(calls, usec)) if calls > 0 => (calls, usec as f64 / calls as f64),
        _ => (0, 0.0),
    }
}

/// Host, port and password of a `redis://[[user]:pass@]host[:port][/db]` URL.
fn host_port(url: &str) -> (String, u16, Option<String>) {
    let rest = url
        .strip_prefix("redis://")
        .unwrap_or(url)
        .split('/')
        .next()
        .unwrap_or_default();
    let (auth, hp) = match rest.rsplit_once('@') {
        Some((a, hp)) => (Some(a), hp),
        None => (None, rest),
    };
    let pass = auth.and_then(|a| a.split_once(':').map_or(Some(a), |(_, p)| Some(p)));
    let (host, port) = match hp.rsplit_once(':') {
        Some((h, p)) => (h.to_owned(), p.parse().unwrap_or(6379)),
        None => (hp.to_owned(), 6379),
    };
    (host, port, pass.filter(|p| !p.is_empty()).map(str::to_owned))
}

/// Splits the quoted arguments of one `MONITOR` line
/// (`1700000000.123 [0 127.0.0.1:5555] "EVALSHA" "..." ...`).
fn monitor_args(line: &str) -> Vec<String> {
    let body = line.split_once("] ").map_or(line, |(_, b)| b);
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut inside = false;
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        match (inside, c) {
            (false, '"') => inside = true,
            (true, '"') => {
                out.push(std::mem::take(&mut cur));
                inside = false;
            }
            (true, '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            (true, c) => cur.push(c),
            (false, _) => {}
        }
    }
    out
}

/// Captures, with `MONITOR`, the first `EVALSHA` on `key` sent while `act` runs.
async fn capture_evalsha<F: std::future::Future<Output = Outcome>>(
    url: &str,
    key: &str,
    act: F,
) -> Res<Vec<String>> {
    let (host, port, pass) = host_port(url);
    let stream = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    let mut line = String::new();
    if let Some(p) = pass {
        wr.write_all(format!("AUTH {p}\r\n").as_bytes()).await?;
        rd.read_line(&mut line).await?;
    }
    wr.write_all(b"MONITOR\r\n").await?;
    line.clear();
    rd.read_line(&mut line).await?;
    if !line.starts_with("+OK") {
        return Err(format!("MONITOR refused: {}", line.trim()).into());
    }
    act.await;
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        line.clear();
        let left = deadline.saturating_duration_since(Instant::now());
        let n = tokio::time::timeout(left, rd.read_line(&mut line)).await??;
        if n == 0 {
            return Err("MONITOR connection closed".into());
        }
        let args = monitor_args(line.trim_end());
        if args.first().is_some_and(|c| c.eq_ignore_ascii_case("evalsha")) && args.iter().any(|a| a == key) {
            return Ok(args);
        }
    }
}

/// Emission interval (gcra) or sub-window length (window) of a rate, µs.
fn step_us(r: &pressure_core::RateSpec) -> u64 {
    let window_us = r.window_ns / 1_000;
    if r.algorithm == Algorithm::Gcra {
        window_us.div_ceil(r.limit)
    } else {
        window_us.div_ceil(SUB_WINDOWS)
    }
}

/// Units and limit (gcra: tolerance C·T in µs) of a rate for `demand`.
fn units_limit(r: &pressure_core::RateSpec, demand: &Demand) -> (u64, u64) {
    let limit = if r.algorithm == Algorithm::Gcra {
        r.capacity.saturating_mul(step_us(r))
    } else {
        r.limit
    };
    (r.units(demand), limit)
}

/// The demand `try_acquire` makes for `opts` (lease, full ceiling, no booking).
fn demand_of(opts: &AcquireOptions) -> Demand {
    Demand {
        requests: opts.requests,
        input_tokens: opts.input_tokens,
        output_tokens: opts.output_tokens,
        ..Demand::default()
    }
}

/// The `EVALSHA` arguments after the SHA that `acquire_remote` builds for
/// `limits` and `opts` with the script generated for the limit's shape
/// (`src/shape.rs`: per rate units, limit and, for gcra, T; with a
/// concurrency limit the limit and the lease id; when every rate is gcra the
/// booking horizon), with the lease member left as `None`.
fn expected_args(resource: &str, limits: &Limits, opts: &AcquireOptions) -> Res<Vec<Option<String>>> {
    let spec = limits.compile()?;
    let keys = ResourceKeys::new(PREFIX, resource);
    let demand = demand_of(opts);
    let mut a: Vec<Option<String>> = vec![Some("1".into()), Some(keys.state)];
    for r in &spec.rates {
        let (units, limit) = units_limit(r, &demand);
        a.push(Some(units.to_string()));
        a.push(Some(limit.to_string()));
        if r.algorithm == Algorithm::Gcra {
            a.push(Some(step_us(r).to_string()));
        }
    }
    if let Some(c) = spec.concurrency {
        a.push(Some(c.to_string()));
        a.push(None);
    }
    if spec.all_gcra() && !spec.rates.is_empty() {
        a.push(Some("0".into()));
    }
    Ok(a)
}

/// The `EVALSHA` of the generic `lua/acquire.lua` (sha `sha`) for the same
/// acquisition, lease id `member`: what the backend sent before it
/// generated a script per limit shape.
fn generic_cmd(
    sha: &str,
    resource: &str,
    limits: &Limits,
    opts: &AcquireOptions,
    member: &str,
) -> Res<Vec<String>> {
    let spec = limits.compile()?;
    let keys = ResourceKeys::new(PREFIX, resource);
    let demand = demand_of(opts);
    let mut a = vec!["EVALSHA".to_owned(), sha.to_owned(), "1".into(), keys.state];
    a.push(spec.rates.len().to_string());
    for r in &spec.rates {
        let gcra = r.algorithm == Algorithm::Gcra;
        let (units, limit) = units_limit(r, &demand);
        for v in [
            u64::from(gcra),
            r.dimension.index() as u64,
            units,
            limit,
            step_us(r),
            r.window_ns / 1_000,
        ] {
            a.push(v.to_string());
        }
        let id = r.dimension.index();
        if gcra {
            a.extend([format!("g{id}"), format!("g{id}t"), "-".to_owned()]);
        } else {
            a.extend([format!("w{id}:"), format!("w{id}:s"), format!("w{id}:lo")]);
        }
    }
    a.push(spec.concurrency.unwrap_or(0).to_string());
    a.push((spec.lease_ttl_ns / 1_000).to_string());
    a.push(member.to_owned());
    a.push("0".into());
    Ok(a)
}

/// CPU time (user + system) this process has used, in microseconds, from
/// `/proc/self/stat` (Linux; `None` elsewhere). Assumes 100 clock ticks per
/// second, the Linux default.
fn process_cpu_us() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 10_000)
}

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn script_load(admin: &mut MultiplexedConnection, src: &str) -> Res<String> {
    Ok(redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(src)
        .query_async(admin)
        .await?)
}

struct Bench {
    url: String,
    tasks: usize,
    client: redis::Client,
    admin: MultiplexedConnection,
    /// Captured `EVALSHA` commands by case.
    cmds: BTreeMap<&'static str, Vec<String>>,
    /// SHA of the generic `lua/acquire.lua`.
    generic_sha: String,
    /// Limits and options of the broker cases, by name (for the generic
    /// replays).
    broker_cases: BTreeMap<&'static str, (Limits, AcquireOptions)>,
    keys: Vec<String>,
}

impl Bench {
    async fn raw_target(&self, cmd_args: &[String]) -> Res<Target> {
        let mut conns = Vec::new();
        for _ in 0..2 {
            conns.push(ConnectionManager::new(self.client.clone()).await?);
        }
        let mut cmd = redis::cmd(&cmd_args[0]);
        for a in &cmd_args[1..] {
            cmd.arg(a);
        }
        Ok(Target::Raw {
            conns: Arc::new(conns),
            next: Arc::new(AtomicUsize::new(0)),
            cmd: Arc::new(cmd),
        })
    }

    async fn run(&mut self, case: &Case) -> Res<()> {
        let (target, broker) = match case.kind {
            Kind::Broker => {
                let limits = case.limits.clone().ok_or("broker case without limits")?;
                let backend = RedisBackend::connect(RedisConfig::new(self.url.clone())).await?;
                let broker = ResourceBroker::builder(backend).build();
                broker.register_limit(case.resource, limits.clone())?;
                let keys = ResourceKeys::new(PREFIX, case.resource);
                self.keys.push(keys.state.clone());
                let target = Target::Broker {
                    broker: broker.clone(),
                    id: Arc::from(case.resource),
                    opts: case.opts,
                };
                // One acquisition under MONITOR: what exactly goes on the wire.
                let captured = capture_evalsha(&self.url, &keys.state, target.once()).await?;
                let expected = expected_args(case.resource, &limits, &case.opts)?;
                let got = &captured[2..];
                let ok = got.len() == expected.len()
                    && got
                        .iter()
                        .zip(&expected)
                        .all(|(g, e)| e.as_ref().is_none_or(|e| e == g));
                println!(
                    "ARGCHECK case={} ok={} captured=[{}] expected=[{}]",
                    case.name,
                    ok,
                    got.join(" "),
                    expected
                        .iter()
                        .map(|e| e.clone().unwrap_or_else(|| "<member>".into()))
                        .collect::<Vec<_>>()
                        .join(" ")
                );
                // The script itself, for a Redis of the caller's own (the
                // callgrind replay of benches/redis-vs-redis-benchmark.sh).
                if let Ok(dir) = std::env::var("BENCH_SCRIPT_DIR") {
                    let src = broker.backend().acquire_script(&limits.compile()?)?;
                    std::fs::write(format!("{dir}/{}.lua", captured[1]), src)?;
                }
                self.cmds.insert(case.name, captured);
                (target, Some(broker))
            }
            Kind::Raw => {
                let cmd = match case.name {
                    "gcra-bare" => {
                        let sha = script_load(&mut self.admin, BARE_GCRA_LUA).await?;
                        let key = format!("{PREFIX}:{{rbench.bare}}:g");
                        self.keys.push(key.clone());
                        let mut c = vec!["EVALSHA".to_owned(), sha, "1".into(), key];
                        c.extend(BARE_ARGS.iter().map(|a| (*a).to_owned()));
                        c
                    }
                    other if other.ends_with("-generic") => {
                        let base = other.trim_end_matches("-generic");
                        let (limits, opts) = self
                            .broker_cases
                            .get(base)
                            .cloned()
                            .ok_or_else(|| format!("{other}: needs the broker case {base}"))?;
                        // Its own key (the generic script on fresh state).
                        let resource = format!("bench.{base}.generic");
                        let c =
                            generic_cmd(&self.generic_sha, &resource, &limits, &opts, "00000000000000aa")?;
                        let _: i64 = redis::cmd("DEL").arg(&c[3]).query_async(&mut self.admin).await?;
                        self.keys.push(c[3].clone());
                        c
                    }
                    other => {
                        let base = other.strip_suffix("-raw").ok_or("unknown raw case")?;
                        self.cmds
                            .get(base)
                            .cloned()
                            .ok_or_else(|| format!("{other} needs case {base} to run first"))?
                    }
                };
                self.cmds.insert(case.name, cmd.clone());
                (self.raw_target(&cmd).await?, None)
            }
        };
        println!("CMD case={} {}", case.name, self.cmds[case.name].join(" "));

        // Warm-up: connections, script cache, allocator, the resource's keys.
        drive(&target, self.tasks, 1.0).await?;
        tokio::time::sleep(Duration::from_millis(100)).await;

        let () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut self.admin)
            .await?;
        let cpu0 = process_cpu_us();
        let (tally, elapsed) = drive(&target, self.tasks, case.secs).await?;
        let cpu = process_cpu_us().zip(cpu0).map(|(b, a)| b.saturating_sub(a));
        // Let detached lease releases of the last permits land.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let stats = cmdstats(&mut self.admin).await?;

        let secs = elapsed.as_secs_f64();
        let ops = tally.granted + tally.denied + tally.errors;
        let (evalsha_calls, evalsha_upc) = per_call(&stats, "evalsha");
        let (zrem_calls, zrem_upc) = per_call(&stats, "zrem");
        let server_usec = stats.get("evalsha").map_or(0, |s| s.1) + stats.get("zrem").map_or(0, |s| s.1);
        let server_per_acq = if tally.granted > 0 {
            server_usec as f64 / tally.granted as f64
        } else {
            0.0
        };
        let us = |q: f64| tally.hist.value_at_quantile(q) as f64 / 1_000.0;
        let (failures, fallbacks) = broker.as_ref().map_or((0, 0), |b| {
            let s = b.backend().status();
            (s.failures, s.fallbacks)
        });
        println!(
            "RESULT case={} driver={} tasks={} secs={:.3} ops={} granted={} denied={} errors={} failures={} fallbacks={} \
             ops_per_sec={:.0} p50_us={:.1} p99_us={:.1} p999_us={:.1} max_us={:.1} mean_us={:.1} \
             evalsha_calls={} evalsha_usec_per_call={:.3} zrem_calls={} zrem_usec_per_call={:.3} server_usec_per_acq={:.3} \
             client_cpu_pct={:.0} client_cpu_usec_per_acq={:.2}",
            case.name,
            match case.kind {
                Kind::Broker => "broker",
                Kind::Raw => "redis-rs",
            },
            self.tasks,
            secs,
            ops,
            tally.granted,
            tally.denied,
            tally.errors,
            failures,
            fallbacks,
            tally.granted as f64 / secs,
            us(0.50),
            us(0.99),
            us(0.999),
            tally.hist.max() as f64 / 1_000.0,
            tally.hist.mean() / 1_000.0,
            evalsha_calls,
            evalsha_upc,
            zrem_calls,
            zrem_upc,
            server_per_acq,
            cpu.map_or(-1.0, |c| c as f64 / 1e4 / secs),
            cpu.map_or(-1.0, |c| c as f64 / tally.granted.max(1) as f64),
        );
        let detail: Vec<String> = stats
            .iter()
            .filter(|(name, _)| !matches!(name.as_str(), "info" | "config"))
            .map(|(name, (calls, usec))| format!("{name}={calls}/{usec}"))
            .collect();
        println!("CMDSTATS case={} calls/usec: {}", case.name, detail.join(" "));
        Ok(())
    }
}

async fn main_async() -> Res<()> {
    let url = std::env::var("PRESSURE_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let tasks = env_f64("BENCH_TASKS", 64.0).max(1.0) as usize;
    let main_secs = env_f64("BENCH_SECS", 10.0).max(0.1);
    let aux_secs = env_f64("BENCH_AUX_SECS", 5.0).max(0.1);
    let only: Option<Vec<String>> = std::env::var("BENCH_CASES")
        .ok()
        .filter(|s| !s.is_empty())
        .map(|s| s.split(',').map(|c| c.trim().to_owned()).collect());

    let client = redis::Client::open(url.as_str())?;
    let mut admin = tokio::time::timeout(Duration::from_secs(2), client.get_multiplexed_async_connection())
        .await
        .map_err(|_| format!("no Redis at {url} (set PRESSURE_REDIS_URL)"))??;
    let version: String = redis::cmd("INFO").arg("server").query_async(&mut admin).await?;
    let version = version
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned();
    let acquire_sha = script_load(&mut admin, ACQUIRE_LUA).await?;
    if let Ok(dir) = std::env::var("BENCH_SCRIPT_DIR") {
        std::fs::write(format!("{dir}/{acquire_sha}.lua"), ACQUIRE_LUA)?;
        let bare_sha = script_load(&mut admin, BARE_GCRA_LUA).await?;
        std::fs::write(format!("{dir}/{bare_sha}.lua"), BARE_GCRA_LUA)?;
    }
    println!(
        "BENCH url={url} redis_version={version} tasks={tasks} main_secs={main_secs} aux_secs={aux_secs} \
         workers={} acquire_sha={acquire_sha}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );

    let cases = [
        Case {
            name: "window1",
            kind: Kind::Broker,
            resource: "bench.w1",
            limits: Some(Limits::default().requests_per_minute(MAX_LIMIT)),
            opts: AcquireOptions::default(),
            secs: main_secs,
        },
        Case {
            name: "window1-generic",
            kind: Kind::Raw,
            resource: "",
            limits: None,
            opts: AcquireOptions::default(),
            secs: main_secs,
        },
        Case {
            name: "window1-raw",
            kind: Kind::Raw,
            resource: "",
            limits: None,
            opts: AcquireOptions::default(),
            secs: aux_secs,
        },
        Case {
            name: "gcra1",
            kind: Kind::Broker,
            resource: "bench.g1",
            limits: Some(Limits::default().requests_per_second(1_000_000).gcra(None)),
            opts: AcquireOptions::default(),
            secs: aux_secs,
        },
        Case {
            name: "gcra1-generic",
            kind: Kind::Raw,
            resource: "",
            limits: None,
            opts: AcquireOptions::default(),
            secs: aux_secs,
        },
        Case {
            name: "dim3",
            kind: Kind::Broker,
            resource: "bench.d3",
            limits: Some(
                Limits::default()
                    .requests_per_minute(MAX_LIMIT)
                    .tokens_per_minute(MAX_LIMIT)
                    .max_concurrent_requests(MAX_LIMIT),
            ),
            opts: AcquireOptions::default().tokens(100, 200),
            secs: main_secs,
        },
        Case {
            name: "dim3-generic",
            kind: Kind::Raw,
            resource: "",
            limits: None,
            opts: AcquireOptions::default(),
            secs: main_secs,
        },
        Case {
            name: "gcra-bare",
            kind: Kind::Raw,
            resource: "",
            limits: None,
            opts: AcquireOptions::default(),
            secs: aux_secs,
        },
    ];

    let mut bench = Bench {
        url,
        tasks,
        client,
        admin,
        cmds: BTreeMap::new(),
        keys: Vec::new(),
        generic_sha: acquire_sha,
        broker_cases: cases
            .iter()
            .filter_map(|c| Some((c.name, (c.limits.clone()?, c.opts))))
            .collect(),
    };
    // Start from empty state.
    for c in &cases {
        if c.resource.is_empty() {
            continue;
        }
        let k = ResourceKeys::new(PREFIX, c.resource);
        let _: i64 = redis::cmd("DEL")
            .arg(&k.state)
            .query_async(&mut bench.admin)
            .await?;
    }
    let mut result = Ok(());
    for case in &cases {
        if only.as_ref().is_some_and(|o| !o.iter().any(|n| n == case.name)) {
            continue;
        }
        if let Err(e) = bench.run(case).await {
            eprintln!("case {} failed: {e}", case.name);
            result = Err(e);
            break;
        }
    }
    if std::env::var("BENCH_KEEP_KEYS").is_err() && !bench.keys.is_empty() {
        let _: i64 = redis::cmd("DEL")
            .arg(&bench.keys)
            .query_async(&mut bench.admin)
            .await?;
    }
    result
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` does not.
    if !std::env::args().any(|a| a == "--bench") {
        println!("redis_acquire: run with `cargo bench -p pressure-redis --bench redis_acquire`; skipping");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    eprintln!("{}", pressure_testkit::machine("before"));
    if let Err(e) = rt.block_on(main_async()) {
        eprintln!("redis_acquire: {e}");
        std::process::exit(2);
    }
    eprintln!("{}", pressure_testkit::machine("after"));
}
