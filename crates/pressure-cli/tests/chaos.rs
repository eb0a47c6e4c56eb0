//! `pressure chaos` and `pressure mock-provider` as a user runs them: the
//! real binary, on 127.0.0.1, bounded in time.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

fn temp_dir(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("pressure-cli-{name}-{}", std::process::id()))
}

#[test]
fn chaos_runs_a_scenario_writes_the_report_and_exits_zero() {
    let out_dir = temp_dir("chaos");
    let out = Command::new(env!("CARGO_BIN_EXE_pressure"))
        .args([
            "chaos",
            "--scenario",
            "normal",
            "--duration",
            "3s",
            "--concurrency",
            "16",
            "--no-money",
        ])
        .arg("--out")
        .arg(&out_dir)
        .output()
        .expect("run pressure chaos");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("pass  No 400 is ever retried"), "{stdout}");
    assert!(stdout.lines().any(|l| l == "PASS"), "{stdout}");
    for file in [
        "report.json",
        "report.md",
        "normal-throughput.svg",
        "normal-latency.svg",
        "normal-breaker.svg",
    ] {
        assert!(out_dir.join(file).is_file(), "{file} missing");
    }
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("report.json")).expect("report.json"))
            .expect("json");
    assert_eq!(report["passed"], true);
    assert_eq!(report["scenarios"][0]["name"], "normal");
    assert_eq!(report["concurrency"], 16);
    std::fs::remove_dir_all(&out_dir).expect("clean up");
}

#[test]
fn chaos_refuses_an_unknown_scenario_with_exit_code_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_pressure"))
        .args(["chaos", "--scenario", "meteor"])
        .arg("--out")
        .arg(temp_dir("never"))
        .output()
        .expect("run pressure chaos");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown scenario \"meteor\""), "{stderr}");
    assert!(!temp_dir("never").exists(), "nothing written");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_mock_provider_serves_and_switches_at_run_time() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pressure"))
        .args(["mock-provider", "--listen", "127.0.0.1:0", "--scenario", "normal"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the mock");
    let stdout = child.stdout.take().expect("stdout");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let line = tokio::time::timeout(Duration::from_secs(30), line)
        .await
        .expect("the mock says where it listens")
        .expect("join")
        .expect("read");
    let base = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_owned();
    let root = base.trim_end_matches("/v1").to_owned();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");

    let chat = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let ok = http
        .post(format!("{base}/chat/completions"))
        .json(&chat)
        .send()
        .await
        .expect("chat");
    assert_eq!(ok.status(), 200);
    let switched = http
        .put(format!("{root}/mock/scenario/500-storm"))
        .send()
        .await
        .expect("switch");
    assert_eq!(switched.status(), 200);
    let failed = http
        .post(format!("{base}/chat/completions"))
        .json(&chat)
        .send()
        .await
        .expect("chat");
    assert_eq!(failed.status(), 500);
    let stats: serde_json::Value = http
        .get(format!("{root}/mock/stats"))
        .send()
        .await
        .expect("stats")
        .json()
        .await
        .expect("json");
    assert_eq!(stats["requests"], 2, "{stats}");
    assert_eq!(stats["byStatus"]["200"], 1, "{stats}");
    assert_eq!(stats["byStatus"]["500"], 1, "{stats}");
    child.kill().expect("stop the mock");
    let _ = child.wait();
}

#[test]
fn the_mock_provider_refuses_an_invalid_behaviour_file() {
    let path = temp_dir("behaviour.json");
    std::fs::write(&path, r#"{"phases":[{"name":"x","hangShare":2}]}"#).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_pressure"))
        .args(["mock-provider", "--listen", "127.0.0.1:0", "--behaviour"])
        .arg(&path)
        .output()
        .expect("run");
    std::fs::remove_file(&path).expect("clean up");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("phases[0].hangShare"), "{stderr}");
}
