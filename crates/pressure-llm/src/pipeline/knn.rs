//! The `knn` chain level's classifier: labelled examples, their vectors,
//! and the vote of the `k` nearest ([`nearest_label`]).
//!
//! A level `{"knn": {"examples": "tickets.jsonl", "model": "local/minilm", "k": 5}}`
//! ([`KnnLevel`]) answers a chat request with the label of the examples
//! nearest to its last user message:
//!
//! 1. the examples file is read when the client is built ([`load_examples`]:
//!    JSONL, `{"text", "label"}` a line; an unreadable file or a bad line
//!    is a configuration error at `useCases.<name>.chain[<i>].knn.examples`);
//! 2. at the level's first use, the examples are embedded by the level's
//!    local model, once ([`KnnIndex`]), off the async runtime;
//! 3. for each request, the last user message is embedded by a call of that
//!    model through the attempt engine — its limiter, breaker, retries and
//!    metrics, like any call (`usage` = the tokenizer's tokens) — and the
//!    `k` examples of highest cosine similarity vote ([`nearest_label`]);
//! 4. the answer is a chat completion whose content is the label
//!    ([`knn_response`]; `model` is `knn:<provider/model>`, and the extra
//!    fields `pressure_label` and `pressure_knn` carry the label and the
//!    vote), served with the degradation `knn`.
//!
//! A request without a user message, or a level whose model cannot answer
//! (its breaker is open, its limiter has no capacity, the inference fails),
//! gives no answer: the chain goes on with its next level. Like `rules` and
//! `manualQueue`, a `knn` level still runs after the event's deadline has
//! passed (it makes no remote call; a degraded answer beats none): its call
//! then gets [`KNN_MIN_TIME`].

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::OnceCell;

use super::config::KnnLevel;
use super::fallback::offline_answer;
use crate::provider::{ChatResponse, LocalModel};

/// The least time the model call of a `knn` level gets, even when the
/// event's deadline has passed (the level runs after it, like `rules`).
pub const KNN_MIN_TIME: Duration = Duration::from_secs(2);

/// One labelled example.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    /// Its `id`, when the line has one (a string or a number).
    pub id: Option<String>,
    /// The text that is embedded.
    pub text: String,
    /// The label it votes for.
    pub label: String,
}

/// Reads the JSONL examples file at `path`: one object a line with a
/// non-empty string `text` and `label` (other fields ignored, an `id` kept);
/// blank lines are skipped. `Err` says what is wrong, with the line number.
pub fn load_examples(path: &Path) -> Result<Vec<Example>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse_examples(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// [`load_examples`] of text already read.
pub fn parse_examples(text: &str) -> Result<Vec<Example>, String> {
    let mut examples = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let n = i + 1;
        let value: Value = serde_json::from_str(line).map_err(|e| format!("line {n}: invalid JSON: {e}"))?;
        let field = |name: &str| -> Result<String, String> {
            match value.get(name) {
                Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
                _ => Err(format!("line {n}: needs a non-empty string \"{name}\"")),
            }
        };
        let id = match value.get("id") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(x)) => Some(x.to_string()),
            _ => None,
        };
        examples.push(Example {
            id,
            text: field("text")?,
            label: field("label")?,
        });
    }
    if examples.is_empty() {
        return Err("no examples".to_owned());
    }
    Ok(examples)
}

/// The outcome of a vote.
#[derive(Debug, Clone, PartialEq)]
pub struct KnnVote {
    /// The winning label.
    pub label: String,
    /// Votes it got.
    pub votes: usize,
    /// Examples that voted (`k`, or fewer when there are fewer examples).
    pub voters: usize,
    /// The summed cosine similarity of its voters.
    pub similarity: f32,
    /// The cosine similarity of the nearest example (whatever its label).
    pub nearest: f32,
}

/// The cosine similarity of `a` and `b` (0 when either is zero or their
/// lengths differ).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    let (mut dot, mut na, mut nb) = (0.0f32, 0.0f32, 0.0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    let norm = (na * nb).sqrt();
    if norm > 0.0 {
        dot / norm
    } else {
        0.0
    }
}

