//! Fleet-wide circuit breakers (DESIGN §6.1): two gateways on one Redis in
//! front of one mock provider whose primary model answers 500 to every
//! request for a few seconds.
//!
//! * Gateway A carries heavy load, gateway B a trickle too thin to fill its
//!   own window (`minimumCalls`) before A's failures open the breaker: B must
//!   learn the opening from the fleet (transition reason `fleet`).
//! * Once both are open, the mock must see no call to the primary from
//!   either gateway except half-open probes, and no more probes than one
//!   fleet-wide quota per epoch of the shared breaker.
//! * When the storm ends, the breaker closes on both and both send the
//!   primary traffic again.
//!
//! The ignored `outage_calls_by_instances_and_scope` measures what the
//! dead model costs in provider calls with 1 and 2 instances, per-process
//! and fleet-wide; run it with `--ignored --nocapture`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use pressure_chaos::driver::criteria::OPEN_GRACE_MS;
use pressure_chaos::driver::scenario::{BACKUP, PRIMARY};
use pressure_chaos::driver::stack::{gateway_config, StackSettings, USE_CASE};
use pressure_chaos::mock::{Arrival, Behaviour, MockConfig, MockProvider, Outcome, Phase};
use pressure_core::shared_breaker::SharedBreakerStore;
use pressure_gateway::openai::Llm;
use pressure_gateway::{Gateway, Serving};
use pressure_llm::breaker::{State, TransitionReason};
use pressure_redis::{RedisBackend, RedisConfig};
use serde_json::json;
use tokio::net::TcpListener;

/// Normal answers before the storm, ms (mock clock).
const BEFORE_MS: u64 = 1_000;
const PROBES: u32 = 2;
const OPEN_WAIT_MS: u64 = 500;
const BREAKER: &str = "mock/primary";

/// One load at a time: the measurement compares runs.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn settings() -> StackSettings {
    StackSettings {
        max_attempts: 1,
        breaker_window_ms: 2_000,
        breaker_open_wait_ms: OPEN_WAIT_MS,
        half_open_probes: PROBES,
        minimum_calls: 10,
        ..StackSettings::for_concurrency(16)
    }
}

fn prefix(tag: &str) -> String {
    let nanos = std::time::SystemTime::UNIX_EPOCH
        .elapsed()
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("fleet-breaker-{}-{nanos:x}-{tag}", std::process::id())
}

/// A mock answering normally (its behaviour is [`play`]ed once the stack
/// is up: the phase clock starts when it is set).
async fn mock() -> MockProvider {
    let config = MockConfig {
        seed: Some(7),
        ..MockConfig::default()
    };
    MockProvider::start(SocketAddr::from(([127, 0, 0, 1], 0)), config)
        .await
        .expect("mock starts")
}

/// From now, the primary answers 500 from `before_ms` for `storm_ms`;
/// returns the storm's start and end on the mock's clock (ms).
fn play(mock: &MockProvider, before_ms: u64, storm_ms: u64) -> (f64, f64) {
    let storm = Phase {
        error_share: 1.0,
        ..Phase::normal("storm")
    }
    .on_models(&[PRIMARY])
    .lasting(storm_ms);
    let mut phases = vec![storm, Phase::normal("after")];
    if before_ms > 0 {
        phases.insert(0, Phase::normal("before").lasting(before_ms));
    }
    let behaviour = Behaviour { phases };
    mock.set_behaviour(behaviour).expect("valid behaviour");
    let zero = mock
        .behaviour_set_at()
        .saturating_duration_since(mock.started())
        .as_secs_f64()
        * 1_000.0;
    let start = zero + before_ms as f64;
    (start, start + storm_ms as f64)
}

/// Milliseconds on the mock's clock (the arrivals' `at_ms`).
fn mock_ms(m: &MockProvider) -> f64 {
    m.started().elapsed().as_secs_f64() * 1_000.0
}

struct Instance {
    addr: SocketAddr,
    admin: SocketAddr,
    llm: Llm,
    serving: Serving,
}

/// A gateway in front of `mock` on the Redis at `url` under `prefix`;
/// `scope` overrides `llm.breaker.scope`.
async fn gateway(mock: &MockProvider, url: &str, prefix: &str, scope: Option<&str>) -> Instance {
    let mut section = gateway_config(&mock.base_url(), &settings(), None, Some((url, prefix)));
    if let Some(scope) = scope {
        section["llm"]["breaker"]["scope"] = json!(scope);
    }
    let text = json!({ "gateway": section }).to_string();
    let config = pressure_gateway::config::parse_in(&text, Path::new(".")).expect("valid config");
    let gw = Gateway::build(config, Path::new("."))
        .await
        .expect("gateway builds");
    let llm = gw.llm().expect("llm client");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let admin_addr = admin.local_addr().expect("addr");
    Instance {
        addr,
        admin: admin_addr,
        llm,
        serving: gw.spawn(listener, admin),
    }
}

