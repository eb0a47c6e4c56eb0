//! `pressure triage eval` on a fixed set of nine tickets: against the mock
//! provider (`--mock`, exact counts per level and class), and against an
//! OpenAI-compatible endpoint (`--provider URL --model NAME`) played by a
//! scripted server on 127.0.0.1:0, with and without `--structured`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::support::TempDir;
use super::{pressure, stderr};

/// Nine tickets, every class present. S7 is a bug report full of payment
/// words (the rules and the mock's lexicon both call it billing), S8 has no
/// cue at all, S9 names its class only through a weak cue (`fee`) that the
/// mock's small model does not know.
const TICKETS: &[(&str, &str, &str)] = &[
    (
        "S1",
        "Please refund the duplicate charge on my last invoice.",
        "billing",
    ),
    (
        "S2",
        "I forgot my password and the reset email never comes, so I cannot log in.",
        "account_access",
    ),
    (
        "S3",
        "The tracking number shows my parcel stuck in transit for two weeks.",
        "shipping",
    ),
    (
        "S4",
        "The app crashes with an error every time I open the settings screen.",
        "bug_report",
    ),
    (
        "S5",
        "It would be great if you could add a dark mode to the dashboard.",
        "feature_request",
    ),
    (
        "S6",
        "Please cancel my subscription at the end of this month.",
        "cancellation",
    ),
    (
        "S7",
        "The payment page shows a blank screen when I click the pay button.",
        "bug_report",
    ),
    ("S8", "Hello, is anyone there?", "shipping"),
    ("S9", "I would like that fee back.", "billing"),
];

fn example(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/triage")
        .join(file)
}

fn write_dataset(dir: &TempDir) -> PathBuf {
    let path = dir.path().join("tickets.jsonl");
    let lines: Vec<String> = TICKETS
        .iter()
        .map(|(id, text, label)| json!({"id": id, "text": text, "label": label}).to_string())
        .collect();
    std::fs::write(&path, lines.join("\n") + "\n").expect("write the dataset");
    path
}

/// Runs `pressure triage eval --json` with `args` on the nine tickets and
/// returns the report.
fn eval_json(dir: &TempDir, args: &[&str]) -> Value {
    let dataset = write_dataset(dir);
    let config = example("gateway.json");
    let mut all = vec![
        "triage",
        "eval",
        "--json",
        "--config",
        config.to_str().expect("utf-8"),
        "--dataset",
        dataset.to_str().expect("utf-8"),
    ];
    all.extend_from_slice(args);
    let out = pressure(&all);
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        stderr(&out)
    );
    serde_json::from_slice(&out.stdout).expect("the report is JSON")
}

/// `(total, labelled, correct, errors)` of a level.
fn counts(level: &Value) -> (u64, u64, u64, u64) {
    let n = |k: &str| level[k].as_u64().unwrap_or_else(|| panic!("{k} in {level}"));
    (n("total"), n("labelled"), n("correct"), n("errors"))
}

/// `class → (tickets, correct)` of a level.
fn per_class(level: &Value) -> BTreeMap<String, (u64, u64)> {
    level["per_class"]
        .as_object()
        .expect("per_class")
        .iter()
        .map(|(k, v)| {
            let n = |f: &str| v[f].as_u64().expect("a count");
            (k.clone(), (n("total"), n("correct")))
        })
        .collect()
}

fn classes(pairs: &[(&str, u64, u64)]) -> BTreeMap<String, (u64, u64)> {
    pairs
        .iter()
        .map(|(c, t, k)| ((*c).to_owned(), (*t, *k)))
        .collect()
}

