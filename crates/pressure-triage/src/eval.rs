//! The per-level evaluation: what each degradation level of a use case's
//! chain costs in accuracy on the golden set, not only in money.
//!
//! * a model level is measured through the real client stack
//!   ([`LlmClient`]) built from the config with a one-level use case for
//!   that model only, so that no fallback hides its failures: every ticket is
//!   sent as system prompt + ticket text and the label is parsed from the
//!   answer;
//! * a `knn` level is measured through the client like a model level, but
//!   only on the tickets that are not among its own labelled examples
//!   ([`held_out`]; the report says how many were scored), one at a time;
//! * a rules level runs its [`KeywordRules`] on every ticket text;
//! * the manual queue is a person: not measured.
//!
//! For every level, *coverage* is the share of tickets it gave a label
//! (for a model, a parsable label), *precision* the share of those that were
//! right, and *accuracy* = correct / all tickets = coverage × precision.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use futures::stream::{self, StreamExt};
use pressure_core::ResourceBroker;
use pressure_llm::pipeline::knn::{load_examples, Example};
use pressure_llm::pipeline::{ChainLevel, KeywordRules, KnnLevel, LlmClient, LlmConfig, LlmError};
use pressure_llm::price::ModelPrice;
use pressure_llm::ProviderKind;
use serde::Serialize;
use tokio::time::Instant;

use super::classifier::LexicalClassifier;
use super::dataset::{Dataset, DatasetError, Ticket, LABELS};
use super::prompt;
use pressure_mock::{MockConfig, MockError, MockProvider, Price};

/// The name of the one-level use case the eval builds per model level.
const EVAL_USE_CASE: &str = "triage-eval";

/// Default number of tickets in flight per model level.
pub const DEFAULT_CONCURRENCY: usize = 16;

/// Why an evaluation could not run.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The gateway config file is invalid or unreadable.
    #[error(transparent)]
    Config(#[from] pressure_gateway::config::ConfigError),
    /// The config has no `gateway.llm` section.
    #[error("{0}: the config has no `gateway.llm` section")]
    NoLlm(String),
    /// The use case is not in `gateway.llm.useCases`.
    #[error("unknown use case {name:?} (the config has: {known})")]
    UnknownUseCase {
        /// The name asked for.
        name: String,
        /// The use cases of the config, comma-separated.
        known: String,
    },
    /// The dataset is invalid.
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    /// `--provider`/`--model` do not make a valid config.
    #[error("endpoint: {0}")]
    Endpoint(String),
    /// A client could not be built for a model level.
    #[error("level {level} ({model}): cannot build the client: {error}")]
    Client {
        /// The chain level.
        level: usize,
        /// `provider/model`.
        model: String,
        /// Why.
        error: Box<LlmError>,
    },
    /// The in-process mock provider could not start.
    #[error("mock provider: {0}")]
    Mock(MockError),
    /// A `knn` level's examples could not be read.
    #[error("level {level} (knn): {error}")]
    KnnExamples {
        /// The chain level.
        level: usize,
        /// Why.
        error: String,
    },
}

/// Reads the gateway config at `path` with the gateway's own loader (so the
/// eval measures exactly what the gateway would run) and returns its
/// `gateway.llm` section.
pub fn load_llm_config(path: &Path) -> Result<LlmConfig, EvalError> {
    let gateway = pressure_gateway::config::load(path)?;
    gateway
        .llm
        .ok_or_else(|| EvalError::NoLlm(path.display().to_string()))
}

/// Points every provider of `config` at `base_url` (e.g. the in-process
/// mock); `local` providers (models run in process) stay as they are.
pub fn point_providers_at(config: &mut LlmConfig, base_url: &str) {
    for p in config
        .providers
        .values_mut()
        .filter(|p| p.kind != ProviderKind::Local)
    {
        p.base_url = base_url.to_owned();
        p.api_key_env = None;
    }
}

