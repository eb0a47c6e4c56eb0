//! The CI smoke of the chaos stand: every scenario in short mode through the
//! real mock provider and a real gateway on 127.0.0.1, with the money
//! comparison, and every criterion must pass. Bounded: 5 scenarios × 2 runs
//! of a few seconds each, all loopback.

use std::time::Duration;

use pressure_chaos::driver::{self, ChaosOptions, Quiet};
use pressure_chaos::report;

/// One load at a time: the latency criteria compare runs, so two tests
/// loading the machine at once would measure each other.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_passes_in_short_mode() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let opts = ChaosOptions {
        concurrency: 50,
        ..ChaosOptions::short()
    };
    let mut rep = tokio::time::timeout(Duration::from_secs(300), driver::run(&opts, &Quiet))
        .await
        .expect("the short run ends within 5 minutes")
        .expect("the stack starts");

    let failed: Vec<String> = rep
        .scenarios
        .iter()
        .flat_map(|s| {
            s.criteria
                .iter()
                .filter(|c| !c.passed)
                .map(move |c| format!("{}: {} — {}", s.name, c.name, c.detail))
        })
        .collect();
    assert!(failed.is_empty(), "failed criteria:\n{}", failed.join("\n"));
    assert!(rep.passed);

    let names: Vec<&str> = rep.scenarios.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, driver::scenario::SCENARIOS);
    for s in &rep.scenarios {
        assert!(s.requests > 100, "{}: only {} requests", s.name, s.requests);
        assert!(s.criteria.len() >= 6, "{}: {} criteria", s.name, s.criteria.len());
        assert!(s.mock.requests > 0, "{}: the mock saw nothing", s.name);
    }
    // The budget burns less on failed retries where calls time out.
    for name in ["hang", "stall"] {
        let m = rep.money.iter().find(|m| m.scenario == name).expect("money row");
        assert!(
            m.with_budget_micro_usd < m.without_budget_micro_usd,
            "{name}: with budget {} µ$, without {} µ$",
            m.with_budget_micro_usd,
            m.without_budget_micro_usd
        );
    }
    // The 500 storm shows the breaker in the report's timeline.
    let storm = rep
        .scenarios
        .iter()
        .find(|s| s.name == "500-storm")
        .expect("storm");
    assert!(
        storm.breaker.iter().any(|b| b.state == "open"),
        "{:?}",
        storm.breaker
    );

    let dir = std::env::temp_dir().join(format!("pressure-chaos-ci-{}", std::process::id()));
    let written = report::write_report(&mut rep, &dir).expect("report written");
    assert!(written.iter().any(|p| p.ends_with("report.md")));
    assert!(written.iter().any(|p| p.ends_with("500-storm-breaker.svg")));
    let md = std::fs::read_to_string(dir.join("report.md")).expect("report.md");
    assert!(md.contains("**PASS**"), "{md}");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// The same stack with its limits in Redis (the test binary's own
/// `redis-server` from `pressure-testkit`, or `PRESSURE_REDIS_URL`): the
/// backend swap changes nothing the criteria can see.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_500_storm_passes_on_the_redis_backend() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let url = pressure_testkit::redis_url();
    let opts = ChaosOptions {
        scenarios: vec!["500-storm".into()],
        concurrency: 50,
        duration: Duration::from_secs(6),
        redis: Some(url),
        money: false,
        ..ChaosOptions::short()
    };
    let rep = tokio::time::timeout(Duration::from_secs(120), driver::run(&opts, &Quiet))
        .await
        .expect("the run ends within 2 minutes")
        .expect("the stack starts on Redis");
    assert!(rep.backend.starts_with("redis://"), "{}", rep.backend);
    let storm = &rep.scenarios[0];
    let failed: Vec<String> = storm
        .criteria
        .iter()
        .filter(|c| !c.passed)
        .map(|c| format!("{} — {}", c.name, c.detail))
        .collect();
    assert!(failed.is_empty(), "failed criteria:\n{}", failed.join("\n"));
    assert_eq!(storm.criteria.len(), 7, "{:?}", storm.criteria);
}
