//! Writing a [`Report`] to a directory: the SVG plots of each scenario,
//! `report.json` and `report.md`, so one call leaves a folder that CI can
//! upload and GitHub can display.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::markdown::render_markdown;
use super::model::Report;
use super::svg::{breaker_svg, latency_svg, throughput_svg};

/// Writes the report into `dir` (created with its parents if missing) and
/// returns every path written, in order.
///
/// For each scenario it writes `<name>-throughput.svg`, `<name>-latency.svg`
/// and `<name>-breaker.svg`, where `<name>` is the scenario name lowered and
/// reduced to `[a-z0-9-]` (a suffix `-2`, `-3`, ... keeps two scenarios
/// apart), and sets the scenario's `plots` to those file names; then
/// `report.json` (pretty-printed, with the plots) and `report.md`. Existing
/// files of the same names are replaced.
pub fn write_report(r: &mut Report, dir: &Path) -> io::Result<Vec<PathBuf>> {
    fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    let mut taken = BTreeSet::new();
    for s in &mut r.scenarios {
        let base = sanitize(&s.name);
        let mut stem = base.clone();
        let mut n = 2;
        while !taken.insert(stem.clone()) {
            stem = format!("{base}-{n}");
            n += 1;
        }
        let plots = [
            (format!("{stem}-throughput.svg"), throughput_svg(s)),
            (format!("{stem}-latency.svg"), latency_svg(s)),
            (format!("{stem}-breaker.svg"), breaker_svg(s)),
        ];
        s.plots.clear();
        for (file, svg) in plots {
            let path = dir.join(&file);
            fs::write(&path, svg)?;
            written.push(path);
            s.plots.push(file);
        }
    }
    let json = serde_json::to_string_pretty(r).map_err(io::Error::other)?;
    let path = dir.join("report.json");
    fs::write(&path, json + "\n")?;
    written.push(path);
    let path = dir.join("report.md");
    fs::write(&path, render_markdown(r))?;
    written.push(path);
    Ok(written)
}

