//! The acceptance criteria: what each scenario must show, computed from
//! what the clients saw, what reached the mock and the breakers' transitions.

use pressure_llm::breaker::State;

use super::analysis::{by_request, percentiles, rate, TransitionAt};
use super::load::Sample;
use super::scenario::{Scenario, PRIMARY};
use super::stack::StackSettings;
use crate::mock::{Arrival, MockStats, Outcome};
use crate::report::Criterion;

/// Ms after a breaker opens during which a call admitted just before may
/// still arrive at the mock.
pub const OPEN_GRACE_MS: f64 = 20.0;
/// The largest p95 of the healthy requests in the hang scenario, as a
/// multiple of the normal scenario's p95 from the same run.
pub const HANG_P95_RATIO: f64 = 1.1;
/// After a 429 storm, the primary's answer rate must come back to this share
/// of its rate before the storm.
pub const RECOVERY_SHARE: f64 = 0.7;
/// Time left for the rate to recover after a storm before it is measured, ms.
pub const RECOVERY_GRACE_MS: f64 = 1_000.0;

/// Everything one run observed; time is ms since the load started.
#[derive(Debug, Clone)]
pub struct RunData {
    /// The scenario.
    pub scenario: Scenario,
    /// The stack's settings.
    pub settings: StackSettings,
    /// Concurrent clients.
    pub concurrency: usize,
    /// Client samples.
    pub samples: Vec<Sample>,
    /// What reached the mock (`at_ms` on the run's axis).
    pub arrivals: Vec<Arrival>,
    /// Breaker transitions.
    pub transitions: Vec<TransitionAt>,
    /// The mock's counters after the run.
    pub mock: MockStats,
    /// Resources still holding slots after the run (`resource: n`).
    pub leaks: Vec<String>,
    /// The gateway's connection pool to the mock.
    pub pool: pressure_llm::provider::PoolStats,
    /// When the clients stopped starting requests.
    pub load_ms: f64,
    /// When the observation ended.
    pub end_ms: f64,
}

fn criterion(name: &str, passed: bool, detail: String) -> Criterion {
    Criterion {
        name: name.to_owned(),
        passed,
        detail,
    }
}

fn good(samples: &[Sample]) -> impl Iterator<Item = &Sample> {
    samples.iter().filter(|s| !s.bad)
}

/// Criteria every run must meet: no 400 retried, attempts within the
/// policy, no slot left behind.
pub fn common(run: &RunData) -> Vec<Criterion> {
    let events = by_request(&run.arrivals);
    let mut bad_seen = 0usize;
    let mut retried_400 = 0usize;
    let mut worst = 0usize;
    for arrivals in events.values() {
        if let Some(pos) = arrivals.iter().position(|a| a.outcome == Outcome::BadRequest) {
            bad_seen += 1;
            if arrivals.len() > pos + 1 {
                retried_400 += 1;
            }
        }
        let mut per_model: std::collections::BTreeMap<&str, usize> = Default::default();
        for a in arrivals {
            *per_model.entry(a.model.as_str()).or_default() += 1;
        }
        worst = worst.max(per_model.values().copied().max().unwrap_or(0));
    }
    let untagged = run.arrivals.iter().filter(|a| a.request_id.is_none()).count();
    let max = run.settings.max_attempts as usize;
    vec![
        criterion(
            "No 400 is ever retried",
            bad_seen > 0 && retried_400 == 0,
            format!("{bad_seen} requests answered 400 by the provider, {retried_400} of them called again (must be 0; at least one 400 must be seen)"),
        ),
        criterion(
            "Attempts per request stay within the policy",
            worst <= max && untagged == 0,
            format!("at most {worst} attempts of one request on one model (policy: {max}); {untagged} calls without a request id"),
        ),
        criterion(
            "No slot is left behind",
            run.leaks.is_empty() && run.mock.in_flight == 0,
            if run.leaks.is_empty() {
                format!("every gateway slot released; {} calls still open at the mock", run.mock.in_flight)
            } else {
                format!("still held: {}", run.leaks.join(", "))
            },
        ),
    ]
}