/// Starts the mock provider on `addr` (port 0: any free port) with the
/// normal behaviour, the [`LexicalClassifier`] as its responder and the
/// prices of `config`'s models.
pub async fn start_mock(addr: SocketAddr, config: &LlmConfig) -> Result<MockProvider, EvalError> {
    let price = |p: ModelPrice| Price::new(p.input_micro_usd_per_1m, p.output_micro_usd_per_1m);
    let prices: BTreeMap<String, Price> = config
        .models
        .iter()
        .map(|m| (m.model.clone(), price(m.price)))
        .collect();
    let mock = MockProvider::start(
        addr,
        MockConfig {
            prices,
            responder: Arc::new(LexicalClassifier),
            seed: Some(1),
            ..MockConfig::default()
        },
    )
    .await
    .map_err(EvalError::Mock)?;
    Ok(mock)
}

/// The header line saying what answered the LLM levels when the providers
/// are the in-process mock at `base_url`.
pub fn mock_source(config: &LlmConfig, base_url: &str) -> String {
    format!(
        "{} at {base_url} — pressure's mock provider with its built-in lexical classifier \
         (a stand-in, not a model)",
        provider_names(config)
    )
}

/// The header line saying what answered the LLM levels: the configured
/// providers and their base URLs.
pub fn configured_source(config: &LlmConfig) -> String {
    let list: Vec<String> = config
        .providers
        .iter()
        .map(|(name, p)| format!("provider {name:?} at {}", p.base_url))
        .collect();
    format!("{} (as configured)", list.join(", "))
}

fn provider_names(config: &LlmConfig) -> String {
    let names: Vec<String> = config.providers.keys().map(|n| format!("{n:?}")).collect();
    match names.len() {
        1 => format!("provider {}", names[0]),
        _ => format!("providers {}", names.join(", ")),
    }
}

/// How to evaluate.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// The use case whose chain is measured.
    pub use_case: String,
    /// Tickets in flight per model level (at least 1).
    pub concurrency: usize,
    /// What answers the LLM levels, for the report's header
    /// ([`mock_source`] or [`configured_source`]).
    pub llm_source: String,
    /// Where the dataset came from, for the header.
    pub dataset_name: String,
    /// Constrain model answers to one label with a JSON schema in this
    /// `response_format` dialect ([`prompt::structured_request`]); `None`:
    /// ask for the label in plain text.
    pub structured: Option<prompt::SchemaFormat>,
}

/// The kind of a chain level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LevelKind {
    /// A model call.
    Model,
    /// A nearest-neighbour level (`knn`): a local embedding model and
    /// labelled examples.
    Knn,
    /// Keyword rules (or another non-LLM handler).
    Rules,
    /// The manual queue: a person.
    ManualQueue,
}

impl LevelKind {
    /// `model`, `knn`, `rules` or `manual queue`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Model => "model",
            Self::Knn => "knn",
            Self::Rules => "rules",
            Self::ManualQueue => "manual queue",
        }
    }
}

/// One class's score at one level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ClassScore {
    /// Tickets of this class.
    pub total: usize,
    /// Of those, labelled correctly.
    pub correct: usize,
}

impl ClassScore {
    /// `correct / total` (0 when there is none).
    pub fn accuracy(&self) -> f64 {
        ratio(self.correct, self.total)
    }
}

