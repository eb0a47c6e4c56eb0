//! What a hostile caller cannot do with its strings and numbers:
//!
//! * long descriptor values keep `/metrics`, the counter ids (Redis keys)
//!   and the memory bounded (`id.rs`, `metrics.rs`);
//! * a flood of distinct values never resets a key that is over its limit
//!   inside its window; past `--max-counters` live counters new values
//!   share their rule's overflow counter (`counters.rs`);
//! * no `hits_addend` makes a Prometheus counter go down, and none reaches
//!   the store or a status as a wrapped number;
//! * a store failure on one descriptor does not turn another's refusal
//!   into `UNAVAILABLE`.

use crate::support::{ok, req, start_counters, start_with};
use pressure_core::clock::ManualClock;
use pressure_core::{MemoryBackend, ResourceBroker};
use pressure_redis::{FailureMode, RedisConfig};
use pressure_rls::proto::{Code, RateLimitRequest, UInt64Value};
use pressure_rls::{Plan, RateLimiter, MAX_ID_BYTES, MAX_LABEL_BYTES};
use pressure_testkit::RedisServer;
use std::sync::Arc;

fn redis_config(url: &str, test: &str) -> RedisConfig {
    let mut rc = RedisConfig::new(url);
    rc.failure_mode = FailureMode::Closed;
    rc.key_prefix = format!("rls-{test}-{}", std::process::id());
    // Megabyte requests on a loaded two-core machine: the point here is
    // the answers, not the store's latency.
    rc.timeout_ms = 2_000;
    rc
}

/// `used_memory` of the Redis server on `port` (inline `INFO memory`).
fn redis_used_memory(port: u16) -> u64 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("redis");
    s.write_all(b"INFO memory\r\nQUIT\r\n").expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    out.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no used_memory in {out}"))
}

/// The value of the series of `family` in `domain` (summed over its
/// descriptors).
fn series(metrics: &str, family: &str, domain: &str) -> u64 {
    let head = format!("pressure_rls_{family}{{domain=\"{domain}\",");
    metrics
        .lines()
        .filter(|l| l.starts_with(&head))
        .map(|l| {
            l.rsplit(' ')
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .expect("value")
        })
        .fold(0, u64::saturating_add)
}

const DETAILED: &str = "domain: big
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
";

/// 40 distinct values of 1 MiB each (distinct in their first bytes and,
/// for the last two, only in their last byte).
fn huge_values() -> Vec<String> {
    let body = "x".repeat(1 << 20);
    let mut v: Vec<String> = (0..38).map(|i| format!("{i:04}{body}")).collect();
    v.push(format!("{body}a"));
    v.push(format!("{body}b"));
    v
}

/// Calls each of `values` twice and checks each is counted apart: /metrics
/// stays small and every label and counter id is bounded.
async fn long_values_are_bounded_on(rls: &mut crate::support::Rls) {
    let values = huge_values();
    for v in &values {
        let r = rls.call(req("big", &[&[("user", v.as_str())]])).await;
        assert!(ok(&r));
        let r = rls.call(req("big", &[&[("user", v.as_str())]])).await;
        assert_eq!(r.statuses[0].limit_remaining, 3, "each value counted apart");
    }
    let m = rls.metrics();
    // 40 series of 5 families plus the service's own counters: a few
    // hundred bytes each, whatever the values' length (was 210 MB).
    assert!(m.len() < 64 * 1024, "/metrics is {} bytes", m.len());
    for line in m.lines().filter(|l| l.contains("descriptor=\"")) {
        let label = line
            .split("descriptor=\"")
            .nth(1)
            .and_then(|r| r.rsplit_once("\"}"))
            .map(|(l, _)| l)
            .expect("label");
        assert!(label.len() <= MAX_LABEL_BYTES, "{} bytes: {label}", label.len());
        assert!(label.starts_with("user_"), "a readable prefix: {label}");
    }
    // One detailed series per value: the two values differing only in
    // their last byte are two series.
    assert_eq!(series(&m, "total_hits", "big"), 80);
    let detailed = m
        .lines()
        .filter(|l| l.starts_with("pressure_rls_total_hits{domain=\"big\""))
        .count();
    assert_eq!(detailed, 40, "{detailed} series");
}

