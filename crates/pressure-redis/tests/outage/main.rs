//! Redis down at start is not fatal: `RedisBackend::start` returns with no
//! server listening, the failure mode answers (`closed` denials carry the
//! outage marker), the status names the address and the real cause, and
//! when a Redis of the test's own comes up later the background probe
//! reconnects — with no traffic at all — so the next acquisition is counted
//! by Redis.
//!
//! Nothing here depends on how fast the machine is: the call timeout is far
//! above what a healthy call takes on a loaded machine, and the time bounds
//! are the configured values a wrong implementation would have to wait for
//! (a connect timeout) or a deadline that only catches a hang.

#[path = "../own_store/redis.rs"]
mod own_redis;

use own_redis::{free_port, OwnRedis};
use pressure_core::{AcquireOptions, Acquisition, DenialCause, Limits, ResourceBroker};
use pressure_redis::keys::ResourceKeys;
use pressure_redis::{FailureMode, RedisBackend, RedisConfig};
use std::time::Duration;
use tokio::time::Instant;

/// The per-call timeout, ms. Not the 50 ms default: a healthy call on a
/// loaded machine can take longer than that, and in `closed` mode the
/// timeout is a refusal where the test expects Redis to count.
const TIMEOUT_MS: u64 = 1_000;

/// How long the background task may take to find a Redis that came up:
/// it reconnects and probes every 100 ms, so this only catches a backend
/// that never does.
const RECOVERY: Duration = Duration::from_secs(10);

fn config(port: u16, mode: FailureMode) -> RedisConfig {
    RedisConfig {
        url: format!("redis://127.0.0.1:{port}"),
        failure_mode: mode,
        local_share: 0.5,
        timeout_ms: TIMEOUT_MS,
        ..RedisConfig::default()
    }
}

/// A loopback listener that never accepts: the kernel completes each
/// connection, and nothing ever answers on it. A Redis down this way makes
/// connecting cost the whole connect timeout (unlike a refused port, which
/// fails at once), so a call that waited for a connect would show.
fn silent_listener() -> std::net::TcpListener {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port")
}

async fn broker_down(port: u16, mode: FailureMode) -> ResourceBroker<RedisBackend> {
    let backend = RedisBackend::start(config(port, mode))
        .await
        .expect("starts without redis");
    let b = ResourceBroker::builder(backend).build();
    b.register_limit("o", Limits::default().requests_per_minute(20))
        .expect("valid");
    b
}

/// Acquisitions of `n` and their outcomes.
async fn burst(b: &ResourceBroker<RedisBackend>, n: usize) -> Vec<Acquisition<RedisBackend>> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            b.try_acquire("o", AcquireOptions::default())
                .await
                .expect("the failure mode answers, never an error"),
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_with_redis_down_reports_the_address_and_the_cause() {
    let port = free_port();
    let b = broker_down(port, FailureMode::Closed).await;
    let st = b.backend().status();
    assert!(!st.healthy, "{st:?}");
    assert_eq!(st.url, format!("redis://127.0.0.1:{port}"));
    let cause = st.last_error.expect("a cause");
    assert!(cause.contains("connection refused"), "{cause}");
    // `connect` keeps meaning "fail if unreachable", with the same words.
    let e = RedisBackend::connect(config(port, FailureMode::Closed))
        .await
        .expect_err("nothing listens");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("redis://127.0.0.1:{port}")) && msg.contains("connection refused"),
        "{msg}"
    );
}

