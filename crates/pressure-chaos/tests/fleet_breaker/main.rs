//! Fleet-wide circuit breakers (docs/architecture.md#what-openai-and-anthropic-clients-expect): two gateways on one Redis in
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
//! What the dead model costs in provider calls with 1 and 2 instances,
//! per-process and fleet-wide, is measured by the bench
//! `cargo bench -p pressure-chaos --bench fleet_outage`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::*;

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
