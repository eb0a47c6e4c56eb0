//! The Markdown rendering of a [`Report`] (`report.md`): the verdict, a
//! summary table, one section per scenario and the money comparison, so a
//! reviewer reads the outcome of a chaos run on GitHub without opening the
//! JSON.

use std::fmt::Write as _;

use super::model::{MoneyRow, Report, ScenarioReport};

/// Renders the whole report as GitHub-flavoured Markdown.
///
/// Money is printed from the integer micro-dollars by integer arithmetic
/// (`$0.001234`), never through floats, so the table shows exactly what the
/// mock billed. Text from the report is escaped for table cells (`|`, `<`,
/// `>`, line breaks).
pub fn render_markdown(r: &Report) -> String {
    let mut md = String::new();
    md.push_str("# pressure chaos report\n\n");
    let _ = writeln!(
        md,
        "version `{}` · mode `{}` · backend `{}` · concurrency {} · duration {} per scenario · {}\n",
        code(&r.version),
        code(&r.mode),
        code(&r.backend),
        r.concurrency,
        seconds(r.duration_ms),
        verdict(r.passed)
    );

    md.push_str("| scenario | requests | p50 ms | p95 ms | p99 ms | results | criteria |\n");
    md.push_str("|---|---:|---:|---:|---:|---|---|\n");
    for s in &r.scenarios {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} |",
            cell(&s.name),
            s.requests,
            ms(s.latency.p50),
            ms(s.latency.p95),
            ms(s.latency.p99),
            cell(&results(s)),
            criteria_summary(s)
        );
    }
    if r.scenarios.is_empty() {
        md.push_str("| _no scenarios_ | | | | | | |\n");
    }

    for s in &r.scenarios {
        scenario_section(&mut md, s);
    }

    md.push_str("\n## Money: retries with and without the budget\n\n");
    md.push_str(
        "What the mock billed for retries that did not answer (calls after the first of an event \
         that hung, stalled or were refused), under the same load with the retry money budget and \
         without it. Refused calls (429, 500) cost nothing, as with real providers; a call the \
         gateway stopped waiting for costs its prompt, and its whole answer when the provider was \
         already generating it.\n\n",
    );
    md.push_str(
        "| scenario | budget/event | retries (with) | burned by retries (with) | retries (without) \
         | burned by retries (without) | saved |\n",
    );
    md.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
    for m in &r.money {
        money_row(&mut md, m);
    }
    if r.money.is_empty() {
        md.push_str("| _no money comparison_ | | | | | | |\n");
    }
    md
}

/// One `##` section: description, phases, criteria, mock counters, plots.
fn scenario_section(md: &mut String, s: &ScenarioReport) {
    let _ = writeln!(md, "\n## {}\n", text(&s.name));
    if !s.description.is_empty() {
        let _ = writeln!(md, "{}\n", text(&s.description));
    }
    if !s.phases.is_empty() {
        let phases: Vec<String> = s
            .phases
            .iter()
            .map(|p| {
                let fault = if p.fault { " (fault)" } else { "" };
                format!(
                    "`{}` {}–{} s{fault}",
                    code(&p.name),
                    secs_f(p.start_ms),
                    secs_f(p.end_ms)
                )
            })
            .collect();
        let _ = writeln!(md, "**Phases:** {}\n", phases.join(", "));
    }

    md.push_str("| | criterion | measured |\n|---|---|---|\n");
    for c in &s.criteria {
        let mark = if c.passed { "✅" } else { "❌" };
        let _ = writeln!(md, "| {mark} | {} | {} |", cell(&c.name), cell(&c.detail));
    }
    if s.criteria.is_empty() {
        md.push_str("| | _no criteria_ | |\n");
    }

    let m = &s.mock;
    let outcomes: Vec<String> = m
        .by_outcome
        .iter()
        .map(|(o, n)| format!("{} {n}", outcome_name(o)))
        .collect();
    let outcomes = if outcomes.is_empty() {
        "none".to_owned()
    } else {
        outcomes.join(", ")
    };
    let _ = writeln!(
        md,
        "\n**Mock:** {} requests · {} · billed {} input + {} output tokens · billed {}",
        m.requests,
        text(&outcomes),
        m.billed_input_tokens,
        m.billed_output_tokens,
        dollars(m.billed_micro_usd)
    );

    if !s.plots.is_empty() {
        md.push('\n');
        for plot in &s.plots {
            let alt = plot.trim_end_matches(".svg");
            let _ = writeln!(md, "![{}]({})", text(alt), link(plot));
        }
    }
}

