//! The command's manners: one error style and exit-code table, a closed
//! pipe that is no crash, completions, the generated config schema, the
//! manual queue of a memory-backend gateway listed and drained through its
//! admin API; `pressure keys` against a real gateway (`keys.rs`);
//! `pressure redis gc` against a real Redis (`redis_gc.rs`);
//! `pressure triage eval` on a fixed ticket set (`triage_eval.rs`).

#[path = "../lifecycle/support.rs"]
#[allow(dead_code)]
mod support;

mod keys;
mod redis_gc;
mod triage_eval;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use support::{free_port, Gateway, TempDir};

fn pressure(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pressure"))
        .args(args)
        .output()
        .expect("run pressure")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pressure"))
        .arg("demo")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut first = String::new();
    {
        let stdout = child.stdout.take().expect("stdout");
        BufReader::new(stdout)
            .read_line(&mut first)
            .expect("a first line");
        // Dropped here, like `| head -1`.
    }
    let out = child.wait_with_output().expect("wait");
    assert!(first.starts_with("check+reject"), "{first}");
    let err = stderr(&out);
    assert!(out.status.success(), "exit {:?}: {err}", out.status.code());
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn invalid_input_is_one_error_line_and_exit_2() {
    let dir = TempDir::new("cli-invalid");
    let missing = dir.path().join("nope.json");
    let out = pressure(&["check-config", missing.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert_eq!(err.matches("nope.json").count(), 1, "the file named once: {err}");

    let typo = dir.path().join("typo.json");
    std::fs::write(&typo, r#"{"gatway": {"listen": "127.0.0.1:1", "upstreams": {}}}"#).expect("write");
    let out = pressure(&["check-config", typo.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("did you mean `gateway`"), "{err}");
}

#[test]
fn a_failure_at_run_time_is_one_error_line_and_exit_1() {
    let port = free_port();
    let out = pressure(&["queue", "list", "--admin", &format!("http://127.0.0.1:{port}")]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.starts_with("error: "), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!err.contains("Caused by"), "{err}");
}

#[test]
fn completions_are_printed_for_each_shell() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef pressure"),
        ("fish", "complete -c pressure"),
    ] {
        let out = pressure(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(marker), "{shell}: {text}");
        assert!(text.contains("check-config"), "{shell} completes the subcommands");
    }
    assert_eq!(pressure(&["completions", "tcsh"]).status.code(), Some(2));
}

#[test]
fn the_config_schema_is_printed() {
    let out = pressure(&["config", "schema"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let schema: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(schema["required"], json!(["gateway"]));
    assert!(schema["$defs"]["GatewayConfig"]["properties"]["upstreams"].is_object());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_memory_queue_is_listed_and_drained_through_the_admin_api() {
    let dir = TempDir::new("cli-queue");
    let (proxy, admin) = (free_port(), free_port());
    let config = json!({"gateway": {
        "listen": format!("127.0.0.1:{proxy}"),
        "admin": {"listen": format!("127.0.0.1:{admin}")},
        "upstreams": {"none": {"url": format!("http://127.0.0.1:{}", free_port()), "pathPrefix": "/"}},
        "llm": {"useCases": {"later": {"chain": [{"manualQueue": true}]}}}
    }});
    let mut gw = Gateway::spawn("queue", dir.path(), &config, &[]);
    gw.wait_ready().await;
    let client = reqwest::Client::new();
    for text in ["one", "two"] {
        let r = client
            .post(format!("{}/v1/chat/completions", gw.proxy))
            .json(&json!({"model": "later", "messages": [{"role": "user", "content": text}]}))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .expect("answer");
        assert_eq!(r.status(), 202);
    }
    let run = |args: Vec<String>| {
        let out = Command::new(env!("CARGO_BIN_EXE_pressure"))
            .args(&args)
            .output()
            .expect("run");
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        (lines, stderr(&out))
    };
    let admin_url = gw.admin.clone();
    let args = |action: &str, count: &str| -> Vec<String> {
        ["queue", action, "--admin", &admin_url, "--count", count]
            .map(str::to_owned)
            .to_vec()
    };
    let (listed, _) = run(args("list", "10"));
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0]["request"]["messages"][0]["content"], "one");
    let (drained, _) = run(args("drain", "1"));
    assert_eq!(drained.len(), 1);
    assert_eq!(drained[0]["ticket"], listed[0]["ticket"]);
    let (_, _) = run(args("drain", "5"));
    let (empty, said) = run(args("list", "10"));
    assert!(empty.is_empty());
    assert!(said.contains("empty"), "{said}");
}

#[test]
fn triage_eval_fails_when_every_call_of_a_model_failed() {
    let dir = TempDir::new("cli-triage");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/triage");
    let text = std::fs::read_to_string(root.join("gateway.json")).expect("the triage config");
    // Nothing listens there: every model call fails fast.
    let dead = format!("http://127.0.0.1:{}/v1", free_port());
    let config = dir.path().join("gateway.json");
    std::fs::write(&config, text.replace("http://127.0.0.1:9100/v1", &dead)).expect("write");
    let dataset = root.join("tickets.jsonl");
    let args = [
        "triage",
        "eval",
        "--config",
        config.to_str().expect("utf-8"),
        "--dataset",
        dataset.to_str().expect("utf-8"),
        "--limit",
        "3",
    ];
    let out = pressure(&args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("error: every call to "), "{err}");
    // The report is still printed: it shows what failed.
    assert!(!out.stdout.is_empty());

    // With the mock answering, the same evaluation succeeds.
    let mut mocked = args.to_vec();
    mocked.push("--mock");
    let out = pressure(&mocked);
    assert!(out.status.success(), "{}", stderr(&out));
}
