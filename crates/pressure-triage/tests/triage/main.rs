//! Integration tests of the triage example: the shipped golden dataset and
//! gateway config, and `pressure triage eval` against the real mock provider
//! on 127.0.0.1:0, checked against counts made independently here.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;

use pressure_llm::pipeline::{ChainLevel, KeywordRules, LlmConfig};
use pressure_mock::{Responder, Turn};
use pressure_triage::eval::{self, EvalOptions, LevelKind};
use pressure_triage::{prompt, Dataset, LexicalClassifier, LABELS};

mod knn;

fn example(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/triage")
        .join(file)
}

fn dataset() -> Dataset {
    Dataset::load(&example("tickets.jsonl")).unwrap()
}

fn config() -> LlmConfig {
    eval::load_llm_config(&example("gateway.json")).unwrap()
}

fn rules(config: &LlmConfig) -> KeywordRules {
    let name = config.use_cases["triage"]
        .chain
        .iter()
        .find_map(|l| match l {
            ChainLevel::Rules(name) => Some(name.clone()),
            _ => None,
        })
        .expect("the triage chain has a rules level");
    KeywordRules::new(name.clone(), config.rules[&name].clone())
}

#[test]
fn the_dataset_has_enough_unique_tickets_and_classes() {
    let d = dataset();
    assert!(d.tickets.len() >= 200, "{} tickets", d.tickets.len());
    let ids: HashSet<&str> = d.tickets.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids.len(), d.tickets.len(), "ids are unique");
    let texts: HashSet<String> = d.tickets.iter().map(|t| t.text.trim().to_lowercase()).collect();
    assert_eq!(texts.len(), d.tickets.len(), "texts are unique");
    let classes: BTreeSet<&str> = d.tickets.iter().map(|t| t.label.as_str()).collect();
    assert!(classes.len() >= 4, "classes: {classes:?}");
}

#[test]
fn the_rules_cover_the_two_most_frequent_classes_precisely() {
    let d = dataset();
    let config = config();
    let rules = rules(&config);
    let top: Vec<String> = d.labels_by_frequency().into_iter().take(2).collect();
    assert_eq!(top.len(), 2);
    for class in &top {
        let (mut matched, mut correct, mut of_class) = (0usize, 0usize, 0usize);
        for t in &d.tickets {
            let said = rules.matching(&t.text).and_then(|r| r.label.as_deref());
            if said == Some(class.as_str()) {
                matched += 1;
                if t.label == *class {
                    correct += 1;
                }
            }
            if t.label == *class {
                of_class += 1;
            }
        }
        assert!(matched > 0, "no rule labels {class}");
        let precision = correct as f64 / matched as f64;
        let coverage = correct as f64 / of_class as f64;
        assert!(
            precision >= 0.9,
            "{class}: precision {precision:.3} ({correct}/{matched})"
        );
        assert!(
            coverage >= 0.5,
            "{class}: coverage {coverage:.3} ({correct}/{of_class})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_eval_with_the_mock_matches_independent_counts() {
    let d = dataset();
    let mut config = config();
    let mock = eval::start_mock(SocketAddr::from(([127, 0, 0, 1], 0)), &config)
        .await
        .unwrap();
    let base_url = mock.base_url();
    eval::point_providers_at(&mut config, &base_url);
    let options = EvalOptions {
        use_case: "triage".into(),
        concurrency: 16,
        llm_source: eval::mock_source(&config, &base_url),
        dataset_name: "tickets.jsonl".into(),
        structured: None,
    };
    let report = eval::evaluate(&config, &d, &options).await;
    mock.shutdown().await;
    let report = report.unwrap();

    assert_eq!(report.tickets, d.tickets.len());
    assert!(
        report.llm_source.contains("mock provider"),
        "{}",
        report.llm_source
    );
    assert!(report.llm_source.contains(&base_url), "{}", report.llm_source);
    let kinds: Vec<LevelKind> = report.levels.iter().map(|l| l.kind).collect();
    assert_eq!(
        kinds,
        vec![
            LevelKind::Model,
            LevelKind::Model,
            LevelKind::Rules,
            LevelKind::ManualQueue
        ]
    );

    // Model levels: the test's own count of the classifier's answers.
    for level in &report.levels[..2] {
        let model = config
            .models
            .iter()
            .find(|m| m.key() == level.name)
            .map(|m| m.model.clone())
            .unwrap();
        let expected = d
            .tickets
            .iter()
            .filter(|t| {
                let req = prompt::request(&model, &t.text);
                let turns: Vec<Turn> = req
                    .messages
                    .iter()
                    .map(|m| Turn::new(&m.role, m.text()))
                    .collect();
                let answer = LexicalClassifier.respond(&model, &turns);
                prompt::parse_label(&answer, LABELS) == Some(t.label.as_str())
            })
            .count();
        assert_eq!(level.errors, 0, "{}: {:?}", level.name, level.error_kinds);
        assert_eq!(level.correct, expected, "{}", level.name);
        assert!((level.accuracy - expected as f64 / d.tickets.len() as f64).abs() < 1e-12);
        assert!(
            level.spent_micro_usd.unwrap_or(0) > 0,
            "{} spent nothing",
            level.name
        );
        assert!(level.mean_latency_ms.is_some());
    }
    assert!(
        report.levels[0].accuracy > report.levels[1].accuracy,
        "the large mock model is the better one"
    );
    assert!(
        report.levels[0].spent_micro_usd > report.levels[1].spent_micro_usd,
        "and the pricier one"
    );

    // Rules level: an independent count with the rules of the config.
    let rules = rules(&config);
    let (mut matched, mut correct) = (0usize, 0usize);
    for t in &d.tickets {
        if let Some(rule) = rules.matching(&t.text) {
            matched += 1;
            if rule.label.as_deref() == Some(t.label.as_str()) {
                correct += 1;
            }
        }
    }
    let r = &report.levels[2];
    assert_eq!(
        (r.labelled, r.correct, r.total),
        (matched, correct, d.tickets.len())
    );
    assert!((r.accuracy - correct as f64 / d.tickets.len() as f64).abs() < 1e-12);
    let per_class_correct: usize = r.per_class.values().map(|c| c.correct).sum();
    assert_eq!(per_class_correct, correct);

    assert!(!report.levels[3].measured);
    let text = report.render();
    assert!(text.contains("a person; not measured"), "{text}");
    assert!(text.contains("LLM levels: provider \"mock\""), "{text}");
}

#[tokio::test]
async fn an_unknown_use_case_is_a_clear_error() {
    let options = EvalOptions {
        use_case: "nope".into(),
        concurrency: 1,
        llm_source: String::new(),
        dataset_name: String::new(),
        structured: None,
    };
    let e = eval::evaluate(&config(), &dataset(), &options).await.unwrap_err();
    assert!(e.to_string().contains("\"nope\""), "{e}");
    assert!(e.to_string().contains("triage"), "{e}");
}

#[test]
fn a_malformed_dataset_line_is_named() {
    let path = std::env::temp_dir().join(format!("pressure-triage-{}.jsonl", std::process::id()));
    std::fs::write(
        &path,
        "{\"id\":\"T1\",\"text\":\"refund\",\"label\":\"billing\"}\n\
         {\"id\":\"T2\",\"text\":\"parcel\",\"label\":\"shipping\"}\n\
         {\"id\":\"T3\",\"text\":\"oops\" \"label\":\"billing\"}\n",
    )
    .unwrap();
    let e = Dataset::load(&path).unwrap_err();
    let _ = std::fs::remove_file(&path);
    assert!(e.to_string().starts_with("line 3:"), "{e}");
}