/// `clients` closed-loop clients on `inst` until `stop`, pausing `pause`
/// between requests; request ids start with `tag`.
fn load(
    inst: &Instance,
    tag: &'static str,
    clients: usize,
    pause: Duration,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<u64>> {
    let url = format!("http://{}/v1/chat/completions", inst.addr);
    let counter = Arc::new(AtomicU64::new(0));
    (0..clients)
        .map(|_| {
            let (url, stop, counter) = (url.clone(), Arc::clone(stop), Arc::clone(&counter));
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let mut answered = 0;
                while !stop.load(Ordering::Relaxed) {
                    let id = format!("{tag}-{}", counter.fetch_add(1, Ordering::Relaxed));
                    let body = json!({
                        "model": USE_CASE,
                        "messages": [{ "role": "user", "content": "Where is my parcel?" }],
                        "max_tokens": 16
                    });
                    let sent = client
                        .post(&url)
                        .header("x-request-id", id)
                        .json(&body)
                        .timeout(Duration::from_secs(10))
                        .send()
                        .await;
                    if sent.is_ok_and(|r| r.status().is_success()) {
                        answered += 1;
                    }
                    tokio::time::sleep(pause).await;
                }
                answered
            })
        })
        .collect()
}

fn state(inst: &Instance) -> State {
    inst.llm.breakers().get("mock", PRIMARY).state()
}

/// Waits (polling every 5 ms) until `done` holds or `limit` passes.
async fn until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    done()
}

fn from(a: &Arrival, tag: &str) -> bool {
    a.request_id.as_deref().is_some_and(|id| id.starts_with(tag))
}

async fn shared_epoch(url: &str, prefix: &str) -> u64 {
    let config = RedisConfig {
        key_prefix: prefix.to_owned(),
        timeout_ms: 1_000,
        ..RedisConfig::new(url)
    };
    let store = RedisBackend::connect(config).await.expect("redis");
    store.read(BREAKER).await.expect("read").epoch
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_share_one_breaker_through_a_500_storm() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let storm_ms = 4_000;
    let url = pressure_testkit::redis_url();
    let prefix = prefix("storm");
    let mock = mock().await;
    let a = gateway(&mock, &url, &prefix, None).await;
    let b = gateway(&mock, &url, &prefix, None).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = load(&a, "a", 6, Duration::ZERO, &stop);
    // B's trickle (at most 5 calls in any breaker window of 2 s) never
    // reaches minimumCalls (10) by itself: B can only learn the opening.
    clients.extend(load(&b, "b", 1, Duration::from_millis(400), &stop));
    let (storm_start, storm_end) = play(&mock, BEFORE_MS, storm_ms);

    let within = Duration::from_millis(BEFORE_MS + storm_ms);
    assert!(
        until(within, || state(&a) == State::Open || state(&b) == State::Open).await,
        "the breaker never opened: mock {:?}, a {:?} {:?}",
        mock.stats(),
        a.llm.breakers().snapshot(),
        a.llm.breakers().recent_transitions()
    );
    let first_open = mock_ms(&mock);
    assert!(
        until(Duration::from_secs(2), || state(&a) == State::Open
            && state(&b) == State::Open)
        .await,
        "a: {:?}, b: {:?}",
        state(&a),
        state(&b)
    );
    let all_open = mock_ms(&mock);
    assert!(
        all_open < storm_end - 1_000.0,
        "opened too late to check anything"
    );

    // The storm ends: the breaker must close on both.
    let wait = Duration::from_millis((storm_end - mock_ms(&mock)).max(0.0) as u64) + Duration::from_secs(10);
    assert!(
        until(wait, || mock_ms(&mock) > storm_end
            && state(&a) == State::Closed
            && state(&b) == State::Closed)
        .await,
        "after the storm: a {:?}, b {:?}",
        state(&a),
        state(&b)
    );
    let closed = mock_ms(&mock);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.expect("client");
    }
    let arrivals = mock.arrivals();
    let epoch = shared_epoch(&url, &prefix).await;

    // B's first opening came from the fleet, not from its own window.
    let b_opened = b
        .llm
        .breakers()
        .recent_transitions()
        .into_iter()
        .find(|t| &*t.name == BREAKER && t.to == State::Open)
        .expect("b opened");
    assert_eq!(b_opened.reason, TransitionReason::Fleet, "{b_opened:?}");

    let primary: Vec<&Arrival> = arrivals.iter().filter(|x| x.model == PRIMARY).collect();
    let checked: Vec<&&Arrival> = primary
        .iter()
        .filter(|x| x.at_ms >= all_open + OPEN_GRACE_MS && x.at_ms < storm_end)
        .collect();
    let not_probes = checked.iter().filter(|x| !x.probe).count();
    let probes = checked.iter().filter(|x| x.probe).count();
    println!(
        "first open at {first_open:.0} ms, both open at {all_open:.0} ms (storm until {storm_end:.0} ms), \
         closed on both at {closed:.0} ms (mock clock, storm from {storm_start:.0} ms); {probes} probes and {not_probes} other calls to the primary \
         while open; shared epoch {epoch}"
    );
    assert_eq!(not_probes, 0, "calls to the dead primary other than probes");
    assert!(probes > 0, "the fleet never probed during a {storm_ms} ms storm");
    // Every epoch of the shared breaker (each opening, and the closing) had
    // at most one fleet-wide quota of probes.
    assert!(epoch >= 2, "shared epoch {epoch}: the breaker was not shared");
    let max = PROBES as usize * (epoch as usize - 1);
    assert!(
        probes <= max,
        "{probes} probes, at most {max} over {} openings",
        epoch - 1
    );

    // Back to normal: both gateways send the primary traffic again.
    for tag in ["a", "b"] {
        let ok = primary
            .iter()
            .filter(|x| from(x, tag) && x.at_ms > closed && x.outcome == Outcome::Ok)
            .count();
        assert!(ok > 0, "gateway {tag} sent the primary nothing after it closed");
    }
    assert!(
        arrivals.iter().any(|x| x.model == BACKUP),
        "the backup served the storm"
    );

    // What B learned is on its admin page and in its metrics.
    let page: serde_json::Value = reqwest::get(format!("http://{}/admin/pressure/llm", b.admin))
        .await
        .expect("admin answers")
        .json()
        .await
        .expect("json");
    assert_eq!(page["breakerScope"]["scope"], "fleet", "{page}");
    assert_eq!(page["breakerScope"]["storeHealthy"], true, "{page}");
    let learned = page["transitions"]
        .as_array()
        .expect("transitions")
        .iter()
        .any(|t| t["breaker"] == BREAKER && t["reason"] == "fleet" && t["to"] == "open");
    assert!(learned, "{page}");
    let metrics = reqwest::get(format!("http://{}/metrics", b.admin))
        .await
        .expect("metrics answer")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains("pressure_llm_breaker_fleet_store_healthy 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("pressure_llm_breaker_state{provider=\"mock\",model=\"primary\"} 0"),
        "{metrics}"
    );

    a.serving.stop(Duration::from_secs(5)).await;
    b.serving.stop(Duration::from_secs(5)).await;
    mock.shutdown().await;
}