/// Whether every request the provider accepts got an answer (200 or 202).
fn all_answered(run: &RunData) -> Criterion {
    let total = good(&run.samples).count();
    let failed: Vec<String> = good(&run.samples)
        .filter(|s| !matches!(s.status, 200 | 202) || s.stream_error)
        .map(Sample::result)
        .collect();
    criterion(
        "Every client gets an answer",
        total > 0 && failed.is_empty(),
        format!(
            "{} of {total} requests failed{}",
            failed.len(),
            failed
                .first()
                .map(|f| format!(" (first: {f})"))
                .unwrap_or_default()
        ),
    )
}

/// The p95 (ms) of requests answered by the primary without a fault.
pub fn healthy_p95(run: &RunData) -> (f64, usize) {
    let events = by_request(&run.arrivals);
    let healthy: Vec<f64> = good(&run.samples)
        .filter(|s| s.degradation.as_deref() == Some("primary") && s.status == 200 && !s.stream_error)
        .filter(|s| {
            events
                .get(s.id.as_str())
                .is_some_and(|a| a.iter().all(|a| a.outcome == Outcome::Ok))
        })
        .map(Sample::latency_ms)
        .collect();
    (percentiles(&healthy).p95, healthy.len())
}

/// The criteria of `run`; `normal_p95` is the normal scenario's healthy p95
/// from the same invocation.
pub fn evaluate(run: &RunData, normal_p95: Option<f64>) -> Vec<Criterion> {
    let mut out = match run.scenario.name {
        "normal" => normal(run),
        "hang" => hang(run, normal_p95),
        "stall" => stall(run),
        "rate-limit-storm" => rate_limit_storm(run),
        "500-storm" => server_error_storm(run),
        _ => Vec::new(),
    };
    out.extend(common(run));
    out
}

fn normal(run: &RunData) -> Vec<Criterion> {
    let total = good(&run.samples).count();
    let primary = good(&run.samples)
        .filter(|s| s.degradation.as_deref() == Some("primary") && s.status == 200)
        .count();
    let (p95, n) = healthy_p95(run);
    vec![
        criterion(
            "The primary answers (≥ 99 %)",
            total > 0 && primary * 100 >= total * 99,
            format!("{primary} of {total} requests answered by the primary"),
        ),
        criterion(
            "Baseline latency measured",
            n > 0,
            format!("p95 of {n} healthy requests: {p95:.1} ms"),
        ),
    ]
}

fn hang(run: &RunData, normal_p95: Option<f64>) -> Vec<Criterion> {
    let (p95, n) = healthy_p95(run);
    let latency = match normal_p95 {
        Some(base) if base > 0.0 => criterion(
            "Healthy requests keep their latency (p95 ≤ 1.1 × normal)",
            n > 0 && p95 <= HANG_P95_RATIO * base,
            format!(
                "p95 of {n} requests with no hung attempt: {p95:.1} ms; normal p95 {base:.1} ms; ratio {:.2} (≤ {HANG_P95_RATIO})",
                p95 / base
            ),
        ),
        _ => criterion(
            "Healthy requests keep their latency (p95 ≤ 1.1 × normal)",
            false,
            "no normal baseline in this run".into(),
        ),
    };
    let hung: Vec<&Arrival> = run
        .arrivals
        .iter()
        .filter(|a| a.outcome == Outcome::Hung)
        .collect();
    let cut = hung.iter().filter(|a| a.client_gone).count();
    let events = by_request(&run.arrivals);
    let slowest_hit = good(&run.samples)
        .filter(|s| {
            events
                .get(s.id.as_str())
                .is_some_and(|a| a.iter().any(|a| a.outcome == Outcome::Hung))
        })
        .map(Sample::latency_ms)
        .fold(0.0_f64, f64::max);
    let bound = run.settings.total_ms as f64 + 1_000.0;
    let timeout = run.settings.provider_timeout_ms;
    vec![
        latency,
        criterion(
            "Hanging calls are cut by the timeout",
            !hung.is_empty() && cut == hung.len() && slowest_hit <= bound,
            format!(
                "{cut} of {} hung calls abandoned by the gateway (first-byte timeout {timeout} ms); slowest request with a hung call {slowest_hit:.0} ms (≤ {bound:.0})",
                hung.len()
            ),
        ),
        criterion(
            "The connection pool is never exhausted",
            run.pool.peak <= run.concurrency && run.pool.peak < run.pool.max && run.pool.wait_timeouts == 0,
            format!(
                "at most {} of {} provider connections in use at once, for {} clients (each holds at most one: a hung call gives its slot back when cut); {} calls waited for a slot in vain",
                run.pool.peak, run.pool.max, run.concurrency, run.pool.wait_timeouts
            ),
        ),
        all_answered(run),
    ]
}