/// The measurement of one chain level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LevelReport {
    /// Index in the chain (0 = primary).
    pub level: usize,
    /// Kind of level.
    pub kind: LevelKind,
    /// `provider/model`, the rules name, or `manual queue`.
    pub name: String,
    /// Whether the level was measured (the manual queue and rules handlers
    /// registered in code are not).
    pub measured: bool,
    /// Why not, or a remark.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Tickets sent to the level.
    pub total: usize,
    /// Tickets the level gave a known label (model: a parsable label;
    /// rules: a rule matched).
    pub labelled: usize,
    /// Tickets labelled correctly.
    pub correct: usize,
    /// `correct / total`.
    pub accuracy: f64,
    /// `labelled / total` (for a model level: its answered share).
    pub coverage: f64,
    /// `correct / labelled`.
    pub precision: f64,
    /// Model level: calls that got no answer (after the level's retries).
    pub errors: usize,
    /// Model level: those errors by type.
    pub error_kinds: BTreeMap<String, usize>,
    /// Model level: mean latency of the answered calls, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_latency_ms: Option<f64>,
    /// Model level: median latency of the answered calls, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_latency_ms: Option<f64>,
    /// Model level: 95th percentile latency of the answered calls (nearest
    /// rank), in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p95_latency_ms: Option<f64>,
    /// Model level: prompt tokens of the answered calls, as the provider
    /// counted them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Model level: completion tokens of the answered calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Model level: money spent on all calls, failed ones included, in
    /// micro-USD (the client's own price table).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spent_micro_usd: Option<u64>,
    /// Recall per class of [`LABELS`]: of the tickets of the class, how
    /// many the level labelled correctly.
    pub per_class: BTreeMap<String, ClassScore>,
}

impl LevelReport {
    fn unmeasured(level: usize, kind: LevelKind, name: String, note: &str) -> Self {
        Self {
            level,
            kind,
            name,
            measured: false,
            note: Some(note.to_owned()),
            total: 0,
            labelled: 0,
            correct: 0,
            accuracy: 0.0,
            coverage: 0.0,
            precision: 0.0,
            errors: 0,
            error_kinds: BTreeMap::new(),
            mean_latency_ms: None,
            p50_latency_ms: None,
            p95_latency_ms: None,
            input_tokens: None,
            output_tokens: None,
            spent_micro_usd: None,
            per_class: BTreeMap::new(),
        }
    }

    /// Scores `predictions` (one per ticket, `None` = no label) against the
    /// tickets' labels.
    fn scored(
        level: usize,
        kind: LevelKind,
        name: String,
        tickets: &[Ticket],
        predictions: &[Option<String>],
    ) -> Self {
        let mut r = Self::unmeasured(level, kind, name, "");
        r.measured = true;
        r.note = None;
        r.total = tickets.len();
        r.per_class = LABELS
            .iter()
            .map(|l| ((*l).to_owned(), ClassScore::default()))
            .collect();
        for (t, p) in tickets.iter().zip(predictions) {
            let class = r.per_class.entry(t.label.clone()).or_default();
            class.total += 1;
            if let Some(p) = p {
                r.labelled += 1;
                if *p == t.label {
                    r.correct += 1;
                    class.correct += 1;
                }
            }
        }
        r.accuracy = ratio(r.correct, r.total);
        r.coverage = ratio(r.labelled, r.total);
        r.precision = ratio(r.correct, r.labelled);
        r
    }
}

/// The whole evaluation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalReport {
    /// The use case measured.
    pub use_case: String,
    /// Where the tickets came from.
    pub dataset: String,
    /// Tickets evaluated.
    pub tickets: usize,
    /// Tickets per class.
    pub class_counts: BTreeMap<String, usize>,
    /// What answered the LLM levels.
    pub llm_source: String,
    /// One entry per chain level, in chain order.
    pub levels: Vec<LevelReport>,
}

/// Measures every level of `options.use_case`'s chain in `config` on `dataset`.
pub async fn evaluate(
    config: &LlmConfig,
    dataset: &Dataset,
    options: &EvalOptions,
) -> Result<EvalReport, EvalError> {
    let use_case = config
        .use_cases
        .get(&options.use_case)
        .ok_or_else(|| EvalError::UnknownUseCase {
            name: options.use_case.clone(),
            known: config.use_cases.keys().cloned().collect::<Vec<_>>().join(", "),
        })?;
    let mut levels = Vec::with_capacity(use_case.chain.len());
    for (i, level) in use_case.chain.iter().enumerate() {
        let report = match level {
            ChainLevel::Model(key) => {
                model_level(config, &options.use_case, i, key, dataset, options).await?
            }
            // A pool's members serve one model: measured as its first.
            ChainLevel::Pool(members) => match members.first() {
                Some(m) => model_level(config, &options.use_case, i, &m.model, dataset, options).await?,
                None => LevelReport::unmeasured(i, LevelKind::Model, "empty pool".to_owned(), "no member"),
            },
            ChainLevel::Knn(knn) => knn_level(config, &options.use_case, i, knn, dataset).await?,
            ChainLevel::Rules(name) => rules_level(config, i, name, &dataset.tickets),
            ChainLevel::ManualQueue(_) => LevelReport::unmeasured(
                i,
                LevelKind::ManualQueue,
                "manual queue".to_owned(),
                "a person; not measured",
            ),
        };
        levels.push(report);
    }
    Ok(EvalReport {
        use_case: options.use_case.clone(),
        dataset: options.dataset_name.clone(),
        tickets: dataset.tickets.len(),
        class_counts: dataset.counts(),
        llm_source: options.llm_source.clone(),
        levels,
    })
}

