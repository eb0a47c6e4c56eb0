//! The configuration of the LLM pipeline: the gateway's `gateway.llm` key.
//!
//! ```json
//! {
//!   "providers": { "openai": { "baseUrl": "https://api.openai.com/v1", "apiKeyEnv": "OPENAI_API_KEY" } },
//!   "models": [
//!     { "provider": "openai", "model": "gpt-4o",
//!       "limits": { "requestsPerMinute": 500, "inputTokensPerMinute": 30000 },
//!       "context": { "contextTokens": 128000, "maxOutputTokens": 16384 },
//!       "price": { "inputMicroUsdPer1M": 2500000, "outputMicroUsdPer1M": 10000000 } },
//!     { "provider": "openai", "model": "text-embedding-3-small", "kind": "embedding",
//!       "maxInputTokens": 8191, "limits": { "inputTokensPerMinute": 1000000 },
//!       "price": { "inputMicroUsdPer1M": 20000 } }
//!   ],
//!   "rules": { "keyword": [ { "keywords": ["refund"], "answer": "See /refunds", "label": "refund" } ] },
//!   "useCases": {
//!     "support": { "chain": [ {"model": "openai/gpt-4o"}, {"rules": "keyword"}, {"manualQueue": true} ],
//!                  "priority": "interactive", "retry": { "maxAttempts": 3 } },
//!     "search": { "chain": [ {"model": "openai/text-embedding-3-small"} ] }
//!   },
//!   "breaker": { "failureRateThreshold": 0.5 }
//! }
//! ```
//!
//! A provider of `"kind": "local"` runs a sentence-transformers embedding
//! model in process instead of calling a server:
//!
//! ```json
//! {
//!   "providers": { "local": { "kind": "local", "modelDir": "models/all-minilm-l6-v2" } },
//!   "models": [ { "provider": "local", "model": "all-minilm-l6-v2", "kind": "embedding" } ],
//!   "useCases": {
//!     "triage": { "chain": [ {"model": "openai/gpt-4o"},
//!                            {"knn": {"examples": "knn-examples.jsonl", "model": "local/all-minilm-l6-v2", "k": 5}},
//!                            {"rules": "keyword"}, {"manualQueue": true} ] }
//!   }
//! }
//! ```
//!
//! Its models are embedding models, served through the same limiter,
//! breaker, retries and metrics as a remote provider's; a `knn` level
//! ([`KnnLevel`]) uses one to label a chat request by its nearest labelled
//! examples (see [`crate::pipeline::knn`]).
//!
//! A model is a chat model unless it says `"kind": "embedding"`; an
//! embedding model has no `context` (it produces no output) and may set
//! `maxInputTokens`, its price is `inputMicroUsdPer1M` alone. A use case
//! serves the kind of its models: its chain may not mix kinds, and an
//! embedding chain holds model levels only (validation refuses `knn`,
//! `rules` and `manualQueue` levels there, since they answer chat requests).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use pressure_core::{Limits, Priority};
use serde::{Deserialize, Serialize};

use super::fallback::KeywordRule;
use super::pool::{check_pool, PoolMember};
use crate::breaker::BreakerConfig;
use crate::price::ModelPrice;
use crate::provider::ProviderKind;
pub use crate::provider::ProviderSettings;
use crate::reservation::ModelLimits;
use crate::retry::RetryPolicy;

/// Default total budget of an `interactive` use case.
pub const DEFAULT_INTERACTIVE_TOTAL_MS: u64 = 15_000;
/// Default total budget of a `batch` use case.
pub const DEFAULT_BATCH_TOTAL_MS: u64 = 120_000;

/// The whole LLM configuration (`gateway.llm`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LlmConfig {
    /// Providers by name (the name is used in resource ids, so no `:`).
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderSettings>,
    /// The models that chains may name as `"provider/model"`.
    #[serde(default)]
    pub models: Vec<ModelConfig>,
    /// Keyword rule sets by name, each registered as a `rules` handler.
    #[serde(default)]
    pub rules: BTreeMap<String, Vec<KeywordRule>>,
    /// Use cases by name.
    #[serde(default)]
    pub use_cases: BTreeMap<String, UseCaseConfig>,
    /// Circuit breaker settings, one breaker per (provider, model).
    #[serde(default)]
    pub breaker: BreakerConfig,
}