fn stall(run: &RunData) -> Vec<Criterion> {
    let events = by_request(&run.arrivals);
    let stalled_ids: std::collections::HashSet<&str> = events
        .iter()
        .filter(|(_, a)| a.iter().any(|a| a.outcome == Outcome::Stalled))
        .map(|(id, _)| *id)
        .collect();
    let hit = |s: &&Sample| stalled_ids.contains(s.id.as_str());
    let bound = run.settings.provider_timeout_ms as f64 + 1_000.0;

    // Streams: committed at the first chunk, so a stall ends them with an
    // error event; they must not be retried.
    let streams: Vec<&Sample> = good(&run.samples).filter(|s| s.stream).collect();
    let stalled_streams: Vec<&Sample> = streams.iter().copied().filter(hit).collect();
    let cut_in_time = stalled_streams
        .iter()
        .filter(|s| s.status == 200 && s.stream_error && s.latency_ms() <= bound)
        .count();
    let slowest = stalled_streams
        .iter()
        .map(|s| s.latency_ms())
        .fold(0.0_f64, f64::max);
    let retried = stalled_streams
        .iter()
        .filter(|s| events.get(s.id.as_str()).is_some_and(|a| a.len() > 1))
        .count();
    let healthy_streams: Vec<&Sample> = streams.iter().copied().filter(|s| !hit(s)).collect();
    let healthy_ok = healthy_streams
        .iter()
        .filter(|s| s.status == 200 && !s.stream_error)
        .count();

    // JSON answers: nothing reached the client before the stall, so the
    // gateway may retry or fall back, and the client must get an answer.
    let stalled_json: Vec<&Sample> = good(&run.samples).filter(|s| !s.stream).filter(hit).collect();
    let json_ok = stalled_json
        .iter()
        .filter(|s| matches!(s.status, 200 | 202))
        .count();

    let stalled: Vec<&Arrival> = run
        .arrivals
        .iter()
        .filter(|a| a.outcome == Outcome::Stalled)
        .collect();
    let billed = stalled
        .iter()
        .filter(|a| a.client_gone && a.output_tokens > 0)
        .count();
    vec![
        criterion(
            "Stalled streams end by the read timeout",
            !stalled_streams.is_empty() && cut_in_time == stalled_streams.len(),
            format!(
                "{cut_in_time} of {} stalled streams ended with an error event within {bound:.0} ms (slowest {slowest:.0} ms)",
                stalled_streams.len()
            ),
        ),
        criterion(
            "A stream is never retried after its first chunk",
            retried == 0,
            format!("{retried} stalled streams called the provider again"),
        ),
        criterion(
            "A stalled JSON answer is retried or falls back",
            !stalled_json.is_empty() && json_ok == stalled_json.len(),
            format!(
                "{json_ok} of {} requests whose JSON answer stalled still got an answer",
                stalled_json.len()
            ),
        ),
        criterion(
            "The provider bills the whole answer of a call the gateway left",
            !stalled.is_empty() && billed == stalled.len(),
            format!(
                "{billed} of {} stalled calls billed with their full output after the gateway had gone",
                stalled.len()
            ),
        ),
        criterion(
            "Healthy streams complete",
            !healthy_streams.is_empty() && healthy_ok == healthy_streams.len(),
            format!(
                "{healthy_ok} of {} streams without a stall ended with [DONE]",
                healthy_streams.len()
            ),
        ),
    ]
}

fn storm_window(run: &RunData) -> (f64, f64) {
    let (a, b) = run.scenario.fault_window.unwrap_or((0, 0));
    (a as f64, b as f64)
}

