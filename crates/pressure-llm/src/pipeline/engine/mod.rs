//! The attempt engine: one chain walk, one retry loop, one settlement,
//! for every kind of call (docs/architecture.md#the-llm-stack, STYLE "one lifecycle for one attempt").
//!
//! * [`Engine`] holds what every event shares: the configuration, the
//!   broker, the provider clients, the model table, the breakers, the
//!   tokenizer, the fallback handlers, the manual queue and the metrics.
//! * [`Request`] and [`Call`] are what differs between a chat completion,
//!   a stream and an embeddings request: how a level's reservation is
//!   estimated, how the request is sent, and what a successful attempt
//!   leaves to settle.
//! * `walk` — the chain walk: deadline, reservations of every level first,
//!   each level in order, the give-up error and its retry hint (`hint`).
//! * `level` — the retry loop of one model level: gate, attempt, settle,
//!   retry decision.
//! * `gate` — before each attempt: the provider's hold, the breaker, the
//!   limiter.
//! * `ledger` — [`Ledger`]: the breaker permit, the limiter permit and the
//!   attempt's price held by one value that settles once (breaker outcome,
//!   reconcile, spend), whichever path the attempt took.
//! * `payer` — the event payer's share of an attempt: its estimate
//!   reserved before the call, refunded when the call does not go out.
//! * `models` — [`ModelEntry`], one configured model, and the provider
//!   hold its rate-limit headers impose (`hold_for`).
//! * `pool` — the retry loop of a pool level: which deployment takes each
//!   attempt, and the move to another one after a failure.
//! * `rotation` — [`Rotation`], a pool's weighted round robin.
//! * `embed` — [`Embed`], an embeddings event: the one kind of call the
//!   engine makes itself (a `knn` level embeds the request's text), so it
//!   lives here rather than with the chat calls of `pipeline::calls`.
//! * `knn` — a `knn` level: the text embedded by the level's local model,
//!   then the vote of the nearest examples.

mod call;
mod embed;
mod gate;
mod hint;
mod knn;
mod ledger;
mod level;
mod models;
mod payer;
mod pool;
mod rotation;
mod walk;

use std::collections::HashMap;
use std::sync::Arc;

use pressure_core::clock::{Clock, TokioClock};
use pressure_core::{Backend, ResourceBroker};

pub(crate) use call::{Call, Request, Target};
pub(crate) use embed::Embed;
pub(crate) use ledger::{Ledger, Settlement};
pub(crate) use models::ModelEntry;
pub(crate) use rotation::Rotation;
pub(crate) use walk::Served;

use super::config::{ChainLevel, ConfigError, LlmConfig};
use super::error::LlmError;
use super::fallback::{FallbackHandler, InMemoryQueue, KeywordRules, ManualQueue};
use super::knn::{index_key, load_examples, KnnIndex};
use super::metrics::Metrics;
use super::pool::PoolMember;
use crate::breaker::BreakerRegistry;
use crate::provider::{ProviderClient, ProviderError};
use crate::tokens::TokenCounter;

/// What every event of one client shares.
pub(crate) struct Engine<B: Backend> {
    pub(crate) config: LlmConfig,
    pub(crate) broker: ResourceBroker<B>,
    pub(crate) providers: HashMap<String, ProviderClient>,
    pub(crate) models: HashMap<String, ModelEntry>,
    pub(crate) breakers: BreakerRegistry,
    pub(crate) counter: TokenCounter,
    pub(crate) handlers: HashMap<String, Arc<dyn FallbackHandler>>,
    /// The examples of every `knn` level, by (model, examples file).
    pub(crate) knn: HashMap<(String, String), Arc<KnnIndex>>,
    pub(crate) queue: Arc<dyn ManualQueue>,
    /// The rotation of every pool level, by use case and level index.
    pub(crate) rotations: HashMap<String, HashMap<usize, Rotation>>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) metrics: Arc<Metrics>,
}

impl<B: Backend> Engine<B> {
    /// Validates `config`, registers each limited model's resource
    /// `llm:<provider>:<model>` on `broker`, builds the provider clients,
    /// the breakers (on tokio's clock), the keyword rule handlers, an
    /// [`InMemoryQueue`], and the tokenizer tables of every model (so the
    /// first request does not pay for them: building one takes ~0.2 s in a
    /// release build, seconds in a debug build, which would otherwise come
    /// out of the first event's deadline). A `local` provider's model is
    /// loaded here, and every `knn` level's examples file read (a model or
    /// a file that does not load is a configuration error at its path).
    pub(crate) fn new(config: LlmConfig, broker: ResourceBroker<B>) -> Result<Self, LlmError> {
        config.validate()?;
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
        let mut providers = HashMap::new();
        for (name, p) in &config.providers {
            let client = ProviderClient::new(p.to_provider_config(name)).map_err(|e| match e {
                ProviderError::LocalModel { error, .. } => LlmError::Config(ConfigError::new(
                    format!("providers.{name}.modelDir"),
                    error.to_string(),
                )),
                e => e.into(),
            })?;
            providers.insert(name.clone(), client);
        }
        let knn = knn_indexes(&config)?;
        let mut models = HashMap::new();
        for m in &config.models {
            models.insert(m.key(), ModelEntry::register(m, &broker)?);
        }
        let breakers = BreakerRegistry::new(config.breaker.clone(), Arc::clone(&clock))
            .map_err(|e| e.under("breaker"))?;
        let mut handlers: HashMap<String, Arc<dyn FallbackHandler>> = HashMap::new();
        for (name, rules) in &config.rules {
            handlers.insert(
                name.clone(),
                Arc::new(KeywordRules::new(name.clone(), rules.clone())),
            );
        }
        let counter = TokenCounter::new();
        let encodings: Vec<_> = models
            .values()
            .map(|m| counter.encoding_for(&m.model).encoding)
            .collect();
        counter.preload(&encodings)?;
        let rotations = rotations(&config);
        Ok(Self {
            config,
            broker,
            providers,
            models,
            breakers,
            counter,
            handlers,
            knn,
            queue: Arc::new(InMemoryQueue::default()),
            rotations,
            clock,
            metrics: Arc::new(Metrics::default()),
        })
    }
}

/// A [`Rotation`] for every pool level of `config`.
fn rotations(config: &LlmConfig) -> HashMap<String, HashMap<usize, Rotation>> {
    let mut all = HashMap::new();
    for (name, uc) in &config.use_cases {
        let pools: HashMap<usize, Rotation> = uc
            .chain
            .iter()
            .enumerate()
            .filter_map(|(i, level)| match level {
                ChainLevel::Pool(members) => Some((i, Rotation::new(members.iter().map(PoolMember::weight)))),
                _ => None,
            })
            .collect();
        if !pools.is_empty() {
            all.insert(name.clone(), pools);
        }
    }
    all
}

/// The examples of every `knn` level of `config`, read once per (model,
/// examples file).
fn knn_indexes(config: &LlmConfig) -> Result<HashMap<(String, String), Arc<KnnIndex>>, ConfigError> {
    let mut indexes = HashMap::new();
    for (name, uc) in &config.use_cases {
        for (i, level) in uc.chain.iter().enumerate() {
            let ChainLevel::Knn(knn) = level else { continue };
            let key = index_key(knn);
            if indexes.contains_key(&key) {
                continue;
            }
            let examples = load_examples(std::path::Path::new(&knn.examples))
                .map_err(|e| ConfigError::new(format!("useCases.{name}.chain[{i}].knn.examples"), e))?;
            indexes.insert(key, Arc::new(KnnIndex::new(examples)));
        }
    }
    Ok(indexes)
}
