//! What a dead model costs in provider calls, by instance count and
//! breaker scope (docs/architecture.md#what-openai-and-anthropic-clients-expect): 1 and 2 gateways on one Redis (started
//! here, loopback), each with 4 closed-loop clients, in front of one mock
//! provider whose primary answers 500 for 5 s; per run, the calls the
//! primary saw, those after the first opening, the half-open probes, and
//! the openings seen. A measurement, not a test: it prints a table.
//!
//! `cargo bench -p pressure-chaos --bench fleet_outage` (about 25 s).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "../tests/fleet_breaker/support.rs"]
mod support;

use support::*;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    eprintln!("{}", pressure_testkit::machine("before"));
    runtime.block_on(outage_calls_by_instances_and_scope());
    eprintln!("{}", pressure_testkit::machine("after"));
}

/// Calls to the primary while it is dead, by instance count and scope.
async fn outage_calls_by_instances_and_scope() {
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
    if rows.iter().any(|r| r.2 == 0) {
        eprintln!("fleet_outage: a run saw no storm: {rows:?}");
        std::process::exit(1);
    }
}