fn rules_level(config: &LlmConfig, level: usize, name: &str, tickets: &[Ticket]) -> LevelReport {
    let Some(rules) = config.rules.get(name) else {
        return LevelReport::unmeasured(
            level,
            LevelKind::Rules,
            name.to_owned(),
            "no such rule set in the config (a handler registered in code); not measured",
        );
    };
    let rules = KeywordRules::new(name, rules.clone());
    // A matching rule without a label answers, but gives no class: it counts
    // as labelled (it took the ticket) and wrong.
    let predictions: Vec<Option<String>> = tickets
        .iter()
        .map(|t| {
            rules
                .matching(&t.text)
                .map(|r| r.label.clone().unwrap_or_else(|| "(no label)".to_owned()))
        })
        .collect();
    LevelReport::scored(level, LevelKind::Rules, name.to_owned(), tickets, &predictions)
}

/// The outcome of one ticket at a model level.
enum Call {
    Answered {
        label: Option<String>,
        micros: u64,
        tokens: (u64, u64),
    },
    Failed(&'static str),
}

async fn model_level(
    config: &LlmConfig,
    use_case: &str,
    level: usize,
    key: &str,
    dataset: &Dataset,
    options: &EvalOptions,
) -> Result<LevelReport, EvalError> {
    let mut one = config.clone();
    let mut uc = config.use_cases[use_case].clone();
    uc.chain = vec![ChainLevel::Model(key.to_owned())];
    one.use_cases = BTreeMap::from([(EVAL_USE_CASE.to_owned(), uc)]);
    let client = LlmClient::new(one, ResourceBroker::new()).map_err(|source| EvalError::Client {
        level,
        model: key.to_owned(),
        error: Box::new(source),
    })?;
    let client = &client;
    let calls: Vec<Call> = stream::iter(&dataset.tickets)
        .map(|t| async move {
            let start = Instant::now();
            let req = match options.structured {
                Some(format) => prompt::structured_request(EVAL_USE_CASE, &t.text, format),
                None => prompt::request(EVAL_USE_CASE, &t.text),
            };
            match client.complete(EVAL_USE_CASE, req).await {
                Ok(answer) => {
                    let response = answer.response();
                    let text = response
                        .and_then(|r| r.choices.first())
                        .map(|c| c.message.text())
                        .unwrap_or_default();
                    let tokens = response
                        .and_then(|r| r.usage.as_ref())
                        .map_or((0, 0), |u| (u.prompt_tokens, u.completion_tokens));
                    Call::Answered {
                        label: prompt::parse_label(&text, LABELS).map(str::to_owned),
                        micros: u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX),
                        tokens,
                    }
                }
                Err(e) => Call::Failed(e.label()),
            }
        })
        .buffered(options.concurrency.max(1))
        .collect()
        .await;
    let mut predictions = Vec::with_capacity(calls.len());
    let mut error_kinds: BTreeMap<String, usize> = BTreeMap::new();
    let mut latencies: Vec<u64> = Vec::with_capacity(calls.len());
    let (mut input_tokens, mut output_tokens) = (0u64, 0u64);
    for c in calls {
        match c {
            Call::Answered {
                label,
                micros: m,
                tokens: (i, o),
            } => {
                latencies.push(m);
                input_tokens = input_tokens.saturating_add(i);
                output_tokens = output_tokens.saturating_add(o);
                predictions.push(label);
            }
            Call::Failed(kind) => {
                *error_kinds.entry(kind.to_owned()).or_default() += 1;
                predictions.push(None);
            }
        }
    }
    let mut r = LevelReport::scored(
        level,
        LevelKind::Model,
        key.to_owned(),
        &dataset.tickets,
        &predictions,
    );
    r.errors = error_kinds.values().sum();
    r.error_kinds = error_kinds;
    set_latencies(&mut r, latencies);
    r.input_tokens = Some(input_tokens);
    r.output_tokens = Some(output_tokens);
    r.spent_micro_usd = Some(client.snapshot().spent_micro_usd);
    Ok(r)
}