/// One (provider, model) with its quota, context window and price.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelConfig {
    /// Key of `providers`.
    pub provider: String,
    /// The provider's model name, sent as the request's `model`.
    pub model: String,
    /// The provider's quota for this model, enforced by the broker on
    /// `llm:<provider>:<model>`. Absent: the model is not limited locally
    /// (no resource is registered and calls reserve nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// What the model serves: `chat` (default) or `embedding`.
    #[serde(default, skip_serializing_if = "ModelKind::is_chat")]
    pub kind: ModelKind,
    /// Context window and output limits; required for a chat model, absent
    /// for an embedding model (which takes `maxInputTokens`).
    #[serde(default = "unset_context", skip_serializing_if = "is_unset_context")]
    pub context: ModelLimits,
    /// Embedding models: the most tokens one input may have (OpenAI's
    /// `text-embedding-3-*`: 8191). An input above it fits no level and is
    /// refused with 400 before any call; absent: not checked locally.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_input_tokens: Option<u64>,
    /// Price per 1M tokens (for the retry money budget and the spend figures).
    #[serde(default)]
    pub price: ModelPrice,
    /// Share of every limit kept free of batch use cases (0 ≤ h < 1; absent:
    /// [`DEFAULT_BATCH_HEADROOM`]): a `batch` use case may only use
    /// `1 − batchHeadroom` of each limit of `limits`, so interactive use
    /// cases still find capacity when batch traffic saturates the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_headroom: Option<f64>,
}

/// What a model serves: the endpoint its use cases answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// Chat completions (`POST /v1/chat/completions`).
    #[default]
    Chat,
    /// Embeddings (`POST /v1/embeddings`).
    Embedding,
}

impl ModelKind {
    /// `chat` or `embedding`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Embedding => "embedding",
        }
    }

    /// Whether this is the default kind (kept out of serialised configs).
    pub fn is_chat(&self) -> bool {
        *self == Self::Chat
    }
}

/// The `context` of a model that gives none (valid only for embedding models).
fn unset_context() -> ModelLimits {
    ModelLimits::new(0, 0)
}

fn is_unset_context(c: &ModelLimits) -> bool {
    *c == unset_context()
}

/// The batch headroom of a model that sets none.
pub const DEFAULT_BATCH_HEADROOM: f64 = 0.2;

impl ModelConfig {
    /// `provider/model`, how chains name it.
    pub fn key(&self) -> String {
        format!("{}/{}", self.provider, self.model)
    }

    /// `batchHeadroom`, or [`DEFAULT_BATCH_HEADROOM`].
    pub fn batch_headroom(&self) -> f64 {
        self.batch_headroom.unwrap_or(DEFAULT_BATCH_HEADROOM)
    }
}

/// One level of a fallback chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum ChainLevel {
    /// `{"model": "provider/model"}`: a call to that model.
    Model(String),
    /// `{"pool": [{"model": "provider/model", "weight": 2}, ...]}`: a call
    /// to one of 2 to 16 deployments of a model, each with its own limits
    /// and breaker: the first, in weighted round robin, that admits the
    /// attempt now; another one after a transient failure
    /// (docs/llm.md#deployment-pools).
    Pool(Vec<PoolMember>),
    /// `{"knn": {"examples", "model", "k"}}`: the label most of the `k`
    /// labelled examples nearest to the request's last user message vote
    /// for, by the cosine of a local embedding model's vectors (see
    /// [`KnnLevel`]). It makes no remote call, so it answers while every
    /// provider is down; its answer is a completion whose content is the
    /// label (degradation `knn`).
    Knn(KnnLevel),
    /// `{"rules": "name"}`: the non-LLM handler registered under that name.
    Rules(String),
    /// `{"manualQueue": true}`: park the request for a person.
    ManualQueue(bool),
}

impl ChainLevel {
    /// The `provider/model` keys a model level or a pool level calls
    /// (none for the other levels).
    pub fn model_keys(&self) -> impl Iterator<Item = &str> {
        let (one, pool): (Option<&str>, &[PoolMember]) = match self {
            Self::Model(key) => (Some(key.as_str()), &[]),
            Self::Pool(members) => (None, members.as_slice()),
            _ => (None, &[]),
        };
        one.into_iter().chain(pool.iter().map(|m| m.model.as_str()))
    }

    /// Whether the level calls a model (a model level or a pool).
    pub fn calls_model(&self) -> bool {
        matches!(self, Self::Model(_) | Self::Pool(_))
    }
}

/// A `knn` chain level: a nearest-neighbour classifier over labelled
/// examples, answering with a label (for classification use cases such as
/// ticket triage). Its request embedding goes through the model's limiter,
/// breaker, retries and metrics like any call of that model; the examples'
/// vectors are computed once, at the level's first use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KnnLevel {
    /// The labelled examples: a JSONL file, one `{"text", "label"}` object a
    /// line (other fields, such as `id`, are ignored; blank lines are
    /// skipped). Read when the client is built. In a gateway config file a
    /// relative name is relative to the file's directory.
    pub examples: String,
    /// The embedding model: `provider/model` of `models`, an `embedding`
    /// model on a `local` provider (so the level never waits on a remote
    /// one).
    pub model: String,
    /// How many nearest examples vote (default 5). The label with the most
    /// votes wins; a tie goes to the label whose voters are the more
    /// similar in sum, then to the label first in alphabetical order.
    #[serde(default = "default_knn_k")]
    pub k: u32,
}

/// `k` of a `knn` level that sets none.
pub const DEFAULT_KNN_K: u32 = 5;

fn default_knn_k() -> u32 {
    DEFAULT_KNN_K
}

