//! The chaos driver: for each scenario it starts the mock provider and a
//! gateway in front of it, drives `concurrency` clients through the whole
//! stack for `duration`, and checks the acceptance criteria from what the
//! clients saw, what reached the mock and the breakers' transitions.
//!
//! Each scenario runs twice under the same load: with the retry money
//! budget (its criteria are the scenario's verdict) and without it (for the
//! money comparison; the "no 400 retried" and policy checks apply to it
//! too). `hang` compares with `normal`, so asking for `hang` alone also runs
//! `normal` first; and `normal` runs once more right after `hang`, so that
//! the comparison uses the slower of the baselines on either side of it (the
//! machine's speed drifts between runs on a shared machine, and the
//! criterion is about the stack, not the machine).
//!
//! `agents` runs once, on a stack of its own (`agents.rs`): agents' traffic
//! on `/v1/messages` and `/v1/responses`, no retry money budget to compare.

mod agents;
mod analysis;
mod criteria;
mod load;
mod scenario;
mod stack;

pub use criteria::OPEN_GRACE_MS;
pub use scenario::{BACKUP, CLAUDE_BACKUP, CLAUDE_PRIMARY, GPT_BACKUP, GPT_PRIMARY, PRIMARY, SCENARIOS};
pub use stack::{gateway_config, StackSettings, USE_CASE};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pressure_core::clock::duration_to_millis;
use tokio::time::Instant;

use self::analysis::{
    breaker_spans, bucket_width, buckets, failed_attempt, latency_series, percentiles, TransitionAt,
};
use self::criteria::{evaluate, healthy_p95, RunData};
use self::load::{drive, Load};
use self::scenario::Scenario;
use self::stack::{Stack, BUDGET_MICRO_USD, ROUTE_RESOURCE};
use crate::report::{MoneyRow, PhaseSpan, Report, ScenarioReport};
use pressure_mock::Behaviour;

/// Why a chaos run could not be made (a failed criterion is not an error:
/// it is in the report).
#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    /// An unknown scenario name.
    #[error("unknown scenario {0:?} (known: {known}, or all)", known = SCENARIOS.join(", "))]
    UnknownScenario(String),
    /// The mock or the gateway did not start.
    #[error("could not start the stack: {0}")]
    Start(String),
    /// A socket could not be bound.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct ChaosOptions {
    /// Scenario names, or `["all"]`.
    pub scenarios: Vec<String>,
    /// Concurrent clients (50–100 is what the criteria were written for).
    pub concurrency: usize,
    /// Load duration per run.
    pub duration: Duration,
    /// Recorded in the report (`short` for CI).
    pub mode: String,
    /// A Redis URL for the gateway's backend; `None`: in memory.
    pub redis: Option<String>,
    /// Seed of the mock's random draws.
    pub seed: Option<u64>,
    /// Whether to run each scenario a second time without the money budget.
    pub money: bool,
}

impl ChaosOptions {
    /// The full run: every scenario, 64 clients, 30 s each.
    pub fn full() -> Self {
        Self {
            scenarios: vec!["all".into()],
            concurrency: 64,
            duration: Duration::from_secs(30),
            mode: "full".into(),
            redis: None,
            seed: None,
            money: true,
        }
    }

    /// The CI run: every scenario, 64 clients, 6 s of load per run (about 80 s
    /// in all on 2 cores).
    pub fn short() -> Self {
        Self {
            duration: Duration::from_secs(6),
            mode: "short".into(),
            ..Self::full()
        }
    }

    /// The scenarios to run, in order, `normal` first when `hang` needs it.
    pub fn resolve(&self) -> Result<Vec<&'static str>, ChaosError> {
        let mut want: Vec<&'static str> = Vec::new();
        for s in &self.scenarios {
            if s == "all" {
                want.extend(SCENARIOS);
                continue;
            }
            let known = SCENARIOS
                .iter()
                .find(|k| **k == s.as_str())
                .ok_or_else(|| ChaosError::UnknownScenario(s.clone()))?;
            want.push(known);
        }
        if want.contains(&"hang") && !want.contains(&"normal") {
            want.insert(0, "normal");
        }
        let mut out: Vec<&'static str> = SCENARIOS.iter().copied().filter(|s| want.contains(s)).collect();
        out.dedup();
        Ok(out)
    }
}

