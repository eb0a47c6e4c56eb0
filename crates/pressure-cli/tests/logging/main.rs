//! The gateway's log as an operator reads it, from the real binary's
//! stderr: `--access-log` writes one JSON line per request with its fields,
//! `--log-format text` writes human-readable (non-JSON) lines, `--log-level`
//! filters unless `RUST_LOG` is set (which wins), an invalid level is
//! refused with exit code 2, and a Redis outage is logged once per
//! transition, not once per request. Every process is killed on drop and
//! every wait is for an event, under a deadline that only bounds a hang.

#[path = "../lifecycle/support.rs"]
#[allow(dead_code)]
mod support;

use pressure_testkit::RedisServer;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::{free_port, upstream, Gateway, TempDir};
use tokio::time::Instant;

/// A `pressure gateway` child with its stderr in a file; killed on drop.
struct Gw {
    child: Child,
    log: PathBuf,
    proxy: String,
    admin: String,
}

impl Drop for Gw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Gw {
    /// Starts the gateway in front of `upstream` with `args`; `rust_log`
    /// sets `RUST_LOG` (or removes it when `None`).
    fn spawn(dir: &Path, name: &str, upstream: &str, args: &[&str], rust_log: Option<&str>) -> Self {
        let (proxy, admin) = (free_port(), free_port());
        let config = json!({ "gateway": {
            "listen": format!("127.0.0.1:{proxy}"),
            "admin": { "listen": format!("127.0.0.1:{admin}") },
            "upstreams": { "app": { "url": upstream, "pathPrefix": "/" } },
        }});
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, config.to_string()).expect("write config");
        let log = dir.join(format!("{name}.log"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pressure"));
        cmd.arg("gateway")
            .arg("--config")
            .arg(&path)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"));
        match rust_log {
            Some(v) => cmd.env("RUST_LOG", v),
            None => cmd.env_remove("RUST_LOG"),
        };
        Self {
            child: cmd.spawn().expect("spawn the pressure binary"),
            log,
            proxy: format!("http://127.0.0.1:{proxy}"),
            admin: format!("http://127.0.0.1:{admin}"),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn wait_ready(&mut self) {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the gateway exited early ({status}):\n{}", self.log());
            }
            if let Ok(r) = client.get(format!("{}/readyz", self.admin)).send().await {
                if r.status() == 200 {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "not ready in 30 s:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (30 s at most, a bound on a hang) until a log line satisfies
    /// `pred`; that line.
    async fn wait_line(&self, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(l) = self.log().lines().find(|l| pred(l)) {
                return l.to_owned();
            }
            assert!(Instant::now() < deadline, "no such line in:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_flag_writes_one_json_line_per_request() {
    let up = upstream().await;
    let dir = TempDir::new("access-log");
    let mut gw = Gw::spawn(dir.path(), "access", &up.url, &["--access-log"], None);
    gw.wait_ready().await;
    let r = reqwest::Client::new()
        .get(format!("{}/x/./y?token=abc123", gw.proxy))
        .header("x-request-id", "cli-req-1")
        .header("authorization", "Bearer not-a-checked-token")
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers().get("x-request-id").and_then(|v| v.to_str().ok()),
        Some("cli-req-1")
    );
    assert_eq!(r.text().await.expect("body"), "ok");
    let line = gw.wait_line(|l| l.contains("\"pressure::access\"")).await;
    let v: Value = serde_json::from_str(&line).expect("the access line is JSON");
    let f = &v["fields"];
    assert_eq!(f["request_id"], "cli-req-1", "{line}");
    assert_eq!(f["method"], "GET", "{line}");
    assert_eq!(f["path"], "/x/y", "{line}");
    assert_eq!(f["route"], "none", "{line}");
    assert_eq!(f["upstream"], "app", "{line}");
    assert_eq!(f["status"], 200, "{line}");
    assert_eq!(f["bytes_sent"], 2, "{line}");
    assert!(f["duration_ms"].is_number(), "{line}");
    assert!(f["time"].is_string(), "{line}");
    assert!(
        !line.contains("abc123") && !line.contains("not-a-checked-token"),
        "{line}"
    );
    // Exactly one line for one request: once the line of a later request
    // is written (one writer, in order), no second line of the first.
    let later = reqwest::get(format!("{}/later", gw.proxy))
        .await
        .expect("answered");
    assert_eq!(later.status(), 200);
    gw.wait_line(|l| l.contains("\"pressure::access\"") && l.contains("\"/later\""))
        .await;
    let n = gw
        .log()
        .lines()
        .filter(|l| l.contains("\"pressure::access\""))
        .count();
    assert_eq!(n, 2, "{}", gw.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_format_writes_lines_that_are_not_json() {
    let up = upstream().await;
    let dir = TempDir::new("text-format");
    let mut gw = Gw::spawn(
        dir.path(),
        "text",
        &up.url,
        &["--log-format", "text", "--access-log"],
        None,
    );
    gw.wait_ready().await;
    let r = reqwest::get(format!("{}/hello", gw.proxy))
        .await
        .expect("answered");
    assert_eq!(r.status(), 200);
    let access = gw.wait_line(|l| l.contains("pressure::access")).await;
    assert!(access.contains("status=200"), "{access}");
    assert!(
        access.contains("path=\"/hello\"") || access.contains("path=/hello"),
        "{access}"
    );
    let started = gw.wait_line(|l| l.contains("gateway listening")).await;
    for l in [&access, &started] {
        assert!(serde_json::from_str::<Value>(l).is_err(), "a JSON line: {l}");
        assert!(l.contains("INFO"), "{l}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_level_filters_and_rust_log_wins() {
    let up = upstream().await;
    let dir = TempDir::new("log-level");
    // --log-level warn alone: no info line.
    let mut quiet = Gw::spawn(dir.path(), "quiet", &up.url, &["--log-level", "warn"], None);
    quiet.wait_ready().await;
    // RUST_LOG=info wins over --log-level warn: the info line is there.
    let mut loud = Gw::spawn(
        dir.path(),
        "loud",
        &up.url,
        &["--log-level", "warn"],
        Some("info"),
    );
    loud.wait_ready().await;
    loud.wait_line(|l| l.contains("gateway listening")).await;
    assert!(
        !quiet.log().contains("gateway listening"),
        "an info line at --log-level warn:\n{}",
        quiet.log()
    );
}

/// README "Redis backend": while Redis is out the failure mode applies,
/// "logged once per transition". Traffic through an outage in which the
/// gateway sees Redis fail again and again writes one `unavailable` line,
/// and the return one `recovered` line — not one per request or probe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_is_logged_once_per_transition() {
    let mut redis = RedisServer::start();
    let up = upstream().await;
    let dir = TempDir::new("outage-log");
    let (proxy, admin) = (free_port(), free_port());
    let config = json!({ "gateway": {
        "listen": format!("127.0.0.1:{proxy}"),
        "admin": { "listen": format!("127.0.0.1:{admin}") },
        "upstreams": { "app": { "url": up.url, "pathPrefix": "/" } },
        "backend": { "type": "redis", "url": redis.url(), "failureMode": "open", "timeoutMs": 50,
                     "keyPrefix": format!("outage-log-{}", std::process::id()) },
        "pressure": { "perRoute": [{
            "resource": "gateway:route:limited", "pathPrefix": "/limited",
            "limits": { "requestsPerMinute": 100_000 } }] }
    }});
    let mut gw = Gateway::spawn("outage", dir.path(), &config, &["--access-log"]);
    gw.wait_ready().await;
    assert_eq!(gw.get("/limited").await.0, 200, "{}", gw.log_tail());
    assert_eq!(gw.metric("pressure_redis_healthy").await, Some(1.0));
    let unavailable = |gw: &Gateway| gw.log_events(|m| m.starts_with("redis backend unavailable"));
    let recovered = |gw: &Gateway| gw.log_events(|m| m.starts_with("redis backend recovered"));

    redis.stop();
    // Traffic (admitted: failure mode `open`) until the gateway has counted
    // at least 5 failed Redis calls (probes by traffic and in the
    // background): a line per failure would be 5 lines or more.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut sent = 0;
    loop {
        assert_eq!(gw.get("/limited").await.0, 200, "{}", gw.log_tail());
        sent += 1;
        let failures = gw.metric("pressure_redis_failures_total").await.unwrap_or(0.0);
        if sent >= 20 && failures >= 5.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{failures} Redis failures counted after {sent} requests in 30 s:\n{}",
            gw.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let line = gw
        .wait_event("redis unavailable", |m| {
            m.starts_with("redis backend unavailable")
        })
        .await;
    assert_eq!(line["level"], "WARN", "{line}");
    assert_eq!(line["fields"]["redis"], redis.url(), "{line}");
    barrier(&gw, "/barrier-outage").await;
    assert_eq!(unavailable(&gw).len(), 1, "{}", gw.log());
    assert_eq!(recovered(&gw).len(), 0, "{}", gw.log());

    redis.restart();
    gw.wait_event("redis recovered", |m| m.starts_with("redis backend recovered"))
        .await;
    for _ in 0..20 {
        assert_eq!(gw.get("/limited").await.0, 200, "{}", gw.log_tail());
    }
    barrier(&gw, "/barrier-recovered").await;
    assert_eq!(gw.metric("pressure_redis_healthy").await, Some(1.0));
    assert_eq!(gw.metric("pressure_redis_transitions_total").await, Some(2.0));
    assert_eq!(unavailable(&gw).len(), 1, "{}", gw.log());
    assert_eq!(recovered(&gw).len(), 1, "{}", gw.log());
}

/// Sends `GET path` and waits for its access line: every line logged
/// before the request is then in the file (one writer, in order).
async fn barrier(gw: &Gateway, path: &str) {
    assert_eq!(gw.get(path).await.0, 200, "{}", gw.log_tail());
    gw.wait_json(path, |v| {
        v["target"] == "pressure::access" && v["fields"]["path"] == path
    })
    .await;
}

#[test]
fn an_invalid_log_level_exits_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_pressure"))
        .args([
            "gateway",
            "--config",
            "/nonexistent.json",
            "--log-level",
            "pressure=loud",
        ])
        .env_remove("RUST_LOG")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--log-level"), "{stderr}");
}