/// A file-name stem from a scenario name: lowercase ASCII letters, digits
/// and single dashes, never empty (`"scenario"` when nothing is left).
fn sanitize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    let trimmed = out.trim_end_matches('-');
    if trimmed.is_empty() {
        "scenario".to_owned()
    } else {
        trimmed.to_owned()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::report::model::{
        BreakerSpan, Bucket, Criterion, LatencyPoint, MoneyRow, Percentiles, PhaseSpan, ScenarioReport,
    };
    use pressure_mock::{MockStats, Outcome};

    /// A small realistic run: a passing `normal` scenario and a failing
    /// `500 storm <&>` one with a fault phase, breaker spans and a money row.
    pub(crate) fn sample_report() -> Report {
        let buckets = |faulty: bool| -> Vec<Bucket> {
            (0..6)
                .map(|i| {
                    let storm = faulty && (2..4).contains(&i);
                    Bucket {
                        t_ms: f64::from(i) * 500.0,
                        width_ms: 500.0,
                        answered: if storm { 10 } else { 50 },
                        degraded: if storm { 35 } else { 0 },
                        failed: if storm { 5 } else { 0 },
                        upstream: if storm { 20 } else { 50 },
                        upstream_429: 0,
                        upstream_500: if storm { 12 } else { 0 },
                    }
                })
                .collect()
        };
        let latency = |faulty: bool| -> Vec<LatencyPoint> {
            (0..6)
                .map(|i| {
                    let k = if faulty && (2..4).contains(&i) { 8.0 } else { 1.0 };
                    LatencyPoint {
                        t_ms: f64::from(i) * 500.0,
                        p50: 20.0 * k,
                        p95: 45.0 * k,
                        p99: 80.0 * k,
                    }
                })
                .collect()
        };
        let normal = ScenarioReport {
            name: "normal".into(),
            description: "The mock answers every request in about 20 ms.".into(),
            phases: vec![PhaseSpan {
                name: "steady".into(),
                start_ms: 0.0,
                end_ms: 3000.0,
                fault: false,
            }],
            requests: 300,
            results: BTreeMap::from([("primary".into(), 300)]),
            latency: Percentiles {
                count: 300,
                p50: 20.4,
                p90: 40.0,
                p95: 45.25,
                p99: 80.0,
                max: 95.0,
            },
            throughput: buckets(false),
            latency_series: latency(false),
            breaker: vec![BreakerSpan {
                breaker: "mock/gpt-primary".into(),
                state: "closed".into(),
                start_ms: 0.0,
                end_ms: 3000.0,
            }],
            criteria: vec![Criterion {
                name: "no client error".into(),
                passed: true,
                detail: "0 errors of 300 (max 0)".into(),
            }],
            mock: MockStats {
                requests: 300,
                by_outcome: BTreeMap::from([(Outcome::Ok, 300)]),
                billed_input_tokens: 30_000,
                billed_output_tokens: 9_000,
                billed_micro_usd: 12_345,
                ..MockStats::default()
            },
            plots: Vec::new(),
        };
        let storm = ScenarioReport {
            name: "500 storm <&>".into(),
            description: "The primary answers 500 for a second, then recovers.".into(),
            phases: vec![
                PhaseSpan {
                    name: "warm".into(),
                    start_ms: 0.0,
                    end_ms: 1000.0,
                    fault: false,
                },
                PhaseSpan {
                    name: "storm <500>".into(),
                    start_ms: 1000.0,
                    end_ms: 2000.0,
                    fault: true,
                },
                PhaseSpan {
                    name: "recover".into(),
                    start_ms: 2000.0,
                    end_ms: 3000.0,
                    fault: false,
                },
            ],
            requests: 300,
            results: BTreeMap::from([
                ("primary".into(), 220),
                ("backup".into(), 40),
                ("rules".into(), 30),
                ("error:503".into(), 10),
            ]),
            latency: Percentiles {
                count: 300,
                p50: 22.0,
                p90: 150.0,
                p95: 160.0,
                p99: 640.5,
                max: 900.0,
            },
            throughput: buckets(true),
            latency_series: latency(true),
            breaker: vec![
                BreakerSpan {
                    breaker: "mock/gpt-primary".into(),
                    state: "closed".into(),
                    start_ms: 0.0,
                    end_ms: 1200.0,
                },
                BreakerSpan {
                    breaker: "mock/gpt-primary".into(),
                    state: "open".into(),
                    start_ms: 1200.0,
                    end_ms: 2200.0,
                },
                BreakerSpan {
                    breaker: "mock/gpt-primary".into(),
                    state: "half_open".into(),
                    start_ms: 2200.0,
                    end_ms: 2300.0,
                },
                BreakerSpan {
                    breaker: "mock/gpt-primary".into(),
                    state: "closed".into(),
                    start_ms: 2300.0,
                    end_ms: 3000.0,
                },
                BreakerSpan {
                    breaker: "mock/gpt-backup".into(),
                    state: "closed".into(),
                    start_ms: 0.0,
                    end_ms: 3000.0,
                },
            ],
            criteria: vec![
                Criterion {
                    name: "breaker opens".into(),
                    passed: true,
                    detail: "opened after 200 ms (max 1000 ms)".into(),
                },
                Criterion {
                    name: "errors | rare".into(),
                    passed: false,
                    detail: "10 errors of 300 = 3.3% (max 1%)".into(),
                },
            ],
            mock: MockStats {
                requests: 250,
                by_outcome: BTreeMap::from([(Outcome::Ok, 226), (Outcome::ServerError, 24)]),
                billed_input_tokens: 22_600,
                billed_output_tokens: 6_780,
                billed_micro_usd: 1_001_234,
                ..MockStats::default()
            },
            plots: Vec::new(),
        };
        Report {
            version: "0.1.0".into(),
            mode: "short".into(),
            backend: "memory".into(),
            concurrency: 16,
            duration_ms: 3000,
            scenarios: vec![normal, storm],
            money: vec![MoneyRow {
                scenario: "500 storm <&>".into(),
                budget_micro_usd: 2_000,
                with_budget_micro_usd: 1_234,
                without_budget_micro_usd: 7_000,
                with_budget_retries: 12,
                without_budget_retries: 70,
                with_budget_requests: 300,
                without_budget_requests: 300,
            }],
            passed: false,
        }
    }

    /// A fresh directory under the system temp dir, unique per process and call.
    fn unique_dir() -> PathBuf {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        std::env::temp_dir().join(format!("pressure-chaos-report-{}-{n}", std::process::id()))
    }

    #[test]
    fn sanitize_keeps_only_lowercase_digits_and_dashes() {
        assert_eq!(sanitize("rate-limit-storm"), "rate-limit-storm");
        assert_eq!(sanitize("500 Storm <&> x"), "500-storm-x");
        assert_eq!(sanitize("--Été--"), "t");
        assert_eq!(sanitize("<&>"), "scenario");
    }

    #[test]
    fn writes_plots_json_and_markdown() {
        let dir = unique_dir();
        let mut report = sample_report();
        let written = write_report(&mut report, &dir).unwrap();

        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "normal-throughput.svg",
                "normal-latency.svg",
                "normal-breaker.svg",
                "500-storm-throughput.svg",
                "500-storm-latency.svg",
                "500-storm-breaker.svg",
                "report.json",
                "report.md",
            ]
        );
        assert_eq!(report.scenarios[1].plots, names[3..6]);
        for path in &written {
            assert!(path.starts_with(&dir));
            let content = fs::read_to_string(path).unwrap();
            if path.extension().is_some_and(|e| e == "svg") {
                assert!(content.starts_with("<svg"), "{}", path.display());
                assert!(content.trim_end().ends_with("</svg>"), "{}", path.display());
            }
        }

        let json = fs::read_to_string(dir.join("report.json")).unwrap();
        let back: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(back, report);
        let md = fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(md.contains("![500-storm-latency](500-storm-latency.svg)"));

        fs::remove_dir_all(&dir).unwrap();
        assert!(!dir.exists());
    }

    #[test]
    fn duplicate_names_get_distinct_files_and_an_empty_report_writes() {
        let dir = unique_dir();
        let mut report = sample_report();
        report.scenarios[0].name = "500 storm".into();
        let written = write_report(&mut report, &dir).unwrap();
        assert_eq!(report.scenarios[0].plots[0], "500-storm-throughput.svg");
        assert_eq!(report.scenarios[1].plots[0], "500-storm-2-throughput.svg");
        assert_eq!(written.len(), 8);

        let mut empty = Report::default();
        let written = write_report(&mut empty, &dir.join("empty")).unwrap();
        assert_eq!(written.len(), 2);
        fs::remove_dir_all(&dir).unwrap();
    }
}