/// One row of the money table.
fn money_row(md: &mut String, m: &MoneyRow) {
    let with = i128::from(m.with_budget_micro_usd);
    let without = i128::from(m.without_budget_micro_usd);
    let saved = without - with;
    let percent = if without == 0 {
        "n/a".to_owned()
    } else {
        percent_tenths(saved * 1000, without)
    };
    let _ = writeln!(
        md,
        "| {} | {} | {} | {} | {} | {} | {} ({percent}) |",
        cell(&m.scenario),
        dollars(m.budget_micro_usd),
        m.with_budget_retries,
        dollars(m.with_budget_micro_usd),
        m.without_budget_retries,
        dollars(m.without_budget_micro_usd),
        signed_dollars(saved),
    );
}

/// `numerator / denominator` (a percentage times ten) rounded half away
/// from zero and printed with one decimal, e.g. `82.5%`.
fn percent_tenths(numerator: i128, denominator: i128) -> String {
    let rounded =
        (2 * numerator + denominator.signum() * numerator.signum() * denominator.abs()) / (2 * denominator);
    let sign = if rounded < 0 { "-" } else { "" };
    let abs = rounded.unsigned_abs();
    format!("{sign}{}.{}%", abs / 10, abs % 10)
}

/// Micro-dollars as dollars with six decimals: `1234` → `$0.001234`.
pub(crate) fn dollars(micro_usd: u64) -> String {
    format!("${}.{:06}", micro_usd / 1_000_000, micro_usd % 1_000_000)
}

/// Signed micro-dollars as dollars with six decimals: `-10` → `-$0.000010`.
fn signed_dollars(micro_usd: i128) -> String {
    let sign = if micro_usd < 0 { "-" } else { "" };
    let abs = micro_usd.unsigned_abs();
    format!("{sign}${}.{:06}", abs / 1_000_000, abs % 1_000_000)
}

/// `**PASS**` or `**FAIL**`.
fn verdict(passed: bool) -> &'static str {
    if passed {
        "**PASS**"
    } else {
        "**FAIL**"
    }
}

/// Whole milliseconds as seconds, without trailing zeros: `20000` → `20 s`,
/// `1500` → `1.5 s`.
fn seconds(duration_ms: u64) -> String {
    let frac = duration_ms % 1000;
    if frac == 0 {
        format!("{} s", duration_ms / 1000)
    } else {
        let frac = format!("{frac:03}");
        format!("{}.{} s", duration_ms / 1000, frac.trim_end_matches('0'))
    }
}

/// Fractional milliseconds as seconds with one decimal (`—` when not finite).
fn secs_f(value_ms: f64) -> String {
    if value_ms.is_finite() {
        format!("{:.1}", value_ms / 1000.0)
    } else {
        "—".to_owned()
    }
}

/// A latency in milliseconds with one decimal (`—` when not finite).
fn ms(value: f64) -> String {
    if value.is_finite() {
        format!("{value:.1}")
    } else {
        "—".to_owned()
    }
}

/// Client results by label, largest first: `primary 120, backup 3`.
fn results(s: &ScenarioReport) -> String {
    let mut results: Vec<(&String, &u64)> = s.results.iter().collect();
    results.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    let parts: Vec<String> = results.iter().map(|(label, n)| format!("{label} {n}")).collect();
    if parts.is_empty() {
        "—".to_owned()
    } else {
        parts.join(", ")
    }
}

/// `✅ 4/4` when every criterion passed, `❌ 3/4` otherwise.
fn criteria_summary(s: &ScenarioReport) -> String {
    let passed = s.criteria.iter().filter(|c| c.passed).count();
    let mark = if passed == s.criteria.len() { "✅" } else { "❌" };
    format!("{mark} {passed}/{}", s.criteria.len())
}

/// The serde (snake_case) name of a mock outcome.
fn outcome_name(outcome: &pressure_mock::Outcome) -> String {
    match serde_json::to_value(outcome) {
        Ok(serde_json::Value::String(name)) => name,
        _ => format!("{outcome:?}"),
    }
}

/// Text for a table cell: escapes `|` and HTML angle brackets, joins lines.
fn cell(value: &str) -> String {
    text(value).replace('|', "\\|")
}

/// Text outside tables: escapes HTML angle brackets, joins lines.
fn text(value: &str) -> String {
    value
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace(['\r', '\n'], " ")
}

/// Text inside a backtick code span: backticks and line breaks would end it.
fn code(value: &str) -> String {
    value.replace('`', "'").replace(['\r', '\n'], " ")
}

