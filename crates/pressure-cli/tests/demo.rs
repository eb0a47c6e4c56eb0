//! The README's first command: `pressure demo` runs both strategies and its
//! stats say so (in memory, and on Redis: the test binary's own
//! `redis-server` from `pressure-testkit`, or `PRESSURE_REDIS_URL`).

use std::process::Command;

fn demo(extra: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_pressure"))
        .args(["demo", "--json"])
        .args(extra)
        .output()
        .expect("the binary runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one line of JSON")
}

fn check(stats: &serde_json::Value) {
    let resources = stats["resources"].as_array().expect("resources");
    let find = |suffix: &str| {
        resources
            .iter()
            .find(|r| r["resource"].as_str().is_some_and(|id| id.ends_with(suffix)))
            .expect("listed")
    };
    let webhooks = find("gateway:route:webhooks-github");
    assert_eq!(webhooks["kind"], "limit");
    assert_eq!(webhooks["allowed"], 10, "10 per second admitted from one burst");
    assert_eq!(webhooks["denied"], 30);
    assert!(webhooks["queued"].is_null());
    let llm = find("llm:mock:gpt-4o-mini");
    assert_eq!(llm["kind"], "queue");
    assert_eq!(llm["queued"], 0);
    assert_eq!(llm["allowed"], 25, "24 jobs and one retry after the 429");
    assert_eq!(llm["active"], 0);
}

#[test]
fn demo_in_memory() {
    check(&demo(&[]));
}

#[test]
fn demo_on_redis() {
    check(&demo(&["--redis", &pressure_testkit::redis_url()]));
}
