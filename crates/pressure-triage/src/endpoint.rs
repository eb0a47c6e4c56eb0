//! `pressure triage eval --provider URL --model NAME`: measure any
//! OpenAI-compatible endpoint (a local llama.cpp or vLLM server, a hosted
//! API) as the model levels of the triage chain, through the same client
//! stack the gateway runs.
//!
//! [`use_endpoint`] rewrites the `gateway.llm` section of the config: a
//! provider [`PROVIDER`] at the endpoint's URL; one model entry per
//! `--model` name; and the use case's chain with its model levels replaced
//! by those models, in the given order. Its other levels (keyword rules,
//! manual queue), its retry policy and the config's breaker stay as they
//! are, so the measurement goes through the limits, retries, breaker and
//! deadline of a real deployment and only the models change.

use pressure_core::Limits;
use pressure_llm::pipeline::{ChainLevel, LlmConfig, ModelConfig};
use pressure_llm::provider::ProviderSettings;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::eval::EvalError;

/// The price of a model per 1M tokens (re-exported for [`Endpoint::price`]).
pub use pressure_llm::price::ModelPrice;

/// The provider name the endpoint gets in the rewritten config (levels are
/// named `endpoint/<model>`).
pub const PROVIDER: &str = "endpoint";

/// Default wait for a model's answer (first byte, and between body chunks),
/// in milliseconds: generous, because a small model on a CPU answers in
/// seconds once calls queue behind each other.
pub const DEFAULT_TIMEOUT_MS: u64 = 60_000;

/// Default context window of an endpoint model, in tokens: llama.cpp
/// servers' default `n_ctx`, and below every hosted model's window. The
/// triage prompt and a ticket are a few hundred tokens.
pub const DEFAULT_CONTEXT_TOKENS: u64 = 2_048;

/// An OpenAI-compatible endpoint and the models to measure on it.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// The API root, e.g. `http://127.0.0.1:8000/v1`; calls go to
    /// `{base_url}/chat/completions`.
    pub base_url: String,
    /// The model names to send, one chain level each, in order (at least
    /// one).
    pub models: Vec<String>,
    /// The environment variable holding the API key (`Authorization:
    /// Bearer`); `None` sends no key (local servers).
    pub api_key_env: Option<String>,
    /// Wait for the first byte and between chunks, in milliseconds; the use
    /// case's deadline is raised to cover one attempt per retry.
    pub timeout_ms: u64,
    /// Each model's context window, in tokens.
    pub context_tokens: u64,
    /// Each model's price (zero for a local model: it costs time, not
    /// money).
    pub price: ModelPrice,
    /// Each model's quota, enforced by the broker as in the gateway; `None`:
    /// not limited locally.
    pub limits: Option<Limits>,
}

impl Endpoint {
    /// `models` at `base_url`, no key, the default timeout and context,
    /// price zero, no limits.
    pub fn new(base_url: impl Into<String>, models: Vec<String>) -> Self {
        Self {
            base_url: base_url.into(),
            models,
            api_key_env: None,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            context_tokens: DEFAULT_CONTEXT_TOKENS,
            price: ModelPrice::default(),
            limits: None,
        }
    }

    /// The header line of the report: what answered the model levels.
    pub fn source(&self) -> String {
        let key = match &self.api_key_env {
            Some(env) => format!("key from ${env}"),
            None => "no API key".to_owned(),
        };
        format!(
            "provider {PROVIDER:?} at {} (an OpenAI-compatible endpoint, {key}), model{} {}",
            self.base_url,
            if self.models.len() == 1 { "" } else { "s" },
            self.models.join(", ")
        )
    }
}