/// Calls to the primary while it is dead, by instance count and scope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run with --ignored --nocapture"]
async fn outage_calls_by_instances_and_scope() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let storm_ms = 5_000;
    let url = pressure_testkit::redis_url();
    let mut rows = Vec::new();
    for instances in [1usize, 2] {
        for scope in ["process", "fleet"] {
            let prefix = prefix(scope);
            let mock = mock().await;
            let mut gws = Vec::new();
            for _ in 0..instances {
                gws.push(gateway(&mock, &url, &prefix, Some(scope)).await);
            }
            let stop = Arc::new(AtomicBool::new(false));
            let mut clients = Vec::new();
            for g in &gws {
                clients.extend(load(g, "m", 4, Duration::ZERO, &stop));
            }
            // The storm from the start: the windows hold only its failures.
            let (start, end) = play(&mock, 0, storm_ms);
            let mut first_open = None;
            while mock_ms(&mock) < end + 200.0 {
                if first_open.is_none() && gws.iter().any(|g| state(g) == State::Open) {
                    first_open = Some(mock_ms(&mock));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let first_open = first_open.expect("the breaker opened");
            stop.store(true, Ordering::Relaxed);
            for c in clients {
                c.await.expect("client");
            }
            let storm = |x: &&Arrival| x.model == PRIMARY && x.at_ms >= start && x.at_ms < end;
            let arrivals = mock.arrivals();
            let calls = arrivals.iter().filter(storm).count();
            let probes = arrivals.iter().filter(storm).filter(|x| x.probe).count();
            let after = arrivals
                .iter()
                .filter(storm)
                .filter(|x| x.at_ms >= first_open)
                .count();
            let opens: usize = gws
                .iter()
                .map(|g| {
                    g.llm
                        .breakers()
                        .recent_transitions()
                        .iter()
                        .filter(|t| t.to == State::Open)
                        .count()
                })
                .sum();
            rows.push((instances, scope, calls, after, probes, opens));
            for g in gws {
                g.serving.stop(Duration::from_secs(5)).await;
            }
            mock.shutdown().await;
        }
    }
    println!("calls to the dead primary during a {storm_ms} ms outage (4 clients per instance, openWaitMs {OPEN_WAIT_MS}, halfOpenProbes {PROBES}, minimumCalls 10):");
    println!(
        "| instances | scope | calls | after the first opening | probes | openings seen (all instances) |"
    );
    println!("|---|---|---|---|---|---|");
    for (i, s, c, a, p, o) in &rows {
        println!("| {i} | {s} | {c} | {a} | {p} | {o} |");
    }
    assert!(rows.iter().all(|r| r.2 > 0), "every run saw the storm: {rows:?}");
}
