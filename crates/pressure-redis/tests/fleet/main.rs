//! Fleet accuracy: four brokers, each with its own connections (four
//! instances of a fleet), drive one resource at four times its limit for
//! several windows. Every admission's server time is recorded; no interval
//! of the window's length may hold more than N, and the fleet must use at
//! least 95 % of N per window.

#[path = "../support.rs"]
mod support;

use pressure_core::{AcquireOptions, Acquisition, Limits};
use std::time::Duration;

const N: u64 = 100;
const W_US: u64 = 1_000_000;

/// Drives `id` from 4 brokers at 4N per window for `windows` windows and
/// returns the sorted server times (µs) of every admission.
async fn drive(id: &str, limits: Limits, windows: u64) -> Vec<u64> {
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let b = support::broker().await;
        b.register_limit(id, limits.clone()).expect("valid");
        let id = id.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut times = Vec::new();
            // Each instance offers N per window, i.e. 4N across the fleet.
            let mut tick = tokio::time::interval(Duration::from_micros(W_US / N));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            for _ in 0..(N * windows) {
                tick.tick().await;
                if let Acquisition::Granted(p) = b
                    .try_acquire(&id, AcquireOptions::default())
                    .await
                    .expect("answers")
                {
                    times.push(p.grant().at_ns / 1_000);
                }
            }
            times
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("instance"));
    }
    all.sort_unstable();
    all
}

/// Most admissions in any half-open interval [t, t + w).
fn max_in_any_window(times: &[u64], w: u64) -> usize {
    let mut lo = 0;
    let mut best = 0;
    for hi in 0..times.len() {
        while times[hi] - times[lo] >= w {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best
}

/// Admissions per window over whole windows after the first one (whose
/// initial burst would flatter the figure), as a share of N.
fn utilization(times: &[u64], windows: u64) -> f64 {
    let start = times[0] + W_US;
    let whole = windows - 2;
    let end = start + whole * W_US;
    let n = times.iter().filter(|t| **t >= start && **t < end).count();
    n as f64 / (N * whole) as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_fleet_never_exceeds_n_in_any_window() {
    let id = format!("{}:fleet:window", support::run_id());
    let times = drive(&id, Limits::default().requests_per_second(N), 4).await;
    let peak = max_in_any_window(&times, W_US);
    let util = utilization(&times, 4);
    println!(
        "window fleet: {} admitted, peak {peak} in any 1 s (N = {N}), utilization {:.1} %",
        times.len(),
        util * 100.0
    );
    assert!(peak as u64 <= N, "peak {peak} > {N}");
    assert!(util >= 0.95, "utilization {util}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_fleet_stays_within_burst_plus_rate() {
    let id = format!("{}:fleet:gcra", support::run_id());
    let burst = 10;
    let times = drive(&id, Limits::default().requests_per_second(N).gcra(Some(burst)), 4).await;
    // GCRA bound: at most C + d / T in any span d; check every span of a window.
    let peak = max_in_any_window(&times, W_US);
    let util = utilization(&times, 4);
    println!(
        "gcra fleet: {} admitted, peak {peak} in any 1 s (bound {}), utilization {:.1} %",
        times.len(),
        N + burst,
        util * 100.0
    );
    assert!(peak as u64 <= N + burst, "peak {peak}");
    assert!(util >= 0.95, "utilization {util}");
}
