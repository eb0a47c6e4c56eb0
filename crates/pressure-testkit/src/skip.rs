//! [`skip`]: the one way a test that cannot run on this machine says so.
//!
//! A test that needs something a machine may lack (a browser, the Python
//! SDK, a `redis-server` built with TLS) calls [`skip`] and returns. The
//! skip is never silent: its line goes to the process's stderr directly,
//! past the test harness's capture, so it shows on a pass too; the file
//! named by `PRESSURE_SKIP_LOG` collects the lines of every test binary of
//! a run (`.ci/run` prints them and fails when there are any); and the
//! test's `PRESSURE_REQUIRE_*` variable set to `1` makes it a failure.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The variable naming the file that collects the skip lines of a run.
const SKIP_LOG: &str = "PRESSURE_SKIP_LOG";

/// Says that `test` does not run here because of `reason`; the caller
/// returns right after.
///
/// * With `require_env` set to `1`: panics with "`<require_env>`=1 but
///   `<test>` cannot run: `<reason>`" (the test fails).
/// * Otherwise: writes one line, "SKIPPED `<test>`: `<reason>`
///   (`<require_env>`=1 makes this a failure)", to the process's stderr
///   (not through `eprintln!`, which the harness captures and shows only on
///   a failure), and appends the same line to the file named by
///   `PRESSURE_SKIP_LOG` when that is set. Each append is one write to a
///   file opened in append mode, so the lines of tests running in parallel,
///   in one process or several, do not interleave.
///
/// `test` names the test as the run shows it, prefixed with its test target
/// (`dashboard::the_dashboard_shows_…`); line breaks in `reason` become
/// ` | ` so that the skip stays one line.
///
/// # Panics
/// As above; and when `PRESSURE_SKIP_LOG` is set but the line cannot be
/// appended to it (a skip the run would not see is a silent pass).
#[track_caller]
pub fn skip(test: &str, require_env: &str, reason: &str) {
    let reason = one_line(reason);
    if required(require_env) {
        panic!("{require_env}=1 but {test} cannot run: {reason}");
    }
    let line = format!("SKIPPED {test}: {reason} ({require_env}=1 makes this a failure)\n");
    let log = std::env::var_os(SKIP_LOG)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    if let Err(e) = record(&line, &mut std::io::stderr(), log.as_deref()) {
        let log = log.unwrap_or_default();
        panic!(
            "{SKIP_LOG}={}: cannot record the skip of {test}: {e}",
            log.display()
        );
    }
}

/// Whether `require_env` is `1`: only that value makes a skip a failure.
fn required(require_env: &str) -> bool {
    std::env::var(require_env).is_ok_and(|v| v == "1")
}

/// Writes `line` to `out` (best effort: a closed stderr loses nothing the
/// log does not keep) and appends it to `log`, in one write.
fn record(line: &str, out: &mut dyn Write, log: Option<&Path>) -> std::io::Result<()> {
    let _ = out.write_all(line.as_bytes());
    let _ = out.flush();
    if let Some(path) = log {
        let mut file = std::fs::OpenOptions::new().append(true).create(true).open(path)?;
        // O_APPEND: the kernel puts each write at the end of the file as
        // one piece. A line this short is written by one `write(2)`.
        file.write_all(line.as_bytes())?;
    }
    Ok(())
}

/// `text` with its lines joined by ` | `, blank ones dropped.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_skip_is_one_line_on_stderr_and_appended_to_the_log() {
        let dir = crate::process::fresh_dir().expect("temp dir");
        let log = dir.join("skips.log");
        std::fs::write(&log, "SKIPPED earlier: kept\n").expect("write");
        // Parallel skips, as from tests on several threads.
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let log = log.clone();
                std::thread::spawn(move || {
                    let mut out = Vec::new();
                    let line = format!("SKIPPED t{i}: {}\n", "x".repeat(200));
                    record(&line, &mut out, Some(&log)).expect("recorded");
                    assert_eq!(out, line.as_bytes(), "the same line on stderr");
                })
            })
            .collect();
        for t in threads {
            t.join().expect("no panic");
        }
        let text = std::fs::read_to_string(&log).expect("read");
        let mut lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines.remove(0),
            "SKIPPED earlier: kept",
            "appended, not truncated"
        );
        lines.sort_unstable();
        let want: Vec<String> = (0..8)
            .map(|i| format!("SKIPPED t{i}: {}", "x".repeat(200)))
            .collect();
        assert_eq!(lines, want, "one whole line per skip:\n{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_log_that_cannot_be_written_is_an_error() {
        let dir = crate::process::fresh_dir().expect("temp dir");
        let missing = dir.join("no-such-dir").join("skips.log");
        assert!(record("SKIPPED x: y\n", &mut Vec::new(), Some(&missing)).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_reason_on_several_lines_becomes_one() {
        assert_eq!(
            one_line("no venv\n\n  pip said:\nerror  \n"),
            "no venv | pip said: | error"
        );
        assert_eq!(one_line("one line"), "one line");
    }

    #[test]
    #[should_panic(
        expected = "PRESSURE_TESTKIT_SKIP_TEST_REQUIRED=1 but skip::a_required_skip_fails cannot run: \
                    no widget | here"
    )]
    fn a_required_skip_fails() {
        // A variable of this test's own: the tests of this binary run in
        // parallel in one environment.
        std::env::set_var("PRESSURE_TESTKIT_SKIP_TEST_REQUIRED", "1");
        skip(
            "skip::a_required_skip_fails",
            "PRESSURE_TESTKIT_SKIP_TEST_REQUIRED",
            "no widget\nhere",
        );
    }

    #[test]
    fn only_1_makes_a_skip_required() {
        // Variables of this test's own: the tests of this binary run in
        // parallel in one environment.
        let var = "PRESSURE_TESTKIT_SKIP_TEST_VALUES";
        assert!(!required(var), "unset");
        for (value, want) in [("1", true), ("0", false), ("yes", false), ("", false)] {
            std::env::set_var(var, value);
            assert_eq!(required(var), want, "{var}={value:?}");
        }
    }
}
