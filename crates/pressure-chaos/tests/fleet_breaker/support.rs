//! What the fleet-breaker test and the `fleet_outage` bench share: a mock
//! provider whose primary model fails on cue, gateways on one Redis in
//! front of it, and closed-loop clients.

#![allow(
    dead_code,
    unused_imports,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used
)]

pub(crate) use std::net::SocketAddr;
pub(crate) use std::path::Path;
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
pub(crate) use std::sync::Arc;
pub(crate) use std::time::Duration;
pub(crate) use tokio::time::Instant;

pub(crate) use pressure_chaos::driver::OPEN_GRACE_MS;
pub(crate) use pressure_chaos::driver::{gateway_config, StackSettings, USE_CASE};
pub(crate) use pressure_chaos::driver::{BACKUP, PRIMARY};
pub(crate) use pressure_core::shared_breaker::SharedBreakerStore;
pub(crate) use pressure_gateway::openai::Llm;
pub(crate) use pressure_gateway::{Gateway, Serving};
pub(crate) use pressure_llm::breaker::{State, TransitionReason};
pub(crate) use pressure_mock::{Arrival, Behaviour, MockConfig, MockProvider, Outcome, Phase};
pub(crate) use pressure_redis::{RedisBackend, RedisConfig};
pub(crate) use serde_json::json;
pub(crate) use tokio::net::TcpListener;

/// Normal answers before the storm, ms (mock clock).
pub(crate) const BEFORE_MS: u64 = 1_000;
pub(crate) const PROBES: u32 = 2;
pub(crate) const OPEN_WAIT_MS: u64 = 500;
pub(crate) const BREAKER: &str = "mock/primary";

/// One load at a time: the measurement compares runs.
pub(crate) static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub(crate) fn settings() -> StackSettings {
    StackSettings {
        max_attempts: 1,
        breaker_window_ms: 2_000,
        breaker_open_wait_ms: OPEN_WAIT_MS,
        half_open_probes: PROBES,
        minimum_calls: 10,
        ..StackSettings::for_concurrency(16)
    }
}

pub(crate) fn prefix(tag: &str) -> String {
    let nanos = std::time::SystemTime::UNIX_EPOCH
        .elapsed()
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("fleet-breaker-{}-{nanos:x}-{tag}", std::process::id())
}

/// A mock answering normally (its behaviour is [`play`]ed once the stack
/// is up: the phase clock starts when it is set).
pub(crate) async fn mock() -> MockProvider {
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
pub(crate) fn play(mock: &MockProvider, before_ms: u64, storm_ms: u64) -> (f64, f64) {
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
pub(crate) fn mock_ms(m: &MockProvider) -> f64 {
    m.started().elapsed().as_secs_f64() * 1_000.0
}

pub(crate) struct Instance {
    pub(crate) addr: SocketAddr,
    pub(crate) admin: SocketAddr,
    pub(crate) llm: Llm,
    pub(crate) serving: Serving,
}

/// A gateway in front of `mock` on the Redis at `url` under `prefix`;
/// `scope` overrides `llm.breaker.scope`.
pub(crate) async fn gateway(mock: &MockProvider, url: &str, prefix: &str, scope: Option<&str>) -> Instance {
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
pub(crate) fn load(
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

pub(crate) fn state(inst: &Instance) -> State {
    inst.llm.breakers().get("mock", PRIMARY).state()
}

/// Waits (polling every 5 ms) until `done` holds or `limit` passes.
pub(crate) async fn until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    done()
}

pub(crate) fn from(a: &Arrival, tag: &str) -> bool {
    a.request_id.as_deref().is_some_and(|id| id.starts_with(tag))
}

pub(crate) async fn shared_epoch(url: &str, prefix: &str) -> u64 {
    let config = RedisConfig {
        key_prefix: prefix.to_owned(),
        timeout_ms: 1_000,
        ..RedisConfig::new(url)
    };
    let store = RedisBackend::connect(config).await.expect("redis");
    store.read(BREAKER).await.expect("read").epoch
}