#[test]
fn triage_eval_with_the_mock_gives_exact_counts_on_a_fixed_set() {
    let dir = TempDir::new("cli-triage-mock");
    let report = eval_json(&dir, &["--mock", "--concurrency", "4"]);
    assert_eq!(report["tickets"], 9);
    assert!(
        report["llm_source"]
            .as_str()
            .is_some_and(|s| s.contains("stand-in")),
        "{}",
        report["llm_source"]
    );
    let levels = report["levels"].as_array().expect("levels");
    let names: Vec<&str> = levels.iter().map(|l| l["name"].as_str().expect("name")).collect();
    assert_eq!(
        names,
        [
            "mock/triage-large",
            "mock/triage-small",
            "triage-keywords",
            "manual queue"
        ]
    );

    // The large mock model: all but S7 (billing) and S8 (no idea).
    assert_eq!(counts(&levels[0]), (9, 8, 7, 0));
    assert_eq!(
        per_class(&levels[0]),
        classes(&[
            ("account_access", 1, 1),
            ("billing", 2, 2),
            ("bug_report", 2, 1),
            ("cancellation", 1, 1),
            ("feature_request", 1, 1),
            ("shipping", 2, 1),
        ])
    );
    // The small one does not know `fee` either: S9 unlabelled.
    assert_eq!(counts(&levels[1]), (9, 7, 6, 0));
    assert_eq!(per_class(&levels[1])["billing"], (2, 1));
    // The rules: S1, S2, S3 right, S7 wrong (payment → billing).
    assert_eq!(counts(&levels[2]), (9, 4, 3, 0));
    assert_eq!(
        per_class(&levels[2]),
        classes(&[
            ("account_access", 1, 1),
            ("billing", 2, 1),
            ("bug_report", 2, 0),
            ("cancellation", 1, 0),
            ("feature_request", 1, 0),
            ("shipping", 2, 1),
        ])
    );
    assert_eq!(levels[3]["measured"], false);

    // Latency percentiles, tokens and money on the model levels only.
    for level in &levels[..2] {
        let p50 = level["p50_latency_ms"].as_f64().expect("p50");
        let p95 = level["p95_latency_ms"].as_f64().expect("p95");
        assert!(p50 > 0.0 && p50 <= p95, "{level}");
        assert!(level["input_tokens"].as_u64().expect("tokens in") > 0, "{level}");
        assert!(level["spent_micro_usd"].as_u64().expect("spent") > 0, "{level}");
    }
    assert!(levels[0]["spent_micro_usd"].as_u64() > levels[1]["spent_micro_usd"].as_u64());
    assert!(levels[2].get("p50_latency_ms").is_none());
}

/// What the scripted endpoint saw: every request body, in arrival order.
type Seen = Arc<Mutex<Vec<Value>>>;

