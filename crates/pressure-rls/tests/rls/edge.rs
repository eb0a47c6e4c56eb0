//! The 2N edge: a fixed window (envoyproxy/ratelimit's) admits 2N across a
//! window edge; pressure's sliding window never admits more than N in any
//! interval of one unit. On an injected clock, so the schedule is exact.

use crate::support::{ok, req};
use pressure_core::clock::ManualClock;
use pressure_core::{MemoryBackend, ResourceBroker};
use pressure_rls::{Plan, RateLimiter};
use std::sync::Arc;
use std::time::Duration;

const N: usize = 10;

#[tokio::test]
async fn no_window_of_one_minute_ever_holds_more_than_n() {
    let clock = Arc::new(ManualClock::new(0));
    let broker = ResourceBroker::builder(MemoryBackend::with_clock(clock.clone()))
        .clock(clock.clone())
        .build();
    let yaml =
        "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n";
    let plan = Plan::from_texts(&[("edge.yaml".into(), yaml.into())]).expect("plan");
    let limiter = RateLimiter::new(broker, plan);
    let r = req("edge", &[&[("k", "v")]]);

    // The attack on a fixed window: quiet until just before a minute
    // boundary, a burst of 2N there, then a burst of 2N just after it;
    // then a steady stream, one request every 500 ms, for three minutes.
    let mut arrivals: Vec<u64> = Vec::new();
    let ms = |m: u64| m * 1_000_000;
    arrivals.extend(std::iter::repeat_n(ms(59_900), 2 * N));
    arrivals.extend(std::iter::repeat_n(ms(60_100), 2 * N));
    arrivals.extend((0..360).map(|i| ms(60_200 + 500 * i)));

    let mut admitted: Vec<u64> = Vec::new();
    for &at in &arrivals {
        clock.set(at);
        if ok(&limiter.should_rate_limit(&r).await.expect("answer")) {
            admitted.push(at);
        }
    }
    // A fixed one-minute window admits N in minute 0 (at 59.9 s) and N
    // more in minute 1 (at 60.1 s): 2N within 200 ms.
    let fixed = fixed_window_admits(&arrivals, ms(60_000), N);
    let burst = fixed
        .iter()
        .filter(|t| (ms(59_900)..=ms(60_100)).contains(*t))
        .count();
    assert_eq!(burst, 2 * N, "the fixed window's edge");
    // Ours: at most N in every interval of 60 s, wherever it starts.
    let w = Duration::from_secs(60).as_nanos() as u64;
    for (i, &start) in admitted.iter().enumerate() {
        let inside = admitted[i..].iter().take_while(|&&t| t < start + w).count();
        assert!(inside <= N, "{inside} admitted in the minute from {start} ns");
    }
    assert_eq!(admitted.iter().filter(|t| **t <= ms(60_100)).count(), N);
    // And the limit is used: once the burst at 59.9 s has left the window
    // (120 s), the steady stream gets at least 95 % of N per minute over
    // the two minutes left.
    let later = admitted.iter().filter(|t| **t >= ms(120_000)).count();
    assert!(
        later * 100 >= 95 * 2 * N,
        "{later} admitted from 120 s to 239.7 s"
    );
}

/// What a fixed window of `w` ns with limit `n` admits of `arrivals`
/// (upstream's algorithm: one counter per aligned window; refused calls
/// count too, which does not change what is admitted).
fn fixed_window_admits(arrivals: &[u64], w: u64, n: usize) -> Vec<u64> {
    let mut out = Vec::new();
    let mut window = u64::MAX;
    let mut count = 0;
    for &t in arrivals {
        if t / w != window {
            window = t / w;
            count = 0;
        }
        count += 1;
        if count <= n {
            out.push(t);
        }
    }
    out
}