/// The priority class of a use case.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum UseCasePriority {
    /// A person is waiting (default total 15 s).
    #[default]
    Interactive,
    /// Background work (default total 120 s).
    Batch,
}

impl UseCasePriority {
    /// The broker's priority class.
    pub(crate) fn broker_priority(self) -> Priority {
        match self {
            Self::Interactive => Priority::Interactive,
            Self::Batch => Priority::Batch,
        }
    }

    /// The default total budget of the class.
    pub fn default_total_ms(self) -> u64 {
        match self {
            Self::Interactive => DEFAULT_INTERACTIVE_TOTAL_MS,
            Self::Batch => DEFAULT_BATCH_TOTAL_MS,
        }
    }
}

/// One use case: its chain, deadline, priority and retry policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UseCaseConfig {
    /// The fallback chain, primary first.
    pub chain: Vec<ChainLevel>,
    /// The one deadline of an event, covering every retry and fallback;
    /// absent: 15 000 (interactive) or 120 000 (batch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_ms: Option<u64>,
    /// Priority class (broker reservations and the default deadline).
    #[serde(default)]
    pub priority: UseCasePriority,
    /// Retry policy per model level (the money budget covers the whole event).
    #[serde(default)]
    pub retry: RetryPolicy,
    /// Provider model ids that name this use case too (coding agents send
    /// `claude-sonnet-4-5-20250929` or `gpt-5-codex`, not a use case):
    /// exact ids, or patterns where `*` stands for any run of characters
    /// (`claude-*`). A use case's own name wins, then an exact alias, then
    /// the pattern with the most characters besides `*`; an id matching
    /// none is the dialect's 404.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
}

/// The longest model id or alias that is looked up: a longer one names no
/// use case (a hostile id costs a bounded match).
pub const MAX_MODEL_ID_BYTES: usize = 256;