/// The tickets a `knn` level may be scored on: those that are not among
/// its own examples (same `id`, or same text), and how many were left out.
pub fn held_out<'a>(tickets: &'a [Ticket], examples: &[Example]) -> (Vec<&'a Ticket>, usize) {
    let ids: HashSet<&str> = examples.iter().filter_map(|e| e.id.as_deref()).collect();
    let texts: HashSet<&str> = examples.iter().map(|e| e.text.trim()).collect();
    let (mut kept, mut excluded) = (Vec::new(), 0);
    for t in tickets {
        if ids.contains(t.id.as_str()) || texts.contains(t.text.trim()) {
            excluded += 1;
        } else {
            kept.push(t);
        }
    }
    (kept, excluded)
}

/// A `knn` level, measured on the tickets that are not among its examples
/// ([`held_out`]) through a client with a one-level use case (its model
/// call goes through the limiter and breaker like in the gateway). One
/// ticket at a time, after one warm-up call that embeds the examples, so
/// its latency is the cost of one ticket on this machine, not a queue.
async fn knn_level(
    config: &LlmConfig,
    use_case: &str,
    level: usize,
    knn: &KnnLevel,
    dataset: &Dataset,
) -> Result<LevelReport, EvalError> {
    let name = format!("knn {} (k={})", knn.model, knn.k);
    let examples =
        load_examples(Path::new(&knn.examples)).map_err(|error| EvalError::KnnExamples { level, error })?;
    let (tickets, excluded) = held_out(&dataset.tickets, &examples);
    let tickets: Vec<Ticket> = tickets.into_iter().cloned().collect();
    let mut one = config.clone();
    let mut uc = config.use_cases[use_case].clone();
    uc.chain = vec![ChainLevel::Knn(knn.clone())];
    one.use_cases = BTreeMap::from([(EVAL_USE_CASE.to_owned(), uc)]);
    let client = LlmClient::new(one, ResourceBroker::new()).map_err(|source| EvalError::Client {
        level,
        model: name.clone(),
        error: Box::new(source),
    })?;
    let warm_up = Instant::now();
    let _ = client
        .complete(EVAL_USE_CASE, prompt::request(EVAL_USE_CASE, "warm-up"))
        .await;
    let warm_up_ms = warm_up.elapsed().as_millis();
    let (mut predictions, mut error_kinds) = (Vec::with_capacity(tickets.len()), BTreeMap::new());
    let (mut answered, mut micros) = (0usize, 0u64);
    for t in &tickets {
        let start = Instant::now();
        match client
            .complete(EVAL_USE_CASE, prompt::request(EVAL_USE_CASE, &t.text))
            .await
        {
            Ok(answer) => {
                answered += 1;
                micros =
                    micros.saturating_add(u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX));
                let text = answer
                    .response()
                    .and_then(|r| r.choices.first())
                    .map(|c| c.message.text())
                    .unwrap_or_default();
                predictions.push(prompt::parse_label(&text, LABELS).map(str::to_owned));
            }
            Err(e) => {
                *error_kinds.entry(e.label().to_owned()).or_insert(0usize) += 1;
                predictions.push(None);
            }
        }
    }
    let mut r = LevelReport::scored(level, LevelKind::Knn, name, &tickets, &predictions);
    r.note = Some(format!(
        "held out: scored {} of {} tickets ({excluded} are among its {} examples, not scored); \
         first call (embeds the examples) {warm_up_ms} ms",
        tickets.len(),
        dataset.tickets.len(),
        examples.len()
    ));
    r.errors = error_kinds.values().sum();
    r.error_kinds = error_kinds;
    r.mean_latency_ms = (answered > 0).then(|| micros_f64(micros) / count_f64(answered) / 1_000.0);
    r.spent_micro_usd = Some(client.snapshot().spent_micro_usd);
    Ok(r)
}