fn rate_limit_storm(run: &RunData) -> Vec<Criterion> {
    let (start, end) = storm_window(run);
    let before = rate(&run.arrivals, 0.0, start, |_| true);
    let during = rate(&run.arrivals, start, end, |_| true);
    let during_429 = rate(&run.arrivals, start, end, |a| a.status == 429);
    let ok_primary = |a: &Arrival| a.model == PRIMARY && a.outcome == Outcome::Ok;
    let before_ok = rate(&run.arrivals, 0.0, start, ok_primary);
    let after_ok = rate(&run.arrivals, end + RECOVERY_GRACE_MS, run.load_ms, ok_primary);
    vec![
        criterion(
            "Outgoing requests fall during the 429 storm",
            before > 0.0 && during < before,
            format!("{before:.0}/s before the storm, {during:.0}/s during it ({during_429:.0}/s answered 429)"),
        ),
        criterion(
            "The rate recovers by itself after the storm",
            before_ok > 0.0 && after_ok >= RECOVERY_SHARE * before_ok,
            format!(
                "primary answers {after_ok:.0}/s from {:.1} s after the storm, {before_ok:.0}/s before it (≥ {:.0} %)",
                RECOVERY_GRACE_MS / 1_000.0,
                RECOVERY_SHARE * 100.0
            ),
        ),
        all_answered(run),
    ]
}

fn server_error_storm(run: &RunData) -> Vec<Criterion> {
    let (start, end) = storm_window(run);
    let name = format!("mock/{PRIMARY}");
    let mut ts: Vec<&TransitionAt> = run.transitions.iter().filter(|t| t.breaker == name).collect();
    ts.sort_by(|a, b| a.at_ms.total_cmp(&b.at_ms));
    let window = run.settings.breaker_window_ms as f64;
    let first_open = ts.iter().find(|t| t.to == State::Open).map(|t| t.at_ms);
    let opened = criterion(
        "The breaker opens within its window",
        first_open.is_some_and(|t| t >= start && t <= start + window),
        match first_open {
            Some(t) => format!(
                "opened {:.0} ms after the storm began (window {window:.0} ms)",
                t - start
            ),
            None => "never opened".into(),
        },
    );
    // Spans in which the breaker was not closed, from its transitions.
    let mut spans: Vec<(f64, f64, State)> = Vec::new();
    for (i, t) in ts.iter().enumerate() {
        if t.to != State::Closed {
            let until = ts.get(i + 1).map_or(run.end_ms, |n| n.at_ms);
            spans.push((t.at_ms, until, t.to));
        }
    }
    let primary: Vec<&Arrival> = run.arrivals.iter().filter(|a| a.model == PRIMARY).collect();
    let mut non_probe = 0usize;
    let mut probes = 0usize;
    for a in &primary {
        let inside = spans
            .iter()
            .find(|(from, to, _)| a.at_ms >= *from && a.at_ms < *to);
        if let Some((from, _, state)) = inside {
            if a.probe {
                probes += 1;
            } else if !(*state == State::Open && a.at_ms < from + OPEN_GRACE_MS) {
                non_probe += 1;
            }
        }
    }
    let half_opens = ts.iter().filter(|t| t.to == State::HalfOpen).count();
    let max_probes = half_opens * run.settings.half_open_probes as usize;
    let only_probes = criterion(
        "While open, the provider sees only half-open probes",
        first_open.is_some() && non_probe == 0 && probes <= max_probes,
        format!(
            "{probes} probes in {half_opens} half-open periods (at most {max_probes}), {non_probe} other calls while not closed"
        ),
    );
    let last = ts.last();
    let closed_at = last.filter(|t| t.to == State::Closed).map(|t| t.at_ms);
    let closes = criterion(
        "The breaker closes after the provider recovers",
        closed_at.is_some_and(|t| t >= end),
        match closed_at {
            Some(t) => format!("closed {:.0} ms after the storm ended", t - end),
            None => format!(
                "still {} at the end",
                last.map_or("closed (never opened)", |t| t.to.as_str())
            ),
        },
    );
    vec![opened, only_probes, closes, all_answered(run)]
}