/// A relative link target: spaces and parentheses percent-encoded.
fn link(target: &str) -> String {
    target.replace(' ', "%20").replace('(', "%28").replace(')', "%29")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::write::tests::sample_report;

    #[test]
    fn renders_header_summary_sections_and_money() {
        let md = render_markdown(&sample_report());
        assert!(md.starts_with("# pressure chaos report\n"));
        assert!(md.contains(
            "version `0.1.0` · mode `short` · backend `memory` · concurrency 16 · duration 3 s per scenario · **FAIL**"
        ));
        assert!(md.contains("| normal | 300 | 20.4 | 45.2 | 80.0 | primary 300 | ✅ 1/1 |"));
        assert!(md.contains(
            "| 500 storm &lt;&&gt; | 300 | 22.0 | 160.0 | 640.5 | primary 220, backup 40, rules 30, error:503 10 \
             | ❌ 1/2 |"
        ));
        assert!(md.contains("\n## normal\n"));
        assert!(md.contains("\n## 500 storm &lt;&&gt;\n"));
        assert!(md.contains("The primary answers 500 for a second, then recovers."));
        assert!(md.contains("`storm <500>` 1.0–2.0 s (fault)"));
        assert!(md.contains("| ✅ | no client error | 0 errors of 300 (max 0) |"));
        assert!(md.contains("| ✅ | breaker opens | opened after 200 ms (max 1000 ms) |"));
        assert!(md.contains("| ❌ | errors \\| rare | 10 errors of 300 = 3.3% (max 1%) |"));
        assert!(md.contains(
            "**Mock:** 250 requests · ok 226, server_error 24 · billed 22600 input + 6780 output tokens \
             · billed $1.001234"
        ));
        assert!(md.contains("## Money: retries with and without the budget"));
        assert!(md.contains(
            "| scenario | budget/event | retries (with) | burned by retries (with) | retries (without) \
             | burned by retries (without) | saved |"
        ));
        assert!(md.contains(
            "| 500 storm &lt;&&gt; | $0.002000 | 12 | $0.001234 | 70 | $0.007000 | $0.005766 (82.4%) |"
        ));
    }

    #[test]
    fn links_plots_and_passes() {
        let mut report = sample_report();
        report.passed = true;
        report.scenarios[0].plots = vec!["normal-throughput.svg".into(), "normal latency.svg".into()];
        let md = render_markdown(&report);
        assert!(md.contains("· **PASS**\n"));
        assert!(md.contains(
            "![normal-throughput](normal-throughput.svg)\n![normal latency](normal%20latency.svg)"
        ));
    }

    #[test]
    fn empty_report_renders() {
        let md = render_markdown(&Report::default());
        assert!(md.contains("concurrency 0 · duration 0 s per scenario · **FAIL**"));
        assert!(md.contains("| _no scenarios_ |"));
        assert!(md.contains("| _no money comparison_ |"));
        let mut empty_scenario = Report::default();
        empty_scenario.scenarios.push(ScenarioReport::default());
        let md = render_markdown(&empty_scenario);
        assert!(md.contains("| _no criteria_ |"));
        assert!(md.contains("**Mock:** 0 requests · none ·"));
    }

    #[test]
    fn money_is_formatted_by_integer_arithmetic() {
        assert_eq!(dollars(0), "$0.000000");
        assert_eq!(dollars(1_234), "$0.001234");
        assert_eq!(dollars(12_345_678_901), "$12345.678901");
        assert_eq!(dollars(u64::MAX), "$18446744073709.551615");
        assert_eq!(signed_dollars(-10), "-$0.000010");
        assert_eq!(percent_tenths(5_766_000, 7_000), "82.4%");
        assert_eq!(percent_tenths(1_000, 3), "33.3%");
        assert_eq!(percent_tenths(2_000, 3), "66.7%");
        assert_eq!(percent_tenths(-1_000, 8), "-12.5%");
        assert_eq!(percent_tenths(0, 8), "0.0%");
        assert_eq!(seconds(1_500), "1.5 s");
        assert_eq!(seconds(20_250), "20.25 s");

        let row = |with: u64, without: u64| {
            let mut md = String::new();
            money_row(
                &mut md,
                &MoneyRow {
                    scenario: "s".into(),
                    with_budget_micro_usd: with,
                    without_budget_micro_usd: without,
                    ..MoneyRow::default()
                },
            );
            md
        };
        assert!(row(0, 0).ends_with("| $0.000000 (n/a) |\n"));
        assert!(row(30, 20).ends_with("| -$0.000010 (-50.0%) |\n"));
        assert!(row(0, u64::MAX).ends_with("| $18446744073709.551615 (100.0%) |\n"));
    }
}