/// Whether `text` matches `pattern`, where `*` matches any run of
/// characters (none included) and every other character itself. Linear in
/// `text` per literal piece of the pattern: the pieces are found greedily
/// left to right, which is exact for `*`-only globs.
pub(crate) fn alias_matches(pattern: &str, text: &str) -> bool {
    let mut pieces = pattern.split('*');
    let Some(first) = pieces.next() else {
        return text.is_empty();
    };
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let pieces: Vec<&str> = pieces.collect();
    let Some((last, middle)) = pieces.split_last() else {
        // No `*`: the whole text must be the pattern.
        return rest.is_empty();
    };
    for piece in middle {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

impl UseCaseConfig {
    /// The total budget of one event.
    pub fn total(&self) -> Duration {
        Duration::from_millis(self.total_ms.unwrap_or_else(|| self.priority.default_total_ms()))
    }
}

/// A configuration error at a JSON path such as `useCases.support.chain[0].model`:
/// the workspace's one [`FieldError`](pressure_core::FieldError).
pub type ConfigError = pressure_core::FieldError;

impl LlmConfig {
    /// Checks every cross-reference and value; the first problem is returned.
    ///
    /// `rules` levels may name a handler registered in code
    /// ([`LlmClient::with_handler`](super::LlmClient::with_handler)), so an
    /// unknown rules name is not an error here; the client skips a level
    /// whose handler is missing (and logs it).
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, p) in &self.providers {
            let path = format!("providers.{name}");
            if name.is_empty() || name.contains(':') || name.contains('/') {
                return Err(ConfigError::new(
                    path,
                    "provider name must be non-empty without ':' or '/'",
                ));
            }
            check_provider(p, &path)?;
        }
        let mut keys = BTreeSet::new();
        for (i, m) in self.models.iter().enumerate() {
            self.check_model(m, &format!("models[{i}]"), &mut keys)?;
        }
        for (name, rules) in &self.rules {
            for (i, r) in rules.iter().enumerate() {
                if r.keywords.iter().all(|k| k.trim().is_empty()) {
                    return Err(ConfigError::new(
                        format!("rules.{name}[{i}].keywords"),
                        "needs at least one non-empty keyword",
                    ));
                }
            }
        }
        for (name, uc) in &self.use_cases {
            self.check_use_case(name, uc, &keys)?;
        }
        self.breaker.validate().map_err(|e| e.under("breaker"))
    }

    /// Checks the model `m` at `path` (`models[i]`) and adds its key to
    /// `keys` (the models before it): a known provider, a name, no
    /// duplicate, valid limits and headroom, the fields of its kind, and a
    /// kind its provider serves.
    fn check_model(
        &self,
        m: &ModelConfig,
        path: &str,
        keys: &mut BTreeSet<String>,
    ) -> Result<(), ConfigError> {
        if !self.providers.contains_key(&m.provider) {
            return Err(ConfigError::new(
                format!("{path}.provider"),
                format!("unknown provider {:?}", m.provider),
            ));
        }
        if m.model.is_empty() {
            return Err(ConfigError::new(format!("{path}.model"), "must not be empty"));
        }
        if !keys.insert(m.key()) {
            return Err(ConfigError::new(path, format!("duplicate model {:?}", m.key())));
        }
        if let Some(Err(e)) = m.limits.as_ref().map(Limits::compile) {
            let field = match e.field {
                "limits" => format!("{path}.limits"),
                f => format!("{path}.limits.{f}"),
            };
            return Err(ConfigError::new(field, e.problem));
        }
        if !(0.0..1.0).contains(&m.batch_headroom()) {
            return Err(ConfigError::new(
                format!("{path}.batchHeadroom"),
                "must be at least 0 and below 1",
            ));
        }
        match m.kind {
            ModelKind::Chat => check_chat_model(m, path)?,
            ModelKind::Embedding => check_embedding_model(m, path)?,
        }
        let provider_kind = self.providers.get(&m.provider).map(|p| p.kind);
        if m.kind != ModelKind::Embedding && provider_kind == Some(ProviderKind::Local) {
            return Err(ConfigError::new(
                format!("{path}.kind"),
                format!(
                    "provider {:?} runs a local embedding model: its models must be \"kind\": \"embedding\"",
                    m.provider
                ),
            ));
        }
        if m.kind == ModelKind::Embedding && provider_kind == Some(ProviderKind::Anthropic) {
            return Err(ConfigError::new(
                format!("{path}.kind"),
                format!(
                    "provider {:?} speaks Anthropic's Messages API, which has no embeddings endpoint",
                    m.provider
                ),
            ));
        }
        Ok(())
    }

    /// Checks the use case `name`: a chain whose levels name what exists
    /// (`keys`: the models) and end with the manual queue if they hold it,
    /// of one kind of model, its aliases, its budget and its retry policy.
    fn check_use_case(
        &self,
        name: &str,
        uc: &UseCaseConfig,
        keys: &BTreeSet<String>,
    ) -> Result<(), ConfigError> {
        let path = format!("useCases.{name}");
        if uc.chain.is_empty() {
            return Err(ConfigError::new(format!("{path}.chain"), "must not be empty"));
        }
        for (i, level) in uc.chain.iter().enumerate() {
            let lp = format!("{path}.chain[{i}]");
            match level {
                ChainLevel::Model(key) if !keys.contains(key) => {
                    return Err(ConfigError::new(
                        format!("{lp}.model"),
                        format!("unknown model {key:?} (expected \"provider/model\" of `models`)"),
                    ));
                }
                ChainLevel::Pool(members) => check_pool(members, &format!("{lp}.pool"), keys)?,
                ChainLevel::Knn(knn) => self.check_knn(knn, &format!("{lp}.knn"))?,
                ChainLevel::Rules(r) if r.is_empty() => {
                    return Err(ConfigError::new(format!("{lp}.rules"), "must not be empty"));
                }
                ChainLevel::ManualQueue(false) => {
                    return Err(ConfigError::new(format!("{lp}.manualQueue"), "must be true"));
                }
                ChainLevel::ManualQueue(true) if i + 1 != uc.chain.len() => {
                    return Err(ConfigError::new(
                        format!("{lp}.manualQueue"),
                        "the manual queue always answers: it must be the last level",
                    ));
                }
                _ => {}
            }
        }
        self.check_chain_kind(name, uc)?;
        self.check_aliases(name, uc, &path)?;
        if uc.total_ms == Some(0) {
            return Err(ConfigError::new(format!("{path}.totalMs"), "must be > 0"));
        }
        if let Err(e) = uc.retry.validate() {
            return Err(ConfigError::new(format!("{path}.retry"), e.to_string()));
        }
        Ok(())
    }

    /// Checks the aliases of the use case `name` (at `path`): 1 to
    /// [`MAX_MODEL_ID_BYTES`] bytes without whitespace, and an exact alias
    /// neither a use case's own name nor another use case's alias.
    fn check_aliases(&self, name: &str, uc: &UseCaseConfig, path: &str) -> Result<(), ConfigError> {
        for (i, alias) in uc.aliases.iter().enumerate() {
            let ap = format!("{path}.aliases[{i}]");
            if alias.is_empty() || alias.len() > MAX_MODEL_ID_BYTES {
                return Err(ConfigError::new(
                    ap,
                    format!("must be 1 to {MAX_MODEL_ID_BYTES} bytes"),
                ));
            }
            if alias.chars().any(char::is_whitespace) {
                return Err(ConfigError::new(ap, "must not contain whitespace"));
            }
            if !alias.contains('*') {
                if self.use_cases.contains_key(alias) {
                    return Err(ConfigError::new(
                        ap,
                        format!("{alias:?} is a use case's own name"),
                    ));
                }
                let other = self
                    .use_cases
                    .iter()
                    .find(|(n, u)| *n != name && u.aliases.contains(alias));
                if let Some((other, _)) = other {
                    return Err(ConfigError::new(
                        ap,
                        format!("{alias:?} is also an alias of use case {other:?}"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The use case a request's `model` names: a use case of that name;
    /// else the one listing it as an exact alias; else the one whose `*`
    /// pattern matching it is the most specific (the most characters besides
    /// `*`; on a tie, the first use case by name). `None`: no use case (the
    /// dialect's 404), also for an id longer than [`MAX_MODEL_ID_BYTES`].
    pub fn resolve_use_case<'a>(&'a self, model: &'a str) -> Option<&'a str> {
        if let Some((name, _)) = self.use_cases.get_key_value(model) {
            return Some(name);
        }
        if model.len() > MAX_MODEL_ID_BYTES {
            return None;
        }
        let mut best: Option<(&str, usize)> = None;
        for (name, uc) in &self.use_cases {
            for alias in &uc.aliases {
                if !alias.contains('*') {
                    if alias == model {
                        return Some(name);
                    }
                    continue;
                }
                let specificity = alias.chars().filter(|c| *c != '*').count();
                if alias_matches(alias, model) && best.is_none_or(|(_, s)| specificity > s) {
                    best = Some((name, specificity));
                }
            }
        }
        best.map(|(name, _)| name)
    }

    /// The configured model `provider/model`, if any.
    pub fn model(&self, key: &str) -> Option<&ModelConfig> {
        self.models.iter().find(|m| m.key() == key)
    }

    /// What the use case `name` serves: the kind of its model levels
    /// (validation keeps them alike); `chat` for a chain without model
    /// levels (rules and the manual queue answer chat requests); `None` for
    /// an unknown use case.
    pub fn use_case_kind(&self, name: &str) -> Option<ModelKind> {
        let uc = self.use_cases.get(name)?;
        let kind = uc
            .chain
            .iter()
            .flat_map(ChainLevel::model_keys)
            .find_map(|key| self.model(key).map(|m| m.kind));
        Some(kind.unwrap_or_default())
    }

    /// A `knn` level names an embedding model of a `local` provider, a
    /// non-empty examples file and `k` ≥ 1 (the file itself is read when
    /// the client is built).
    fn check_knn(&self, knn: &KnnLevel, path: &str) -> Result<(), ConfigError> {
        if knn.examples.trim().is_empty() {
            return Err(ConfigError::new(format!("{path}.examples"), "must not be empty"));
        }
        let Some(m) = self.model(&knn.model) else {
            return Err(ConfigError::new(
                format!("{path}.model"),
                format!(
                    "unknown model {:?} (expected \"provider/model\" of `models`)",
                    knn.model
                ),
            ));
        };
        if m.kind != ModelKind::Embedding {
            return Err(ConfigError::new(
                format!("{path}.model"),
                format!(
                    "{:?} is a chat model; the knn level needs an embedding model",
                    knn.model
                ),
            ));
        }
        if self.providers.get(&m.provider).map(|p| p.kind) != Some(ProviderKind::Local) {
            return Err(ConfigError::new(
                format!("{path}.model"),
                format!(
                    "{:?} is not on a local provider: the knn level embeds in process, so that it answers while remote providers are down",
                    knn.model
                ),
            ));
        }
        if knn.k == 0 {
            return Err(ConfigError::new(format!("{path}.k"), "must be at least 1"));
        }
        Ok(())
    }

    /// Every model level of a chain has the same kind, and an embedding
    /// chain holds model levels only: `rules` and `manualQueue` produce chat
    /// answers, so they are refused here rather than skipped at run time.
    fn check_chain_kind(&self, name: &str, uc: &UseCaseConfig) -> Result<(), ConfigError> {
        let path = format!("useCases.{name}");
        let mut first: Option<(usize, ModelKind)> = None;
        for (i, level) in uc.chain.iter().enumerate() {
            for (j, key) in level.model_keys().enumerate() {
                let Some(kind) = self.model(key).map(|m| m.kind) else {
                    continue;
                };
                let at = match level {
                    ChainLevel::Pool(_) => format!("{path}.chain[{i}].pool[{j}].model"),
                    _ => format!("{path}.chain[{i}].model"),
                };
                check_same_kind(&mut first, (i, kind), key, at)?;
            }
        }
        if let Some((_, ModelKind::Embedding)) = first {
            if let Some(i) = uc.chain.iter().position(|l| !l.calls_model()) {
                return Err(ConfigError::new(
                    format!("{path}.chain[{i}]"),
                    "an embedding use case takes model levels only (knn, rules and manualQueue answer chat requests)",
                ));
            }
        }
        Ok(())
    }
}

/// Notes the kind of `key` at `at` (chain level `level.0`) in `first`,
/// the kind of the chain's first model: an error when they differ.
fn check_same_kind(
    first: &mut Option<(usize, ModelKind)>,
    level: (usize, ModelKind),
    key: &str,
    at: String,
) -> Result<(), ConfigError> {
    let (i, kind) = level;
    match *first {
        None => *first = Some((i, kind)),
        Some((j, k)) if k != kind => {
            return Err(ConfigError::new(
                at,
                format!(
                    "{key:?} is an {} model but chain[{j}] is a {} model: a chain serves one kind",
                    kind.as_str(),
                    k.as_str()
                ),
            ));
        }
        Some(_) => {}
    }
    Ok(())
}

/// A remote provider needs its `baseUrl` and takes no `modelDir`; a
/// `local` one needs its `modelDir` (and the `local-models` feature) and
/// takes no `baseUrl` or key.
fn check_provider(p: &ProviderSettings, path: &str) -> Result<(), ConfigError> {
    if p.kind != ProviderKind::Local {
        if p.base_url.trim().is_empty() {
            return Err(ConfigError::new(format!("{path}.baseUrl"), "must not be empty"));
        }
        if p.model_dir.is_some() {
            return Err(ConfigError::new(
                format!("{path}.modelDir"),
                "only for a provider of \"kind\": \"local\"",
            ));
        }
        return Ok(());
    }
    if !cfg!(feature = "local-models") {
        return Err(ConfigError::new(
            format!("{path}.kind"),
            "this build runs no local models: build pressure with `--features local-models` (cargo build --release -p pressure-cli --features local-models)",
        ));
    }
    if p.model_dir.as_deref().is_none_or(|d| d.trim().is_empty()) {
        return Err(ConfigError::new(
            format!("{path}.modelDir"),
            "required for a local provider: the directory of a sentence-transformers model",
        ));
    }
    if !p.base_url.is_empty() {
        return Err(ConfigError::new(
            format!("{path}.baseUrl"),
            "a local provider has none (its model runs in process)",
        ));
    }
    if p.api_key_env.is_some() {
        return Err(ConfigError::new(
            format!("{path}.apiKeyEnv"),
            "a local provider takes no key",
        ));
    }
    Ok(())
}

/// A chat model needs its context window and output limit.
fn check_chat_model(m: &ModelConfig, path: &str) -> Result<(), ConfigError> {
    if is_unset_context(&m.context) {
        return Err(ConfigError::new(
            format!("{path}.context"),
            "required for a chat model ({\"contextTokens\", \"maxOutputTokens\"})",
        ));
    }
    if m.context.context_tokens == 0 {
        return Err(ConfigError::new(
            format!("{path}.context.contextTokens"),
            "must be > 0",
        ));
    }
    if m.context.max_output_tokens == 0 || m.context.max_output_tokens > m.context.context_tokens {
        return Err(ConfigError::new(
            format!("{path}.context.maxOutputTokens"),
            "must be > 0 and at most contextTokens",
        ));
    }
    if m.max_input_tokens.is_some() {
        return Err(ConfigError::new(
            format!("{path}.maxInputTokens"),
            "only for embedding models (a chat model's window is context.contextTokens)",
        ));
    }
    Ok(())
}

/// An embedding model has no output: no `context`, an optional `maxInputTokens`.
fn check_embedding_model(m: &ModelConfig, path: &str) -> Result<(), ConfigError> {
    if !is_unset_context(&m.context) {
        return Err(ConfigError::new(
            format!("{path}.context"),
            "not for an embedding model (it has no output); use maxInputTokens",
        ));
    }
    if m.max_input_tokens == Some(0) {
        return Err(ConfigError::new(format!("{path}.maxInputTokens"), "must be > 0"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(models: serde_json::Value, use_cases: serde_json::Value) -> LlmConfig {
        serde_json::from_value(serde_json::json!({
            "providers": { "p": { "baseUrl": "http://127.0.0.1:1/v1" } },
            "models": models,
            "useCases": use_cases,
        }))
        .expect("parses")
    }

    fn models() -> serde_json::Value {
        serde_json::json!([
            { "provider": "p", "model": "chat", "context": { "contextTokens": 100, "maxOutputTokens": 10 } },
            { "provider": "p", "model": "emb", "kind": "embedding", "maxInputTokens": 50,
              "price": { "inputMicroUsdPer1M": 20000 } },
            { "provider": "p", "model": "emb2", "kind": "embedding" }
        ])
    }

    fn problem(cfg: &LlmConfig) -> Option<String> {
        cfg.validate().err().map(|e| e.path)
    }

    #[test]
    fn embedding_models_need_no_context_and_chains_serve_one_kind() {
        let ok = config(
            models(),
            serde_json::json!({ "search": { "chain": [ {"model": "p/emb"}, {"model": "p/emb2"} ] },
                                "chat": { "chain": [ {"model": "p/chat"}, {"manualQueue": true} ] } }),
        );
        assert_eq!(problem(&ok), None);
        assert_eq!(ok.use_case_kind("search"), Some(ModelKind::Embedding));
        assert_eq!(ok.use_case_kind("chat"), Some(ModelKind::Chat));
        assert_eq!(ok.use_case_kind("nope"), None);

        let mixed = config(
            models(),
            serde_json::json!({ "m": { "chain": [ {"model": "p/emb"}, {"model": "p/chat"} ] } }),
        );
        assert_eq!(problem(&mixed).as_deref(), Some("useCases.m.chain[1].model"));
        let queued = config(
            models(),
            serde_json::json!({ "m": { "chain": [ {"model": "p/emb"}, {"manualQueue": true} ] } }),
        );
        assert_eq!(problem(&queued).as_deref(), Some("useCases.m.chain[1]"));
    }

    #[test]
    fn aliases_name_use_cases_exactly_then_by_the_most_specific_pattern() {
        let cfg = config(
            models(),
            serde_json::json!({
                "coding": { "chain": [ {"model": "p/chat"} ], "aliases": ["claude-*", "gpt-5*", "*codex*"] },
                "haiku": { "chain": [ {"model": "p/chat"} ], "aliases": ["claude-haiku-*", "claude-3-5-haiku-20241022"] },
                "claude-sonnet-4-5": { "chain": [ {"model": "p/chat"} ] }
            }),
        );
        assert_eq!(problem(&cfg), None);
        let r = |m: &'static str| cfg.resolve_use_case(m);
        assert_eq!(r("coding"), Some("coding"));
        assert_eq!(
            r("claude-sonnet-4-5"),
            Some("claude-sonnet-4-5"),
            "a use case's own name first"
        );
        assert_eq!(r("claude-sonnet-4-5-20250929"), Some("coding"));
        assert_eq!(r("claude-haiku-4-5"), Some("haiku"), "the more specific pattern");
        assert_eq!(r("claude-3-5-haiku-20241022"), Some("haiku"), "an exact alias");
        assert_eq!(r("gpt-5-codex"), Some("coding"));
        assert_eq!(r("o3-codex-mini"), Some("coding"));
        assert_eq!(r("gpt-4o"), None);
        assert_eq!(r(""), None);
        let long = format!("claude-{}", "x".repeat(MAX_MODEL_ID_BYTES));
        assert_eq!(cfg.resolve_use_case(&long), None, "a hostile id names nothing");

        for (aliases, path) in [
            (serde_json::json!([""]), "useCases.a.aliases[0]"),
            (serde_json::json!(["ok", "has space"]), "useCases.a.aliases[1]"),
            (serde_json::json!(["b"]), "useCases.a.aliases[0]"),
            (serde_json::json!(["same"]), "useCases.a.aliases[0]"),
        ] {
            let bad = config(
                models(),
                serde_json::json!({
                    "a": { "chain": [ {"model": "p/chat"} ], "aliases": aliases },
                    "b": { "chain": [ {"model": "p/chat"} ], "aliases": ["same"] }
                }),
            );
            assert_eq!(problem(&bad).as_deref(), Some(path), "{aliases}");
        }
    }

    #[test]
    fn star_patterns_match_like_globs() {
        for (p, t, want) in [
            ("*", "", true),
            ("*", "anything", true),
            ("a*", "a", true),
            ("a*b", "ab", true),
            ("a*b", "axxb", true),
            ("a*b", "axxbc", false),
            ("*b*b", "bb", true),
            ("*b*b", "b", false),
            ("a**c", "ac", true),
            ("abc", "abc", true),
            ("abc", "abcd", false),
            ("*codex*", "gpt-5-codex", true),
            ("x*y*z", "xyz", true),
            ("x*y*z", "xzy", false),
        ] {
            assert_eq!(alias_matches(p, t), want, "{p:?} vs {t:?}");
        }
    }

    #[test]
    fn context_belongs_to_chat_models_only() {
        let no_context = config(
            serde_json::json!([{ "provider": "p", "model": "c" }]),
            serde_json::json!({}),
        );
        assert_eq!(problem(&no_context).as_deref(), Some("models[0].context"));
        let emb_context = config(
            serde_json::json!([{ "provider": "p", "model": "e", "kind": "embedding",
                                 "context": { "contextTokens": 100, "maxOutputTokens": 10 } }]),
            serde_json::json!({}),
        );
        assert_eq!(problem(&emb_context).as_deref(), Some("models[0].context"));
        let zero = config(
            serde_json::json!([{ "provider": "p", "model": "e", "kind": "embedding", "maxInputTokens": 0 }]),
            serde_json::json!({}),
        );
        assert_eq!(problem(&zero).as_deref(), Some("models[0].maxInputTokens"));
    }

    #[test]
    fn anthropic_has_no_embedding_models() {
        let cfg: LlmConfig = serde_json::from_value(serde_json::json!({
            "providers": { "claude": { "baseUrl": "http://127.0.0.1:1/v1", "kind": "anthropic" } },
            "models": [{ "provider": "claude", "model": "e", "kind": "embedding" }],
        }))
        .expect("parses");
        assert_eq!(problem(&cfg).as_deref(), Some("models[0].kind"));
    }

    /// A config with a remote provider `p`, a local provider `local`
    /// (`local_extra` merged into its settings), the models of
    /// [`models`] plus `local/minilm`, and `use_cases`.
    fn with_local(local_extra: serde_json::Value, use_cases: serde_json::Value) -> LlmConfig {
        let mut local = serde_json::json!({ "kind": "local", "modelDir": "models/minilm" });
        if let (Some(l), Some(extra)) = (local.as_object_mut(), local_extra.as_object()) {
            for (k, v) in extra {
                if v.is_null() {
                    l.remove(k);
                } else {
                    l.insert(k.clone(), v.clone());
                }
            }
        }
        let mut models = models();
        if let Some(m) = models.as_array_mut() {
            m.push(serde_json::json!({ "provider": "local", "model": "minilm", "kind": "embedding" }));
        }
        serde_json::from_value(serde_json::json!({
            "providers": { "p": { "baseUrl": "http://127.0.0.1:1/v1" }, "local": local },
            "models": models,
            "useCases": use_cases,
        }))
        .expect("parses")
    }

    fn knn(level: serde_json::Value) -> serde_json::Value {
        serde_json::json!({ "t": { "chain": [ {"model": "p/chat"}, {"knn": level}, {"manualQueue": true} ] } })
    }

    #[test]
    fn local_providers_take_a_model_dir_and_no_url_or_key() {
        let ok = with_local(serde_json::json!({}), serde_json::json!({}));
        if !cfg!(feature = "local-models") {
            assert_eq!(problem(&ok).as_deref(), Some("providers.local.kind"));
            return;
        }
        assert_eq!(problem(&ok), None);
        let cases = [
            (
                serde_json::json!({ "modelDir": null }),
                "providers.local.modelDir",
            ),
            (serde_json::json!({ "modelDir": " " }), "providers.local.modelDir"),
            (
                serde_json::json!({ "baseUrl": "http://h/v1" }),
                "providers.local.baseUrl",
            ),
            (
                serde_json::json!({ "apiKeyEnv": "KEY" }),
                "providers.local.apiKeyEnv",
            ),
        ];
        for (extra, path) in cases {
            let cfg = with_local(extra.clone(), serde_json::json!({}));
            assert_eq!(problem(&cfg).as_deref(), Some(path), "{extra}");
        }
        let mut remote_dir = with_local(serde_json::json!({}), serde_json::json!({}));
        if let Some(p) = remote_dir.providers.get_mut("p") {
            p.model_dir = Some("x".into());
        }
        assert_eq!(problem(&remote_dir).as_deref(), Some("providers.p.modelDir"));
        let mut chat_on_local = with_local(serde_json::json!({}), serde_json::json!({}));
        chat_on_local.models.push(ModelConfig {
            provider: "local".into(),
            ..chat_on_local.models[0].clone()
        });
        assert_eq!(problem(&chat_on_local).as_deref(), Some("models[4].kind"));
    }

    #[test]
    fn knn_levels_name_a_local_embedding_model_and_a_file() {
        if !cfg!(feature = "local-models") {
            return;
        }
        let level = |v: serde_json::Value| problem(&with_local(serde_json::json!({}), knn(v)));
        let ok = serde_json::json!({ "examples": "ex.jsonl", "model": "local/minilm" });
        assert_eq!(level(ok), None);
        let cases = [
            (
                serde_json::json!({ "examples": "", "model": "local/minilm" }),
                "useCases.t.chain[1].knn.examples",
            ),
            (
                serde_json::json!({ "examples": "e", "model": "local/nope" }),
                "useCases.t.chain[1].knn.model",
            ),
            (
                serde_json::json!({ "examples": "e", "model": "p/chat" }),
                "useCases.t.chain[1].knn.model",
            ),
            (
                serde_json::json!({ "examples": "e", "model": "p/emb" }),
                "useCases.t.chain[1].knn.model",
            ),
            (
                serde_json::json!({ "examples": "e", "model": "local/minilm", "k": 0 }),
                "useCases.t.chain[1].knn.k",
            ),
        ];
        for (v, path) in cases {
            assert_eq!(level(v.clone()).as_deref(), Some(path), "{v}");
        }
        // A knn level answers chat requests: not in an embedding chain.
        let emb = with_local(
            serde_json::json!({}),
            serde_json::json!({ "s": { "chain": [ {"model": "local/minilm"},
                {"knn": { "examples": "e", "model": "local/minilm" }} ] } }),
        );
        assert_eq!(problem(&emb).as_deref(), Some("useCases.s.chain[1]"));
        // k defaults to 5; unknown keys are refused by the shape.
        let parsed: ChainLevel = serde_json::from_value(
            serde_json::json!({ "knn": { "examples": "e", "model": "local/minilm" } }),
        )
        .expect("parses");
        assert_eq!(
            parsed,
            ChainLevel::Knn(KnnLevel {
                examples: "e".into(),
                model: "local/minilm".into(),
                k: DEFAULT_KNN_K
            })
        );
        assert!(serde_json::from_value::<ChainLevel>(
            serde_json::json!({ "knn": { "examples": "e", "model": "m", "kk": 1 } })
        )
        .is_err());
    }
}