/// An OpenAI-compatible endpoint on 127.0.0.1:0 answering `model` with a
/// script per ticket: the first call for S4 is a 500 (the client's retry
/// must recover it), S7 is answered `billing` (wrong), S8 with no label;
/// every other ticket with its golden label. With a `response_format` in
/// the request the answer is `{"label": …}`, as a grammar-constrained model
/// gives it.
async fn scripted_endpoint(model: &'static str) -> (String, Seen, tokio::task::JoinHandle<()>) {
    let seen: Seen = Arc::default();
    let handle = {
        let seen = seen.clone();
        move |axum::Json(body): axum::Json<Value>| {
            let seen = seen.clone();
            async move {
                let ticket = body["messages"][1]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let first_try = {
                    let mut seen = seen.lock().expect("lock");
                    let first = !seen
                        .iter()
                        .any(|b| b["messages"][1]["content"].as_str() == Some(ticket.as_str()));
                    seen.push(body.clone());
                    first
                };
                let (id, _, golden) = TICKETS
                    .iter()
                    .find(|(_, text, _)| *text == ticket)
                    .copied()
                    .unwrap_or(("?", "", "billing"));
                if body["model"] != model || (id == "S4" && first_try) {
                    let status = axum::http::StatusCode::INTERNAL_SERVER_ERROR;
                    return (
                        status,
                        axum::Json(json!({"error": {"message": "scripted failure"}})),
                    );
                }
                let label = match id {
                    "S7" => Some("billing"),
                    "S8" => None,
                    _ => Some(golden),
                };
                let content = match (body.get("response_format").is_some(), label) {
                    (true, Some(l)) => json!({ "label": l }).to_string(),
                    (true, None) => "{}".to_owned(),
                    (false, Some(l)) => l.to_owned(),
                    (false, None) => "I cannot tell.".to_owned(),
                };
                let answer = json!({
                    "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 4, "total_tokens": 104}
                });
                (axum::http::StatusCode::OK, axum::Json(answer))
            }
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/v1", listener.local_addr().expect("addr"));
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(handle));
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, seen, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triage_eval_measures_an_openai_compatible_endpoint_through_the_chain() {
    let (url, seen, task) = scripted_endpoint("tiny-model").await;
    for structured in [None, Some("json-schema"), Some("json-object")] {
        seen.lock().expect("lock").clear();
        let mut args: Vec<String> = [
            "--provider",
            url.as_str(),
            "--model",
            "tiny-model",
            "--concurrency",
            "2",
            "--input-price",
            "1000000",
            "--output-price",
            "2000000",
        ]
        .map(str::to_owned)
        .to_vec();
        if let Some(dialect) = structured {
            args.extend(["--structured".to_owned(), dialect.to_owned()]);
        }
        // The command blocks; the scripted endpoint runs on this runtime.
        let report = tokio::task::spawn_blocking(move || {
            let dir = TempDir::new("cli-triage-endpoint");
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            eval_json(&dir, &args)
        })
        .await
        .expect("the eval ran");
        let source = report["llm_source"].as_str().expect("source");
        assert!(source.contains(&url) && source.contains("tiny-model"), "{source}");

        // The config's model levels are replaced by the endpoint's model;
        // its rules and manual queue stay behind it.
        let levels = report["levels"].as_array().expect("levels");
        let names: Vec<&str> = levels.iter().map(|l| l["name"].as_str().expect("name")).collect();
        assert_eq!(names, ["endpoint/tiny-model", "triage-keywords", "manual queue"]);

        // S4 answered after one retry; S7 wrong; S8 no label.
        let model = &levels[0];
        assert_eq!(counts(model), (9, 8, 7, 0), "structured {structured:?}: {model}");
        assert_eq!(per_class(model)["bug_report"], (2, 1));
        assert_eq!(per_class(model)["shipping"], (2, 1));
        assert_eq!(per_class(model)["billing"], (2, 2));
        assert_eq!(model["input_tokens"], 900);
        assert_eq!(model["output_tokens"], 36);
        // 900 input tokens at $1/1M and 36 output at $2/1M; the failed
        // attempt reported no usage.
        let spent = model["spent_micro_usd"].as_u64().expect("spent");
        assert!(spent >= 900 + 72, "spent {spent}");

        let bodies = seen.lock().expect("lock").clone();
        assert_eq!(bodies.len(), 10, "nine tickets and one retry");
        for body in &bodies {
            assert_eq!(body["model"], "tiny-model");
            let format = body.get("response_format");
            if let Some(dialect) = structured {
                let format = format.expect("response_format sent");
                let schema = if dialect == "json-schema" {
                    assert_eq!(format["type"], "json_schema");
                    &format["json_schema"]["schema"]
                } else {
                    assert_eq!(format["type"], "json_object");
                    &format["schema"]
                };
                assert_eq!(
                    schema["properties"]["label"]["enum"],
                    json!([
                        "billing",
                        "account_access",
                        "shipping",
                        "bug_report",
                        "feature_request",
                        "cancellation"
                    ])
                );
            } else {
                assert!(format.is_none(), "{body}");
            }
        }
    }
    task.abort();
}

#[test]
fn triage_eval_provider_and_mock_exclude_each_other() {
    let out = pressure(&[
        "triage",
        "eval",
        "--mock",
        "--provider",
        "http://127.0.0.1:9/v1",
        "--model",
        "m",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = pressure(&["triage", "eval", "--provider", "http://127.0.0.1:9/v1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--model"), "{}", stderr(&out));
}