/// Where a run reports how far it got (a progress bar in the CLI).
pub trait Progress: Send + Sync {
    /// A run (`label`) starts; it will load for `duration_ms`.
    fn run_started(&self, label: &str, duration_ms: u64);
    /// `requests` finished so far, `elapsed_ms` into the load.
    fn tick(&self, requests: u64, elapsed_ms: u64);
    /// The run ended.
    fn run_finished(&self, label: &str, passed: bool);
}

/// A [`Progress`] that shows nothing (tests).
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;

impl Progress for Quiet {
    fn run_started(&self, _: &str, _: u64) {}
    fn tick(&self, _: u64, _: u64) {}
    fn run_finished(&self, _: &str, _: bool) {}
}

/// Runs the scenarios of `opts` and returns the report (its `passed` says
/// whether every criterion held).
pub async fn run(opts: &ChaosOptions, progress: &dyn Progress) -> Result<Report, ChaosError> {
    let names = opts.resolve()?;
    let settings = StackSettings::for_concurrency(opts.concurrency);
    let session = format!("{:08x}", rand::random::<u32>());
    let mut report = Report {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        mode: opts.mode.clone(),
        backend: opts
            .redis
            .as_deref()
            .map_or_else(|| "memory".to_owned(), redacted),
        concurrency: opts.concurrency,
        duration_ms: duration_to_millis(opts.duration),
        ..Report::default()
    };
    let mut normal_p95: Option<f64> = None;
    for name in names {
        let scenario =
            Scenario::named(name, opts.duration).ok_or_else(|| ChaosError::UnknownScenario(name.into()))?;
        if name == agents::NAME {
            let label = format!("{name} (messages and responses)");
            progress.run_started(&label, report.duration_ms);
            let run = agents::run(&scenario, &settings, opts, &session, progress).await?;
            let mut criteria = agents::criteria(&run);
            criteria.extend(criteria::common(&run.data));
            progress.run_finished(&label, criteria.iter().all(|c| c.passed));
            let mut section = scenario_report(&run.data, criteria);
            section.results = agents::results(&run.samples);
            report.scenarios.push(section);
            continue;
        }
        let label = format!("{name} (with budget)");
        progress.run_started(&label, report.duration_ms);
        let with = run_once(
            &scenario,
            &settings,
            opts,
            Some(BUDGET_MICRO_USD),
            &session,
            progress,
        )
        .await?;
        let baseline = match (name, normal_p95) {
            ("hang", Some(before)) => {
                let after = baseline_after(opts, &settings, &session, progress, report.duration_ms).await?;
                Some(before.max(after))
            }
            _ => normal_p95,
        };
        let mut criteria = evaluate(&with, baseline);
        if name == "normal" {
            normal_p95 = Some(healthy_p95(&with).0);
        }
        progress.run_finished(&label, criteria.iter().all(|c| c.passed));
        let mut money = MoneyRow {
            scenario: name.to_owned(),
            budget_micro_usd: BUDGET_MICRO_USD,
            with_budget_micro_usd: burned(&with),
            with_budget_retries: retries(&with),
            with_budget_requests: with.samples.len() as u64,
            ..MoneyRow::default()
        };
        if opts.money {
            let label = format!("{name} (no budget)");
            progress.run_started(&label, report.duration_ms);
            let without = run_once(&scenario, &settings, opts, None, &session, progress).await?;
            let extra: Vec<_> = criteria::common(&without)
                .into_iter()
                .map(|mut c| {
                    c.name = format!("{} (run without budget)", c.name);
                    c
                })
                .collect();
            progress.run_finished(&label, extra.iter().all(|c| c.passed));
            criteria.extend(extra);
            money.without_budget_micro_usd = burned(&without);
            money.without_budget_retries = retries(&without);
            money.without_budget_requests = without.samples.len() as u64;
        }
        report.money.push(money);
        report.scenarios.push(scenario_report(&with, criteria));
    }
    report.passed = report
        .scenarios
        .iter()
        .all(|s| s.criteria.iter().all(|c| c.passed));
    Ok(report)
}

/// `redis://user:secret@host/` → `redis://host/`.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}{}", &url[..scheme + 3], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

/// Micro-dollars the mock billed for retries that did not answer: calls
/// after the first of their event (a retry, or a fallback after a failure)
/// that failed. The first call of an event is made under any policy; what
/// a retry policy decides is how much more is burned.
fn burned(run: &RunData) -> u64 {
    run.arrivals
        .iter()
        .filter(|a| a.attempt.unwrap_or(1) > 1 && failed_attempt(a))
        .map(|a| a.micro_usd)
        .sum()
}