/// `a / b`, 0 when `b` is 0.
fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 {
        0.0
    } else {
        count_f64(a) / count_f64(b)
    }
}

/// A count (of tickets, calls) as `f64`: exact up to `u32::MAX`, far above
/// any dataset, and saturating there rather than wrapping.
fn count_f64(n: usize) -> f64 {
    f64::from(u32::try_from(n).unwrap_or(u32::MAX))
}

/// Microseconds (of latency, or micro-USD) as `f64`: exact below 2^53,
/// years of latency or billions of dollars.
#[allow(clippy::cast_precision_loss)]
pub(crate) fn micros_f64(micros: u64) -> f64 {
    micros as f64
}

/// Sets the latency figures of `r` from the latencies of its answered
/// calls, in microseconds: mean, p50 and p95 (`None` when none answered).
fn set_latencies(r: &mut LevelReport, mut micros: Vec<u64>) {
    let ms = |m: u64| micros_f64(m) / 1_000.0;
    let total = micros.iter().fold(0u64, |a, m| a.saturating_add(*m));
    r.mean_latency_ms = (!micros.is_empty()).then(|| micros_f64(total) / count_f64(micros.len()) / 1_000.0);
    micros.sort_unstable();
    r.p50_latency_ms = percentile(&micros, 50).map(ms);
    r.p95_latency_ms = percentile(&micros, 95).map(ms);
}

/// The `p`th percentile of the sorted `values` by nearest rank (the
/// smallest value with at least `p` % of the values at or below it); `None`
/// when there is none.
fn percentile(sorted: &[u64], p: usize) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticket(id: &str, text: &str, label: &str) -> Ticket {
        Ticket {
            id: id.into(),
            text: text.into(),
            label: label.into(),
        }
    }

    #[test]
    fn scores_coverage_precision_and_accuracy() {
        let tickets = vec![
            ticket("1", "a", "billing"),
            ticket("2", "b", "billing"),
            ticket("3", "c", "shipping"),
            ticket("4", "d", "shipping"),
        ];
        let p = vec![
            Some("billing".into()),
            Some("shipping".into()),
            None,
            Some("shipping".into()),
        ];
        let r = LevelReport::scored(0, LevelKind::Rules, "r".into(), &tickets, &p);
        assert_eq!((r.total, r.labelled, r.correct), (4, 3, 2));
        assert!((r.accuracy - 0.5).abs() < 1e-9);
        assert!((r.coverage - 0.75).abs() < 1e-9);
        assert!((r.precision - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(r.per_class["billing"], ClassScore { total: 2, correct: 1 });
        assert_eq!(r.per_class["shipping"], ClassScore { total: 2, correct: 1 });
        assert_eq!(r.per_class["cancellation"], ClassScore::default());
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        assert_eq!(percentile(&[], 50), None);
        assert_eq!(percentile(&[7], 50), Some(7));
        assert_eq!(percentile(&[7], 95), Some(7));
        let v: Vec<u64> = (1..=20).collect();
        assert_eq!(percentile(&v, 50), Some(10));
        assert_eq!(percentile(&v, 95), Some(19));
        assert_eq!(percentile(&v, 100), Some(20));
        assert_eq!(percentile(&[1, 2, 3], 50), Some(2));
        assert_eq!(percentile(&[1, 2, 3], 95), Some(3));
    }
}