#[tokio::test]
async fn long_values_keep_metrics_ids_and_memory_bounded() {
    let mut rls = start_counters(&[DETAILED], None, false, 50).await;
    long_values_are_bounded_on(&mut rls).await;
    let stats = rls.limiter.broker().local_stats();
    assert_eq!(stats.len(), 40, "one counter per value");
    for s in &stats {
        assert!(
            s.resource.len() <= MAX_ID_BYTES,
            "id of {} bytes",
            s.resource.len()
        );
        assert!(s.resource.starts_with("rls:big:user=0") || s.resource.starts_with("rls:big:user=x"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_values_keep_redis_keys_bounded() {
    let redis = RedisServer::start();
    let before = redis_used_memory(redis.port());
    let rc = redis_config(&redis.url(), "long");
    let mut rls = start_counters(&[DETAILED], Some(rc), false, 50).await;
    long_values_are_bounded_on(&mut rls).await;
    let grown = redis_used_memory(redis.port()).saturating_sub(before);
    // 40 keys named by a bounded id: kilobytes (was 40 MiB of key names).
    assert!(grown < 4 << 20, "Redis grew by {grown} bytes");
}

const FLOOD: &str = "domain: f
descriptors:
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 3}
";

/// The attacker exhausts its key, then floods 200 other values, then
/// tries again inside its window: how many flood calls were admitted.
async fn flood_then_retry(rls: &mut crate::support::Rls) -> usize {
    let me = req("f", &[&[("ip", "attacker")]]);
    assert_eq!(rls.admitted(&me, 5).await, 3);
    let mut admitted = 0;
    for i in 0..200 {
        let ip = format!("10.0.{}.{}", i / 256, i % 256);
        if ok(&rls.call(req("f", &[&[("ip", ip.as_str())]])).await) {
            admitted += 1;
        }
    }
    let r = rls.call(me).await;
    assert!(!ok(&r), "the flood reset an over-limit key: {r:?}");
    admitted
}

#[tokio::test]
async fn a_flood_of_new_values_never_resets_a_live_key() {
    let mut rls = start_counters(&[FLOOD], None, true, 50).await;
    let admitted = flood_then_retry(&mut rls).await;
    // 49 values found a slot (the attacker holds the 50th); the other 151
    // share the rule's overflow counter, which admits 3 a minute.
    assert_eq!(admitted, 49 + 3);
    assert_eq!(rls.limiter.counters(), 50);
    let m = rls.metrics();
    assert!(m.contains("pressure_rls_overflow_total 151"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_new_values_never_resets_a_live_key_in_redis() {
    let redis = RedisServer::start();
    let rc = redis_config(&redis.url(), "flood");
    let mut rls = start_counters(&[FLOOD], Some(rc), false, 50).await;
    // Redis keeps every count: each value has its own, none overflows.
    assert_eq!(flood_then_retry(&mut rls).await, 200);
    assert!(rls.metrics().contains("pressure_rls_overflow_total 0"));
}

#[tokio::test]
async fn counters_whose_windows_passed_make_room_and_overflow_drains() {
    let clock = Arc::new(ManualClock::new(0));
    let broker = ResourceBroker::builder(MemoryBackend::with_clock(clock.clone()))
        .clock(clock.clone())
        .max_lazy_resources(10 + RateLimiter::<MemoryBackend>::MAX_OVERFLOW_COUNTERS)
        .build();
    let yaml = "domain: s\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 2}\n";
    let plan = Plan::from_texts(&[("s.yaml".into(), yaml.into())]).expect("plan");
    let limiter = RateLimiter::new(broker, plan)
        .max_counters(10)
        .clock(clock.clone());
    let call = |ip: &str| req("s", &[&[("ip", ip)]]);
    let answer = |r: RateLimitRequest| {
        let limiter = &limiter;
        async move { ok(&limiter.should_rate_limit(&r).await.expect("answer")) }
    };
    let overflow = || {
        limiter
            .metrics()
            .overflow
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    // "a" is over its limit and idle; nine more values fill the table.
    assert!(answer(call("a")).await && answer(call("a")).await);
    assert!(!answer(call("a")).await);
    for i in 0..9 {
        assert!(answer(call(&format!("v{i}"))).await);
    }
    // Full: new values share the overflow counter (2 a second).
    clock.set(500_000_000);
    assert!(answer(call("n1")).await && answer(call("n2")).await);
    assert!(!answer(call("n3")).await, "the flood is limited as one");
    assert_eq!(overflow(), 3);
    assert!(!answer(call("a")).await, "\"a\" kept its count");
    assert_eq!(limiter.counters(), 10);
    // Three seconds on, every window has passed: the full table is swept
    // and new values get counters of their own again.
    clock.set(3_000_000_000);
    for i in 0..5 {
        assert!(answer(call(&format!("later{i}"))).await);
        assert!(answer(call(&format!("later{i}"))).await);
        assert!(!answer(call(&format!("later{i}"))).await, "counted apart");
    }
    assert!(answer(call("a")).await, "\"a\" again, its window passed");
    assert_eq!(overflow(), 3, "no overflow once slots were free");
    assert!(limiter.counters() <= 10);
}

#[tokio::test]
async fn an_overflowed_value_gets_no_fresh_counter_inside_its_window() {
    let clock = Arc::new(ManualClock::new(0));
    let broker = ResourceBroker::builder(MemoryBackend::with_clock(clock.clone()))
        .clock(clock.clone())
        .build();
    let yaml = "domain: s
descriptors:
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: tmp
    rate_limit: {unit: second, requests_per_unit: 5}
";
    let plan = Plan::from_texts(&[("s.yaml".into(), yaml.into())]).expect("plan");
    let limiter = RateLimiter::new(broker, plan)
        .max_counters(1)
        .clock(clock.clone());
    let answer = |key: &'static str, value: &'static str| {
        let limiter = &limiter;
        async move {
            let r = req("s", &[&[(key, value)]]);
            ok(&limiter.should_rate_limit(&r).await.expect("answer"))
        }
    };
    // "t" holds the one slot for about a second; "x" finds none and uses
    // up its rule's overflow counter (2 a minute).
    assert!(answer("tmp", "t").await);
    assert!(answer("ip", "x").await && answer("ip", "x").await);
    assert!(!answer("ip", "x").await);
    // 30 s on, the slot is free again ("t" has passed), but the overflow
    // counter still counts x's two: x must not start afresh on a slot.
    clock.set(30_000_000_000);
    assert!(!answer("ip", "x").await, "x is still over inside its minute");
    clock.set(200_000_000_000);
    assert!(answer("ip", "x").await, "its minute has passed");
}

/// `pressure_rls_total_hits` and `over_limit` of domain `h` after each
/// call never go down, and end at the saturated sums.
async fn hits_never_lower_counters_on(rls: &mut crate::support::Rls) {
    let u32max = u64::from(u32::MAX);
    let cases: [(u64, bool); 11] = [
        (u64::MAX, false),
        (1 << 63, false),
        (0, true),
        (u32max, false),
        (u32max + 1, false),
        (1 << 32, false),
        (1, true),
        (1_000, true),
        (1_001, false),
        (u64::MAX - 1, false),
        ((1 << 63) - 1, false),
    ];
    let (mut hits, mut over) = (0u64, 0u64);
    for (i, (h, fits)) in cases.into_iter().enumerate() {
        let key = format!("v{i}");
        let mut r = req("h", &[&[("k", key.as_str())]]);
        r.descriptors[0].hits_addend = Some(UInt64Value { value: h });
        let answer = rls.call(r).await;
        assert_eq!(ok(&answer), fits, "hits_addend {h}: {answer:?}");
        let s = &answer.statuses[0];
        assert!(s.limit_remaining <= 1_000, "{s:?}");
        if !fits {
            assert_eq!(s.code, Code::OverLimit as i32);
        }
        let m = rls.metrics();
        let (now_hits, now_over) = (series(&m, "total_hits", "h"), series(&m, "over_limit", "h"));
        assert!(
            now_hits >= hits,
            "total_hits went from {hits} to {now_hits} after {h}"
        );
        assert!(
            now_over >= over,
            "over_limit went from {over} to {now_over} after {h}"
        );
        (hits, over) = (now_hits, now_over);
    }
    assert_eq!(hits, u64::MAX);
    assert_eq!(over, u64::MAX);
    // The request's own hits_addend at the u32 edge: over, not an error.
    let mut r = req("h", &[&[("k", "request")]]);
    r.hits_addend = u32::MAX;
    assert!(!ok(&rls.call(r).await));
    assert!(rls.metrics().contains("pressure_rls_unavailable_total 0"));
}

const HITS: &str = "domain: h
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1000}
";

#[tokio::test]
async fn huge_hits_addends_never_lower_a_counter() {
    let mut rls = start_counters(&[HITS], None, false, 100).await;
    hits_never_lower_counters_on(&mut rls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_hits_addends_never_lower_a_counter_in_redis() {
    let redis = RedisServer::start();
    let rc = redis_config(&redis.url(), "hits");
    let mut rls = start_counters(&[HITS], Some(rc), false, 100).await;
    hits_never_lower_counters_on(&mut rls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_failure_does_not_turn_a_refusal_into_unavailable() {
    let yaml = "domain: u
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
";
    let mut redis = RedisServer::start();
    let rc = redis_config(&redis.url(), "unavailable");
    let mut rls = start_with(&[yaml], Some(rc), false).await;
    let spent = req("u", &[&[("k", "spent")]]);
    assert_eq!(rls.admitted(&spent, 2).await, 1);
    redis.stop();
    // A fresh counter needs the store; the spent one is refused from the
    // local deny cache. One refusal decides, in either order.
    for r in [
        req("u", &[&[("k", "fresh")], &[("k", "spent")]]),
        req("u", &[&[("k", "spent")], &[("k", "fresh")]]),
        req("u", &[&[("k", "fresh")], &[("blocked", "x")]]),
    ] {
        let answer = rls
            .client
            .should_rate_limit(r.clone())
            .await
            .expect("an answer, not UNAVAILABLE");
        assert_eq!(answer.overall_code, Code::OverLimit as i32, "{r:?}: {answer:?}");
        let codes: Vec<i32> = answer.statuses.iter().map(|s| s.code).collect();
        assert!(
            codes.contains(&(Code::Unknown as i32)),
            "the undecided one says so: {codes:?}"
        );
    }
    // A shadow-mode descriptor the store cannot decide decides nothing.
    let answer = rls
        .client
        .should_rate_limit(req("u", &[&[("shadow", "fresh")]]))
        .await
        .expect("shadow mode never refuses");
    assert_eq!(answer.overall_code, Code::Ok as i32);
    // Undecided alone: UNAVAILABLE, as before (Envoy's failure mode).
    let err = rls
        .client
        .should_rate_limit(req("u", &[&[("k", "fresh")]]))
        .await
        .expect_err("undecided");
    assert_eq!(err.code(), tonic::Code::Unavailable);
}