/// Redis is silent (connecting to it would cost the connect timeout): every
/// call is refused by the failure mode as an outage, and none waits for a
/// connect — not even those that try Redis again — each is answered before
/// a connect could time out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_mode_refuses_as_an_outage_not_as_a_limit() {
    // A call that connected would wait the connect timeout out: the call
    // timeout is longer, so it would not cut that wait short.
    const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
    const CALL_TIMEOUT_MS: u64 = 5_000;
    let silent = silent_listener();
    let port = silent.local_addr().expect("addr").port();
    let backend = RedisBackend::start(RedisConfig {
        connect_timeout_ms: CONNECT_TIMEOUT.as_millis() as u64,
        timeout_ms: CALL_TIMEOUT_MS,
        ..config(port, FailureMode::Closed)
    })
    .await
    .expect("starts without redis");
    let st = backend.status();
    assert!(
        !st.healthy && st.last_error.as_deref().is_some_and(|e| e.contains("timed out")),
        "the start-up connect waited out its timeout: {st:?}"
    );
    let b = ResourceBroker::builder(backend).build();
    b.register_limit("o", Limits::default().requests_per_minute(20))
        .expect("valid");
    let mut out = Vec::new();
    for i in 0..10 {
        // More than a probe interval (100 ms) apart: each call is the one
        // that may try Redis again, not one answered by the failure mode
        // because another just tried.
        tokio::time::sleep(Duration::from_millis(150)).await;
        out.push(
            tokio::time::timeout(CONNECT_TIMEOUT, b.try_acquire("o", AcquireOptions::default()))
                .await
                .unwrap_or_else(|_| panic!("call {i} waited for a connect"))
                .expect("the failure mode answers, never an error"),
        );
    }
    for a in &out {
        let d = a.denial().expect("closed denies");
        assert_eq!(d.cause, DenialCause::Unavailable, "{d:?}");
        assert!(d.is_unavailable() && !d.is_exact());
        assert!(d.wait > Duration::ZERO, "a Retry-After");
    }
    let st = b.backend().status();
    assert!(st.fallbacks >= 10, "{st:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_mode_allows_while_redis_is_down_at_start() {
    let b = broker_down(free_port(), FailureMode::Open).await;
    assert!(burst(&b, 30).await.iter().all(|a| a.allowed()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_mode_counts_a_share_while_redis_is_down_at_start() {
    let b = broker_down(free_port(), FailureMode::Local).await;
    let out = burst(&b, 15).await;
    assert_eq!(
        out.iter().filter(|a| a.allowed()).count(),
        10,
        "0.5 of 20 per minute"
    );
    let d = out.iter().find_map(|a| a.denial()).expect("some denied");
    assert_eq!(d.cause, DenialCause::Exhausted, "the local share is a real limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_coming_up_later_is_used_without_any_traffic() {
    let port = free_port();
    let b = broker_down(port, FailureMode::Closed).await;
    assert!(!burst(&b, 1).await[0].allowed(), "closed while down");
    tokio::time::sleep(Duration::from_millis(300)).await;

    let srv = OwnRedis::start_on(port, &[]);
    let up = Instant::now();
    // No acquisition from here on until the backend says it is back:
    // reading the status is not traffic.
    while !b.backend().status().healthy {
        assert!(
            up.elapsed() < RECOVERY,
            "not reconnected {:?} after redis answered, without traffic: {:?}",
            up.elapsed(),
            b.backend().status()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The reconnect loaded the scripts into the new server.
    let mut c = srv.conn();
    let acquire = redis::Script::new(concat!(
        include_str!("../../lua/calendar.lua"),
        include_str!("../../lua/acquire.lua")
    ));
    let loaded: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(acquire.get_hash())
        .query(&mut c)
        .expect("script exists");
    assert_eq!(loaded, vec![true], "scripts preloaded on reconnect");

    // The next acquisition is counted by Redis: its key is there.
    let key = ResourceKeys::new("pressure", "o").state;
    let before: bool = redis::cmd("EXISTS").arg(&key).query(&mut c).expect("exists");
    assert!(!before);
    assert!(burst(&b, 1).await[0].allowed(), "counted in redis");
    let after: bool = redis::cmd("EXISTS").arg(&key).query(&mut c).expect("exists");
    assert!(after, "the acquisition reached redis");
    let s = b.resource_stats("o").await.expect("stats from redis");
    assert_eq!(s.usage.get("requestsPerMinute"), Some(&1));
    let st = b.backend().status();
    assert_eq!(st.transitions, 1, "one transition: back to healthy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_named_as_an_auth_failure() {
    let srv = OwnRedis::start_on(free_port(), &["--requirepass", "s3cret"]);
    let backend = RedisBackend::start(config(srv.port, FailureMode::Closed))
        .await
        .expect("starts");
    let st = backend.status();
    assert!(!st.healthy);
    let cause = st.last_error.expect("a cause");
    assert!(
        cause.contains("authentication failed") || cause.contains("NOAUTH"),
        "{cause}"
    );
    // The password never shows in messages.
    let url = format!("redis://:s3cret@127.0.0.1:{}", srv.port);
    let ok = RedisBackend::start(RedisConfig {
        url,
        ..config(srv.port, FailureMode::Closed)
    })
    .await
    .expect("starts");
    let st = ok.status();
    assert!(st.healthy, "{st:?}");
    assert!(!st.url.contains("s3cret"), "{}", st.url);
}
