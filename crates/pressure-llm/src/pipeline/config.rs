//! The configuration of the LLM pipeline: the gateway's `gateway.llm` key.
//!
//! ```json
//! {
//!   "providers": { "openai": { "baseUrl": "https://api.openai.com/v1", "apiKeyEnv": "OPENAI_API_KEY" } },
//!   "models": [
//!     { "provider": "openai", "model": "gpt-4o",
//!       "limits": { "requestsPerMinute": 500, "inputTokensPerMinute": 30000 },
//!       "context": { "contextTokens": 128000, "maxOutputTokens": 16384 },
//!       "price": { "inputMicroUsdPer1M": 2500000, "outputMicroUsdPer1M": 10000000 } }
//!   ],
//!   "rules": { "keyword": [ { "keywords": ["refund"], "answer": "See /refunds", "label": "refund" } ] },
//!   "useCases": {
//!     "support": { "chain": [ {"model": "openai/gpt-4o"}, {"rules": "keyword"}, {"manualQueue": true} ],
//!                  "priority": "interactive", "retry": { "maxAttempts": 3 } }
//!   },
//!   "breaker": { "failureRateThreshold": 0.5 }
//! }
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use pressure_core::{Limits, Priority};
use serde::{Deserialize, Serialize};

use super::fallback::KeywordRule;
use crate::breaker::BreakerConfig;
use crate::price::ModelPrice;
use crate::provider::{ProviderConfig, ProviderKind, TimeoutsConfig};
use crate::reservation::ModelLimits;
use crate::retry::RetryPolicy;

/// Default total budget of an `interactive` use case.
pub const DEFAULT_INTERACTIVE_TOTAL_MS: u64 = 15_000;
/// Default total budget of a `batch` use case.
pub const DEFAULT_BATCH_TOTAL_MS: u64 = 120_000;

/// The whole LLM configuration (`gateway.llm`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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

/// One provider: a [`ProviderConfig`] whose name is its key in `providers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderSettings {
    /// The wire format: `openai` (default) or `anthropic`.
    #[serde(default, skip_serializing_if = "ProviderKind::is_openai")]
    pub kind: ProviderKind,
    /// The API root, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// The environment variable holding the API key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Per-attempt timeouts and the connection limit.
    #[serde(default)]
    pub timeouts: TimeoutsConfig,
}

impl ProviderSettings {
    /// The provider client configuration named `name`.
    pub fn to_provider_config(&self, name: &str) -> ProviderConfig {
        ProviderConfig {
            name: name.to_owned(),
            kind: self.kind,
            base_url: self.base_url.clone(),
            api_key_env: self.api_key_env.clone(),
            timeouts: self.timeouts,
        }
    }
}

/// One (provider, model) with its quota, context window and price.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Context window and output limits.
    pub context: ModelLimits,
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum ChainLevel {
    /// `{"model": "provider/model"}`: a call to that model.
    Model(String),
    /// `{"rules": "name"}`: the non-LLM handler registered under that name.
    Rules(String),
    /// `{"manualQueue": true}`: park the request for a person.
    ManualQueue(bool),
}

/// The priority class of a use case.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    pub fn broker_priority(self) -> Priority {
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
            if p.base_url.trim().is_empty() {
                return Err(ConfigError::new(format!("{path}.baseUrl"), "must not be empty"));
            }
        }
        let mut keys = BTreeSet::new();
        for (i, m) in self.models.iter().enumerate() {
            let path = format!("models[{i}]");
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
            if uc.total_ms == Some(0) {
                return Err(ConfigError::new(format!("{path}.totalMs"), "must be > 0"));
            }
            if let Err(e) = uc.retry.validate() {
                return Err(ConfigError::new(format!("{path}.retry"), e.to_string()));
            }
        }
        self.breaker.validate().map_err(|e| e.under("breaker"))
    }
}
