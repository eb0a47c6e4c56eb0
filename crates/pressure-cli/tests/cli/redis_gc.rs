//! `pressure redis gc` against the test binary's own `redis-server`
//! (`pressure-testkit`, or `PRESSURE_REDIS_URL`), keys written with
//! `redis-cli` the way older versions left them: a dry run and then the real
//! run print the same one-line JSON report; an unreachable Redis is exit 1
//! with its URL.

use super::{pressure, stderr};
use crate::support::free_port;
use serde_json::{json, Value};
use std::process::Command;

/// `redis-cli -u url args...`, its stdout without the last newline.
fn redis_cli(url: &str, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-u")
        .arg(url)
        .args(args)
        .output()
        .expect("run redis-cli (it comes with redis-server)");
    assert!(out.status.success(), "redis-cli {args:?}: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).trim_end().to_owned()
}

/// The one JSON line of a successful `pressure` run.
fn report(args: &[&str]) -> Value {
    let out = pressure(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(text.lines().count(), 1, "one line: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn redis_gc_reports_one_json_line_dry_run_first() {
    let url = pressure_testkit::redis_url();
    let prefix = format!("cligc-{}", std::process::id());
    let time = redis_cli(&url, &["TIME"]);
    let mut parts = time.lines().map(|l| l.trim().parse::<i64>().expect("TIME"));
    let now_us = parts.next().expect("seconds") * 1_000_000 + parts.next().expect("µs");
    let past = format!("{prefix}:{{rold}}:s");
    let ahead = format!("{prefix}:{{rnew}}:s");
    let bare = format!("{prefix}:{{rbare}}:s");
    let stream = format!("{prefix}:{{manual-queue}}:requests");
    redis_cli(&url, &["HSET", &past, "x", &(now_us - 60_000_000).to_string()]);
    redis_cli(&url, &["HSET", &ahead, "e", &(now_us + 120_000_000).to_string()]);
    redis_cli(&url, &["HSET", &bare, "c", "0"]);
    redis_cli(&url, &["XADD", &stream, "*", "f", "v"]);

    let args = |dry: bool| {
        let mut a = vec![
            "redis",
            "gc",
            "--redis",
            &url,
            "--prefix",
            &prefix,
            "--default-ttl-ms",
            "90000",
        ];
        if dry {
            a.push("--dry-run");
        }
        a
    };
    let counts = |dry: bool| {
        json!({"dry_run": dry, "nodes": 1, "scanned": 4, "had_ttl": 0, "expiry_set": 2,
               "deleted": 1, "skipped_non_hash": 1})
    };
    assert_eq!(report(&args(true)), counts(true));
    assert_eq!(
        redis_cli(&url, &["PTTL", &past]),
        "-1",
        "a dry run changes nothing"
    );
    assert_eq!(redis_cli(&url, &["PTTL", &bare]), "-1");

    assert_eq!(report(&args(false)), counts(false));
    assert_eq!(
        redis_cli(&url, &["EXISTS", &past]),
        "0",
        "its mark is past: deleted"
    );
    let ttl = |key: &str| redis_cli(&url, &["PTTL", key]).parse::<i64>().expect("PTTL");
    assert!((1..=120_001).contains(&ttl(&ahead)), "expires at its mark");
    assert!((1..=90_000).contains(&ttl(&bare)), "the default TTL");
    assert_eq!(ttl(&stream), -1, "the manual queue persists");

    let down = format!("redis://127.0.0.1:{}", free_port());
    let out = pressure(&["redis", "gc", "--redis", &down]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("error: ") && err.contains(&down) && err.contains("refused"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(out.stdout.is_empty());

    // Where Redis is must be said (exit 2, like every usage error).
    assert_eq!(pressure(&["redis", "gc"]).status.code(), Some(2));
}