/// Replaces the model levels of `use_case`'s chain in `config` with the
/// models of `endpoint` (see the [module docs](self)); every other use case
/// is dropped. The config's providers and models stay (another kind of
/// level may use them, e.g. an embedding model); [`PROVIDER`] is added and
/// must not be taken.
///
/// The first model level's position in the chain is kept: a chain
/// `large → small → rules → manual` measured with `--model a` becomes
/// `endpoint/a → rules → manual`. A chain without a model level gets the
/// endpoint's models in front. The use case's deadline becomes at least
/// one `timeout_ms` per attempt of its retry policy, plus a second.
pub fn use_endpoint(config: &mut LlmConfig, use_case: &str, endpoint: &Endpoint) -> Result<(), EvalError> {
    let mut uc = config
        .use_cases
        .get(use_case)
        .cloned()
        .ok_or_else(|| EvalError::UnknownUseCase {
            name: use_case.to_owned(),
            known: config.use_cases.keys().cloned().collect::<Vec<_>>().join(", "),
        })?;
    if endpoint.models.is_empty() {
        return Err(EvalError::Endpoint("at least one model is needed".to_owned()));
    }
    if let Some(blank) = endpoint.models.iter().find(|m| m.trim().is_empty()) {
        return Err(EvalError::Endpoint(format!("model name {blank:?} is blank")));
    }
    // Built through serde, as the gateway reads them, so that fields added
    // to these types later keep their defaults here.
    let provider: ProviderSettings = from_json(json!({
        "baseUrl": endpoint.base_url,
        "apiKeyEnv": endpoint.api_key_env,
        "timeouts": { "firstByteMs": endpoint.timeout_ms, "readMs": endpoint.timeout_ms },
    }))?;
    if config.providers.contains_key(PROVIDER) {
        return Err(EvalError::Endpoint(format!(
            "the config already has a provider named {PROVIDER:?}"
        )));
    }
    config.providers.insert(PROVIDER.to_owned(), provider);
    let models: Vec<ModelConfig> = endpoint
        .models
        .iter()
        .map(|name| {
            from_json::<ModelConfig>(json!({
                "provider": PROVIDER,
                "model": name,
                "limits": endpoint.limits,
                "context": {
                    "contextTokens": endpoint.context_tokens,
                    "maxOutputTokens": endpoint.context_tokens / 2,
                },
                "price": endpoint.price,
            }))
        })
        .collect::<Result<_, _>>()?;
    config.models.extend(models);
    let levels: Vec<ChainLevel> = endpoint
        .models
        .iter()
        .map(|m| ChainLevel::Model(format!("{PROVIDER}/{m}")))
        .collect();
    let at = uc
        .chain
        .iter()
        .position(|l| matches!(l, ChainLevel::Model(_)))
        .unwrap_or(0);
    uc.chain.retain(|l| !matches!(l, ChainLevel::Model(_)));
    uc.chain.splice(at..at, levels);
    let attempts = u64::from(uc.retry.max_attempts.max(1));
    let floor = endpoint.timeout_ms.saturating_mul(attempts).saturating_add(1_000);
    uc.total_ms = Some(uc.total().as_millis().try_into().unwrap_or(u64::MAX).max(floor));
    config.use_cases = [(use_case.to_owned(), uc)].into();
    Ok(())
}

