//! The data of a chaos run, as written to `report.json` and rendered to
//! `report.md` and the SVG plots.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use pressure_mock::MockStats;

/// A whole run: every scenario and the money comparison.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The version of pressure that ran.
    pub version: String,
    /// `"short"` (CI) or `"full"`.
    pub mode: String,
    /// The gateway's state backend (`"memory"` or the Redis URL without credentials).
    pub backend: String,
    /// Concurrent clients per scenario.
    pub concurrency: usize,
    /// Load duration per scenario, in milliseconds.
    pub duration_ms: u64,
    /// The scenarios in the order they ran.
    pub scenarios: Vec<ScenarioReport>,
    /// Retry spend with and without the money budget, per scenario.
    pub money: Vec<MoneyRow>,
    /// Whether every criterion of every scenario passed.
    pub passed: bool,
}

/// One scenario's results.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScenarioReport {
    /// Its name (`normal`, `hang`, `stall`, `rate-limit-storm`, `500-storm`).
    pub name: String,
    /// One sentence on what the mock does in it.
    pub description: String,
    /// The mock's phases on the run's time axis.
    pub phases: Vec<PhaseSpan>,
    /// Requests the clients completed (any result).
    pub requests: u64,
    /// Client-side results by label (`primary`, `backup`, `rules`,
    /// `manual_queue`, `error:<status>`).
    pub results: BTreeMap<String, u64>,
    /// Client-side latency over the whole scenario, in milliseconds.
    pub latency: Percentiles,
    /// Per time bucket: completions and what reached the mock.
    pub throughput: Vec<Bucket>,
    /// Per time bucket: client latency percentiles.
    pub latency_series: Vec<LatencyPoint>,
    /// Breaker states over time, per breaker (`provider/model`).
    pub breaker: Vec<BreakerSpan>,
    /// The acceptance criteria of the scenario.
    pub criteria: Vec<Criterion>,
    /// The mock's counters at the end of the scenario.
    pub mock: MockStats,
    /// Names of the SVG files written for this scenario (relative to the report).
    #[serde(default)]
    pub plots: Vec<String>,
}

/// A phase of the mock on the run's time axis.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PhaseSpan {
    /// The phase's name.
    pub name: String,
    /// Start, in milliseconds since the scenario started.
    pub start_ms: f64,
    /// End, in milliseconds since the scenario started.
    pub end_ms: f64,
    /// Whether the phase injects a fault (shaded in the plots).
    pub fault: bool,
}

/// Latency percentiles, in milliseconds (0 when there was no sample).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Percentiles {
    /// Number of samples.
    pub count: u64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Slowest.
    pub max: f64,
}

/// One time bucket of a scenario.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bucket {
    /// Bucket start, in milliseconds since the scenario started.
    pub t_ms: f64,
    /// Bucket width, in milliseconds.
    pub width_ms: f64,
    /// Client requests answered by a model (primary or backup).
    pub answered: u64,
    /// Client requests answered by a lower level (rules, manual queue).
    pub degraded: u64,
    /// Client requests that failed.
    pub failed: u64,
    /// Requests that reached the mock (all models).
    pub upstream: u64,
    /// Of those, answered 429 by the mock.
    pub upstream_429: u64,
    /// Of those, answered 500 by the mock.
    pub upstream_500: u64,
}

/// Client latency percentiles of one time bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LatencyPoint {
    /// The middle of the bucket, in milliseconds since the scenario started.
    pub t_ms: f64,
    /// Median, in milliseconds.
    pub p50: f64,
    /// 95th percentile, in milliseconds.
    pub p95: f64,
    /// 99th percentile, in milliseconds.
    pub p99: f64,
}

/// A breaker in one state over a span of time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BreakerSpan {
    /// `provider/model`.
    pub breaker: String,
    /// `closed`, `open` or `half_open`.
    pub state: String,
    /// Start, in milliseconds since the scenario started.
    pub start_ms: f64,
    /// End, in milliseconds since the scenario started.
    pub end_ms: f64,
}

/// One acceptance criterion and its verdict.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Criterion {
    /// What is promised, in one line.
    pub name: String,
    /// Whether it held.
    pub passed: bool,
    /// What was measured, with the threshold, in one line.
    pub detail: String,
}

/// The money retries burned in one scenario, from the mock's billing, with
/// the retry money budget and without it, under the same load.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MoneyRow {
    /// The scenario.
    pub scenario: String,
    /// The per-event budget used in the "with" run, in micro-dollars.
    pub budget_micro_usd: u64,
    /// Billed for retries that did not answer (calls after the first of an
    /// event that failed: hung, stalled, refused), with the budget.
    pub with_budget_micro_usd: u64,
    /// The same without the budget.
    pub without_budget_micro_usd: u64,
    /// Retry attempts that reached the mock, with the budget.
    pub with_budget_retries: u64,
    /// Retry attempts that reached the mock, without the budget.
    pub without_budget_retries: u64,
    /// Client requests in the "with" run.
    pub with_budget_requests: u64,
    /// Client requests in the "without" run.
    pub without_budget_requests: u64,
}