/// The label the `k` examples nearest to `query` (by cosine similarity;
/// equally near ones in their order) vote for: the most votes, then the
/// highest summed similarity of its voters, then the first label in
/// alphabetical order. `None` when there is no example or `k` is 0.
pub fn nearest_label<'a>(
    query: &[f32],
    examples: impl IntoIterator<Item = (&'a [f32], &'a str)>,
    k: usize,
) -> Option<KnnVote> {
    let mut scored: Vec<(f32, &str)> = examples
        .into_iter()
        .map(|(v, label)| (cosine(query, v), label))
        .collect();
    // Stable: equally similar examples keep their order.
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored.truncate(k);
    let nearest = scored.first()?.0;
    let mut tally: HashMap<&str, (usize, f32)> = HashMap::new();
    for (sim, label) in &scored {
        let t = tally.entry(label).or_insert((0, 0.0));
        t.0 += 1;
        t.1 += sim;
    }
    let (label, (votes, similarity)) = tally.into_iter().max_by(|(la, (va, sa)), (lb, (vb, sb))| {
        va.cmp(vb)
            .then(sa.total_cmp(sb))
            // The alphabetically first label is the greatest here.
            .then(lb.cmp(la))
    })?;
    Some(KnnVote {
        label: label.to_owned(),
        votes,
        voters: scored.len(),
        similarity,
        nearest,
    })
}

/// The examples of one `knn` level and, once computed, their vectors.
#[derive(Debug)]
pub struct KnnIndex {
    examples: Vec<Example>,
    vectors: OnceCell<Arc<Vec<Vec<f32>>>>,
}

impl KnnIndex {
    /// An index of `examples`, their vectors not computed yet.
    pub fn new(examples: Vec<Example>) -> Self {
        Self {
            examples,
            vectors: OnceCell::new(),
        }
    }

    /// The examples.
    pub fn examples(&self) -> &[Example] {
        &self.examples
    }

    /// The examples' vectors by `model`: computed at the first call (on
    /// tokio's blocking pool), then kept. A failure is returned and the
    /// next call tries again.
    pub async fn vectors(&self, model: &Arc<LocalModel>) -> Result<Arc<Vec<Vec<f32>>>, String> {
        self.vectors
            .get_or_try_init(|| async {
                let model = Arc::clone(model);
                let texts: Vec<String> = self.examples.iter().map(|e| e.text.clone()).collect();
                let started = tokio::time::Instant::now();
                let embedded = tokio::task::spawn_blocking(move || {
                    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                    model.embed(&refs)
                })
                .await
                .map_err(|e| format!("embedding the knn examples failed: {e}"))?
                .map_err(|e| format!("embedding the knn examples: {e}"))?;
                tracing::info!(
                    examples = self.examples.len(),
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "knn examples embedded"
                );
                Ok(Arc::new(embedded.vectors))
            })
            .await
            .cloned()
    }

    /// The vote of the `k` examples nearest to `query`, given the
    /// examples' `vectors` (from [`vectors`](Self::vectors)).
    pub fn classify(&self, vectors: &[Vec<f32>], query: &[f32], k: usize) -> Option<KnnVote> {
        let pairs = vectors
            .iter()
            .zip(&self.examples)
            .map(|(v, e)| (v.as_slice(), e.label.as_str()));
        nearest_label(query, pairs, k)
    }
}

/// The key of a level's index in the client: levels with the same model
/// and examples share one.
pub(crate) fn index_key(level: &KnnLevel) -> (String, String) {
    (level.model.clone(), level.examples.clone())
}

