//! The kNN level of the triage example: its fixed split of the golden set,
//! and its evaluation on the tickets that are not among its examples
//! (`examples/triage/gateway-knn.json`). The second test needs the
//! all-MiniLM-L6-v2 model (`PRESSURE_MINILM_DIR`, else `models/all-minilm-l6-v2`
//! under the checkout root, filled by `scripts/fetch-minilm.sh`); without it
//! it says so through `pressure_testkit::skip` (`PRESSURE_REQUIRE_LOCAL_MODEL=1`
//! makes that a failure).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use pressure_llm::pipeline::knn::{load_examples, nearest_label};
use pressure_llm::pipeline::ChainLevel;
use pressure_llm::provider::LocalModel;
use pressure_triage::eval::{self, EvalOptions, LevelKind};
use pressure_triage::Ticket;

use super::{dataset, example};

#[test]
fn the_knn_examples_are_a_fixed_stratified_split_of_the_golden_set() {
    let d = dataset();
    let examples = load_examples(&example("knn-examples.jsonl")).unwrap();
    // Per class, in file order, the tickets whose index within their
    // class is 0 or 2 modulo 5: 40 % of each class.
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let expected: Vec<(&str, &str, &str)> = d
        .tickets
        .iter()
        .filter(|t| {
            let i = seen.entry(t.label.as_str()).or_default();
            let keep = matches!(*i % 5, 0 | 2);
            *i += 1;
            keep
        })
        .map(|t| (t.id.as_str(), t.text.as_str(), t.label.as_str()))
        .collect();
    let got: Vec<(&str, &str, &str)> = examples
        .iter()
        .map(|e| (e.id.as_deref().unwrap(), e.text.as_str(), e.label.as_str()))
        .collect();
    assert_eq!(got, expected);
    let share = examples.len() as f64 / d.tickets.len() as f64;
    assert!((0.35..=0.45).contains(&share), "{share}");
    let classes: HashSet<&str> = examples.iter().map(|e| e.label.as_str()).collect();
    let all: HashSet<&str> = d.tickets.iter().map(|t| t.label.as_str()).collect();
    assert_eq!(classes, all, "every class has examples");
}

fn model_dir(test: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("PRESSURE_MINILM_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/all-minilm-l6-v2"));
    if dir.join("model.safetensors").is_file() {
        return Some(dir);
    }
    pressure_testkit::skip(
        test,
        "PRESSURE_REQUIRE_LOCAL_MODEL",
        &format!(
            "no all-MiniLM-L6-v2 model in {} (run scripts/fetch-minilm.sh, or set PRESSURE_MINILM_DIR)",
            dir.display()
        ),
    );
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_knn_level_is_scored_on_held_out_tickets_only() {
    let Some(dir) = model_dir("triage::knn::the_knn_level_is_scored_on_held_out_tickets_only") else {
        return;
    };
    let d = dataset();
    let mut config = eval::load_llm_config(&example("gateway-knn.json")).unwrap();
    config.providers.get_mut("local").unwrap().model_dir = Some(dir.to_string_lossy().into_owned());
    let knn = config.use_cases["triage"]
        .chain
        .iter()
        .find_map(|l| match l {
            ChainLevel::Knn(k) => Some(k.clone()),
            _ => None,
        })
        .expect("the example's chain has a knn level");
    // The knn level alone: the model levels need a provider.
    config.use_cases.get_mut("triage").unwrap().chain = vec![ChainLevel::Knn(knn.clone())];
    let options = EvalOptions {
        use_case: "triage".into(),
        concurrency: 4,
        llm_source: "none".into(),
        dataset_name: "tickets.jsonl".into(),
        structured: None,
    };
    let report = eval::evaluate(&config, &d, &options).await.unwrap();
    let l = &report.levels[0];
    assert_eq!(l.kind, LevelKind::Knn);

    let examples = load_examples(Path::new(&knn.examples)).unwrap();
    let ids: HashSet<&str> = examples.iter().filter_map(|e| e.id.as_deref()).collect();
    let held: Vec<&Ticket> = d
        .tickets
        .iter()
        .filter(|t| !ids.contains(t.id.as_str()))
        .collect();
    assert_eq!(l.total, held.len(), "only tickets that are not examples");
    assert_eq!(l.total + examples.len(), d.tickets.len());
    assert_eq!(l.errors, 0, "{:?}", l.error_kinds);
    assert_eq!(l.labelled, l.total, "knn always answers with a label");
    let note = l.note.as_deref().unwrap_or_default();
    assert!(
        note.contains(&format!("scored {} of {}", held.len(), d.tickets.len())),
        "{note}"
    );
    let per_class: usize = l.per_class.values().map(|c| c.total).sum();
    assert_eq!(per_class, held.len());

    // An independent count: the model and the vote, without the client.
    let model = LocalModel::load(&dir).unwrap();
    let texts: Vec<&str> = examples.iter().map(|e| e.text.as_str()).collect();
    let vectors = model.embed(&texts).unwrap().vectors;
    let correct = held
        .iter()
        .filter(|t| {
            let q = model.embed(&[t.text.as_str()]).unwrap().vectors.remove(0);
            let pairs = vectors
                .iter()
                .zip(&examples)
                .map(|(v, e)| (v.as_slice(), e.label.as_str()));
            nearest_label(&q, pairs, knn.k as usize).map(|v| v.label) == Some(t.label.clone())
        })
        .count();
    assert_eq!(l.correct, correct);
    let text = report.render();
    assert!(text.contains("knn local/all-minilm-l6-v2 (k=5)"), "{text}");
    assert!(text.contains("held out: scored"), "{text}");
}
