//! `pressure chaos`: starts the mock provider and the gateway, loads the
//! whole stack per scenario and writes `report.json`, `report.md` and SVG
//! plots; the exit code is 0 only if every criterion passed.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};
use pressure_chaos::driver::{self, ChaosOptions, Progress};
use pressure_chaos::report;

/// Arguments of `pressure chaos`.
#[derive(Debug, clap::Args)]
pub(crate) struct ChaosArgs {
    /// A scenario (normal, hang, stall, rate-limit-storm, 500-storm, agents) or `all`;
    /// may be repeated.
    #[arg(long, default_value = "all")]
    scenario: Vec<String>,
    /// Concurrent clients per scenario.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=1000))]
    concurrency: u16,
    /// Load per run, e.g. `30s`, `1m`, `6000ms` (default 30s; 6s with --short).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Where the report goes.
    #[arg(long, default_value = "chaos-report")]
    out: PathBuf,
    /// The CI mode: every run loads for 6 s (all scenarios in under 2 minutes).
    #[arg(long)]
    short: bool,
    /// Put the gateway's limits in Redis (e.g. redis://127.0.0.1:6379) instead of memory.
    #[arg(long)]
    redis: Option<String>,
    /// Seed of the mock's random draws.
    #[arg(long)]
    seed: Option<u64>,
    /// Skip the second run of each scenario without the money budget.
    #[arg(long)]
    no_money: bool,
}

/// `30s`, `1m`, `1500ms` or a plain number of seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, "s"), |i| (&s[..i], &s[i..]));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?}: expected e.g. 30s, 1m or 1500ms"))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        _ => return Err(format!("{s:?}: unit must be ms, s or m")),
    };
    if d < Duration::from_secs(3) {
        return Err(format!(
            "{s:?}: at least 3s (a storm needs phases before, during and after)"
        ));
    }
    Ok(d)
}

/// A progress bar per run on stderr.
struct Bar {
    bar: ProgressBar,
}

impl Progress for Bar {
    fn run_started(&self, label: &str, duration_ms: u64) {
        self.bar.reset();
        self.bar.set_length(duration_ms);
        self.bar.set_position(0);
        self.bar.set_prefix(label.to_owned());
        self.bar.set_message("starting");
    }

    fn tick(&self, requests: u64, elapsed_ms: u64) {
        self.bar
            .set_position(elapsed_ms.min(self.bar.length().unwrap_or(elapsed_ms)));
        self.bar.set_message(format!("{requests} requests"));
    }

    fn run_finished(&self, label: &str, passed: bool) {
        let verdict = if passed { "pass" } else { "FAIL" };
        self.bar.println(format!("{verdict:>4}  {label}"));
    }
}

/// Runs the chaos scenarios; exit code 1 when a criterion failed, 2 on an
/// unknown scenario.
pub(crate) async fn run(args: ChaosArgs) -> anyhow::Result<()> {
    let base = if args.short {
        ChaosOptions::short()
    } else {
        ChaosOptions::full()
    };
    let opts = ChaosOptions {
        scenarios: args
            .scenario
            .iter()
            .flat_map(|s| s.split(','))
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect(),
        concurrency: usize::from(args.concurrency),
        duration: args.duration.unwrap_or(base.duration),
        redis: args.redis.clone(),
        seed: args.seed,
        money: !args.no_money,
        ..base
    };
    if let Err(e) = opts.resolve() {
        // A usage error, like an invalid config: exit 2, not the "criteria
        // failed" 1.
        eprintln!("error: {e}");
        std::process::exit(crate::exit::INVALID.into());
    }
    let bar = ProgressBar::new(1);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>28} [{bar:30}] {elapsed:>4} {msg}")
            .context("progress bar template")?
            .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let progress = Bar { bar };
    let mut rep = driver::run(&opts, &progress).await?;
    progress.bar.finish_and_clear();
    let written = report::write_report(&mut rep, &args.out)
        .with_context(|| format!("writing the report to {}", args.out.display()))?;
    crate::outln!("{}", summary(&rep))?;
    for path in written
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "md" || e == "json"))
    {
        crate::outln!("wrote {}", path.display())?;
    }
    if !rep.passed {
        eprintln!(
            "error: some criteria failed: see {}",
            args.out.join("report.md").display()
        );
        std::process::exit(crate::exit::FAILURE.into());
    }
    Ok(())
}

/// One line per criterion, grouped by scenario, and the money rows.
fn summary(r: &report::Report) -> String {
    let mut out = String::new();
    for s in &r.scenarios {
        out.push_str(&format!(
            "{} — {} requests, p50 {:.0} ms, p95 {:.0} ms, p99 {:.0} ms\n",
            s.name, s.requests, s.latency.p50, s.latency.p95, s.latency.p99
        ));
        for c in &s.criteria {
            let mark = if c.passed { "pass" } else { "FAIL" };
            out.push_str(&format!("  {mark}  {}: {}\n", c.name, c.detail));
        }
    }
    for m in &r.money {
        out.push_str(&format!(
            "money {}: failed retries burned {} µ$ with a {} µ$ budget ({} calls after the first), {} µ$ without ({} calls)\n",
            m.scenario,
            m.with_budget_micro_usd,
            m.budget_micro_usd,
            m.with_budget_retries,
            m.without_budget_micro_usd,
            m.without_budget_retries
        ));
    }
    out.push_str(if r.passed { "PASS\n" } else { "FAIL\n" });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("4500ms"), Ok(Duration::from_millis(4_500)));
        assert_eq!(parse_duration("12"), Ok(Duration::from_secs(12)));
        assert!(parse_duration("1s").is_err());
        assert!(parse_duration("3h").is_err());
        assert!(parse_duration("x").is_err());
    }
}