/// The answer of a `knn` level: a chat completion whose content is the
/// label; `model` is `knn:<provider/model>`; `pressure_label` is the label
/// and `pressure_knn` the vote (`k`, `votes`, `nearest`: the nearest
/// example's cosine similarity).
pub fn knn_response(level: &KnnLevel, vote: &KnnVote) -> ChatResponse {
    let mut extra = Map::new();
    extra.insert("pressure_label".into(), Value::String(vote.label.clone()));
    extra.insert(
        "pressure_knn".into(),
        serde_json::json!({
            "k": level.k,
            "votes": vote.votes,
            "nearest": (f64::from(vote.nearest) * 1e4).round() / 1e4,
        }),
    );
    // Like the rules levels: no chat model ran.
    offline_answer(
        format!("knn-{}", level.model.replace('/', "-")),
        format!("knn:{}", level.model),
        vote.label.clone(),
        extra,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labelled(rows: &[(&[f32], &'static str)]) -> Vec<(Vec<f32>, &'static str)> {
        rows.iter().map(|(v, l)| (v.to_vec(), *l)).collect()
    }

    fn vote(query: &[f32], set: &[(Vec<f32>, &str)], k: usize) -> Option<KnnVote> {
        nearest_label(query, set.iter().map(|(v, l)| (v.as_slice(), *l)), k)
    }

    #[test]
    fn the_majority_of_the_k_nearest_wins_and_flips_with_its_neighbours() {
        let mut set = labelled(&[
            (&[1.0, 0.0], "billing"),
            (&[0.9, 0.1], "billing"),
            (&[0.0, 1.0], "shipping"),
            (&[0.1, 0.9], "shipping"),
            (&[0.2, 0.8], "shipping"),
        ]);
        let query = [0.7, 0.3];
        let v = vote(&query, &set, 3).expect("a vote");
        assert_eq!((v.label.as_str(), v.votes, v.voters), ("billing", 2, 3));
        // Two more shipping examples right next to the query: the label flips.
        set.push((vec![0.7, 0.31], "shipping"));
        set.push((vec![0.69, 0.3], "shipping"));
        let v = vote(&query, &set, 3).expect("a vote");
        assert_eq!((v.label.as_str(), v.votes), ("shipping", 2));
        // k = 1: the single nearest decides.
        assert_eq!(vote(&[1.0, 0.01], &set, 1).expect("a vote").label, "billing");
    }

    #[test]
    fn ties_go_to_the_more_similar_voters_then_alphabetically() {
        let set = labelled(&[(&[1.0, 0.0], "b"), (&[0.0, 1.0], "a")]);
        // One vote each; "b" is nearer.
        assert_eq!(vote(&[0.8, 0.2], &set, 2).expect("a vote").label, "b");
        // Exactly as near: alphabetical.
        assert_eq!(vote(&[1.0, 1.0], &set, 2).expect("a vote").label, "a");
        assert_eq!(vote(&[1.0, 0.0], &[], 3), None);
        assert_eq!(vote(&[1.0, 0.0], &set, 0), None);
    }

    #[test]
    fn cosine_ignores_length_and_guards_zero() {
        assert!((cosine(&[2.0, 0.0], &[5.0, 0.0]) - 1.0).abs() < 1e-6);
        assert!(cosine(&[1.0, 0.0], &[0.0, 3.0]).abs() < 1e-6);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
        assert_eq!(cosine(&[1.0], &[1.0, 0.0]), 0.0);
    }

    #[test]
    fn examples_need_text_and_label_and_errors_name_the_line() {
        let ok = parse_examples(
            "{\"id\":\"T1\",\"text\":\"a\",\"label\":\"x\"}\n\n{\"text\":\"b\",\"label\":\"y\",\"id\":7}\n",
        )
        .expect("parses");
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[0].id.as_deref(), Some("T1"));
        assert_eq!(ok[1].id.as_deref(), Some("7"));
        let err = parse_examples("{\"text\":\"a\",\"label\":\"x\"}\n{\"text\":\"\",\"label\":\"x\"}\n")
            .unwrap_err();
        assert!(err.starts_with("line 2:"), "{err}");
        let err = parse_examples("{\"text\":\"a\"}").unwrap_err();
        assert!(err.contains("\"label\""), "{err}");
        assert!(parse_examples("not json").unwrap_err().contains("line 1"));
        assert_eq!(parse_examples("\n").unwrap_err(), "no examples");
    }
}