/// Calls after the first of their event that reached the mock.
fn retries(run: &RunData) -> u64 {
    run.arrivals.iter().filter(|a| a.attempt.unwrap_or(1) > 1).count() as u64
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

/// What a run left behind, on the clock of its start.
struct Observed {
    /// The mock's arrivals, `at_ms` from the run's start.
    arrivals: Vec<pressure_mock::Arrival>,
    /// The breakers' transitions since the start.
    transitions: Vec<TransitionAt>,
    /// The broker resources still holding permits (`resource: n`).
    leaks: Vec<String>,
}

/// The arrivals, breaker transitions and held permits of a run that
/// started at `t0` (`t0_nanos` on the LLM client's clock).
fn observe(stack: &Stack, t0: Instant, t0_nanos: u64) -> Observed {
    let offset_ms = ms(t0.saturating_duration_since(stack.mock.started()));
    let mut arrivals = stack.mock.arrivals();
    for a in &mut arrivals {
        a.at_ms -= offset_ms;
    }
    let transitions = stack
        .llm
        .breakers()
        .recent_transitions()
        .into_iter()
        .filter(|t| t.at_nanos >= t0_nanos)
        .map(|t| TransitionAt {
            at_ms: ms(Duration::from_nanos(t.at_nanos.saturating_sub(t0_nanos))),
            breaker: t.name.to_string(),
            from: t.from,
            to: t.to,
        })
        .collect();
    let leaks = stack
        .broker
        .local_stats()
        .into_iter()
        .filter(|s| s.active.unwrap_or(0) > 0)
        .map(|s| format!("{}: {}", s.resource, s.active.unwrap_or(0)))
        .collect();
    Observed {
        arrivals,
        transitions,
        leaks,
    }
}

/// One run of `scenario`: start, warm up, load, settle, observe, stop.
/// The healthy p95 of one more `normal` run (with the budget, like the
/// first), right after `hang`.
async fn baseline_after(
    opts: &ChaosOptions,
    settings: &StackSettings,
    session: &str,
    progress: &dyn Progress,
    duration_ms: u64,
) -> Result<f64, ChaosError> {
    let normal = Scenario::named("normal", opts.duration)
        .ok_or_else(|| ChaosError::UnknownScenario("normal".into()))?;
    let scenario = Scenario {
        name: "normal-after-hang",
        ..normal
    };
    let label = "normal (baseline after hang)";
    progress.run_started(label, duration_ms);
    let run = run_once(
        &scenario,
        settings,
        opts,
        Some(BUDGET_MICRO_USD),
        session,
        progress,
    )
    .await?;
    let (p95, n) = healthy_p95(&run);
    progress.run_finished(label, n > 0);
    Ok(p95)
}

async fn run_once(
    scenario: &Scenario,
    settings: &StackSettings,
    opts: &ChaosOptions,
    budget: Option<u64>,
    session: &str,
    progress: &dyn Progress,
) -> Result<RunData, ChaosError> {
    let run_tag = format!("{}-{}", scenario.name, if budget.is_some() { "b" } else { "n" });
    let prefix = format!("pressure-chaos:{session}:{run_tag}:");
    let redis = opts.redis.as_deref().map(|url| (url, prefix.as_str()));
    let stack = Stack::start(scenario, settings, budget, redis, opts.seed).await?;
    let url = format!("http://{}/v1/chat/completions", stack.addr);

    // Warm-up on a healthy mock (tokenizer, connections), then a clean slate.
    stack
        .mock
        .set_behaviour(Behaviour::single(pressure_mock::Phase::normal("warm-up")))
        .map_err(ChaosError::Start)?;
    let warm = Load {
        url: url.clone(),
        concurrency: opts.concurrency.min(8),
        duration: Duration::from_millis(300),
        streaming: scenario.streaming,
        tag: format!("{run_tag}-warm"),
    };
    drive(&warm, Instant::now(), Arc::new(AtomicU64::new(0))).await;
    settle(&stack, ROUTE_RESOURCE, Duration::from_secs(2)).await;
    stack.mock.reset();

    stack
        .mock
        .set_behaviour(scenario.behaviour.clone())
        .map_err(ChaosError::Start)?;
    let t0 = Instant::now();
    // The breakers' clock at `t0`: their transitions from then on, on the run's axis.
    let registry = stack.llm.breakers();
    let t0_nanos = registry.clock().now_nanos();
    let load = Load {
        url,
        concurrency: opts.concurrency,
        duration: opts.duration,
        streaming: scenario.streaming,
        tag: run_tag,
    };
    let done = Arc::new(AtomicU64::new(0));
    let samples = {
        let ticker_done = Arc::clone(&done);
        let drive = drive(&load, t0, done);
        tokio::pin!(drive);
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            tokio::select! {
                samples = &mut drive => break samples,
                _ = tick.tick() => progress.tick(
                    ticker_done.load(Ordering::Relaxed),
                    duration_to_millis(t0.elapsed()),
                ),
            }
        }
    };
    let load_ms = ms(opts.duration);
    // Hung calls are noticed when the gateway gives up; stalled ones are
    // billed when the mock would have finished generating them.
    settle(&stack, ROUTE_RESOURCE, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let end_ms = ms(t0.elapsed());
    let Observed {
        arrivals,
        transitions,
        leaks,
    } = observe(&stack, t0, t0_nanos);
    let mock = stack.mock.stats();
    let pool = stack.llm.provider_pools().remove("mock").unwrap_or_default();
    stack.stop().await;
    Ok(RunData {
        scenario: scenario.clone(),
        settings: *settings,
        concurrency: opts.concurrency,
        samples,
        arrivals,
        transitions,
        mock,
        leaks,
        pool,
        load_ms,
        end_ms,
    })
}

/// Waits until the mock has nothing in flight and the route `resource`
/// holds no slot, at most `bound`.
async fn settle(stack: &Stack, resource: &str, bound: Duration) {
    let until = Instant::now() + bound;
    while Instant::now() < until {
        let open = stack.mock.stats().in_flight;
        let held = stack
            .broker
            .local_stats()
            .iter()
            .find(|s| s.resource == resource)
            .and_then(|s| s.active)
            .unwrap_or(0);
        if open == 0 && held == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The report section of a run.
fn scenario_report(run: &RunData, criteria: Vec<crate::report::Criterion>) -> ScenarioReport {
    let width = bucket_width(run.load_ms);
    let answered: Vec<f64> = run
        .samples
        .iter()
        .filter(|s| !s.bad)
        .map(load::Sample::latency_ms)
        .collect();
    let mut results = std::collections::BTreeMap::new();
    for s in &run.samples {
        *results.entry(s.result()).or_insert(0u64) += 1;
    }
    let mut phases = Vec::new();
    let mut start = 0.0;
    for (i, p) in run.scenario.behaviour.phases.iter().enumerate() {
        let last = i + 1 == run.scenario.behaviour.phases.len();
        let end = match p.duration_ms {
            Some(d) if !last => start + d as f64,
            _ => run.load_ms,
        };
        phases.push(PhaseSpan {
            name: p.name.clone(),
            start_ms: start,
            end_ms: end,
            fault: p.has_fault(),
        });
        start = end;
    }
    ScenarioReport {
        name: run.scenario.name.to_owned(),
        description: run.scenario.description.to_owned(),
        phases,
        requests: run.samples.len() as u64,
        results,
        latency: percentiles(&answered),
        throughput: buckets(&run.samples, &run.arrivals, run.load_ms, width),
        latency_series: latency_series(&run.samples, run.load_ms, width),
        breaker: breaker_spans(&run.transitions, run.end_ms.max(run.load_ms)),
        criteria,
        mock: run.mock.clone(),
        plots: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hang_brings_its_baseline_and_order_is_fixed() {
        let opts = ChaosOptions {
            scenarios: vec!["500-storm".into(), "hang".into()],
            ..ChaosOptions::short()
        };
        assert_eq!(opts.resolve().unwrap(), ["normal", "hang", "500-storm"]);
        let all = ChaosOptions::short();
        assert_eq!(all.resolve().unwrap(), SCENARIOS);
        let bad = ChaosOptions {
            scenarios: vec!["nope".into()],
            ..ChaosOptions::short()
        };
        assert!(matches!(bad.resolve(), Err(ChaosError::UnknownScenario(s)) if s == "nope"));
    }

    #[test]
    fn credentials_are_not_reported() {
        assert_eq!(
            redacted("redis://user:secret@127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
        assert_eq!(redacted("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }
}