/// A config part from its JSON form; an error names what was refused.
fn from_json<T: DeserializeOwned>(value: Value) -> Result<T, EvalError> {
    serde_json::from_value(value).map_err(|e| EvalError::Endpoint(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> LlmConfig {
        serde_json::from_value(json!({
            "providers": { "mock": { "baseUrl": "http://127.0.0.1:9100/v1" } },
            "models": [
                { "provider": "mock", "model": "large", "context": { "contextTokens": 8192, "maxOutputTokens": 256 } },
                { "provider": "mock", "model": "small", "context": { "contextTokens": 4096, "maxOutputTokens": 256 } }
            ],
            "rules": { "kw": [ { "label": "billing", "keywords": ["refund"], "answer": "billing" } ] },
            "useCases": {
                "triage": {
                    "chain": [ { "model": "mock/large" }, { "model": "mock/small" }, { "rules": "kw" }, { "manualQueue": true } ],
                    "totalMs": 10000,
                    "retry": { "maxAttempts": 2 }
                },
                "other": { "chain": [ { "model": "mock/small" } ] }
            }
        }))
        .unwrap()
    }

    #[test]
    fn the_model_levels_become_the_endpoint_models_and_the_rest_stays() {
        let mut c = config();
        let mut e = Endpoint::new("http://127.0.0.1:8000/v1", vec!["a".into(), "b".into()]);
        e.api_key_env = Some("KEY".into());
        e.price = ModelPrice::new(5, 7);
        use_endpoint(&mut c, "triage", &e).unwrap();
        c.validate().unwrap();
        assert_eq!(c.providers.keys().collect::<Vec<_>>(), [PROVIDER, "mock"]);
        let p = &c.providers[PROVIDER];
        assert_eq!(p.base_url, "http://127.0.0.1:8000/v1");
        assert_eq!(p.api_key_env.as_deref(), Some("KEY"));
        assert_eq!(p.timeouts.first_byte_ms, DEFAULT_TIMEOUT_MS);
        assert_eq!(p.timeouts.read_ms, DEFAULT_TIMEOUT_MS);
        let keys: Vec<String> = c.models.iter().map(ModelConfig::key).collect();
        assert_eq!(keys, ["mock/large", "mock/small", "endpoint/a", "endpoint/b"]);
        assert_eq!(c.models[2].context.context_tokens, DEFAULT_CONTEXT_TOKENS);
        assert_eq!(c.models[3].price, e.price);
        assert_eq!(c.use_cases.keys().collect::<Vec<_>>(), ["triage"]);
        let uc = &c.use_cases["triage"];
        assert_eq!(
            uc.chain,
            [
                ChainLevel::Model("endpoint/a".into()),
                ChainLevel::Model("endpoint/b".into()),
                ChainLevel::Rules("kw".into()),
                ChainLevel::ManualQueue(true),
            ]
        );
        // Two attempts of up to a minute each fit in the deadline.
        assert_eq!(uc.total_ms, Some(2 * DEFAULT_TIMEOUT_MS + 1_000));
        assert_eq!(uc.retry.max_attempts, 2);
        assert!(e.source().contains("models a, b"), "{}", e.source());
        assert!(e.source().contains("$KEY"), "{}", e.source());
    }

    #[test]
    fn a_chain_without_model_levels_gets_the_endpoint_first() {
        let mut c = config();
        c.use_cases.get_mut("triage").unwrap().chain =
            vec![ChainLevel::Rules("kw".into()), ChainLevel::ManualQueue(true)];
        use_endpoint(&mut c, "triage", &Endpoint::new("http://h/v1", vec!["m".into()])).unwrap();
        assert_eq!(
            c.use_cases["triage"].chain[..2],
            [
                ChainLevel::Model("endpoint/m".into()),
                ChainLevel::Rules("kw".into())
            ]
        );
    }

    #[test]
    fn unknown_use_cases_and_missing_models_are_refused() {
        let e = use_endpoint(
            &mut config(),
            "nope",
            &Endpoint::new("http://h/v1", vec!["m".into()]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("\"nope\""), "{e}");
        let e = use_endpoint(&mut config(), "triage", &Endpoint::new("http://h/v1", vec![])).unwrap_err();
        assert!(e.to_string().contains("at least one model"), "{e}");
        let e = use_endpoint(
            &mut config(),
            "triage",
            &Endpoint::new("http://h/v1", vec![" ".into()]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("blank"), "{e}");
        let mut taken = config();
        let mock = taken.providers["mock"].clone();
        taken.providers.insert(PROVIDER.to_owned(), mock);
        let e = use_endpoint(
            &mut taken,
            "triage",
            &Endpoint::new("http://h/v1", vec!["m".into()]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("already has a provider"), "{e}");
    }
}
