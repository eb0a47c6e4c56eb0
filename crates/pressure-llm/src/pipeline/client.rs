//! [`LlmClient`]: the public face of the pipeline — its construction, its
//! accessors, and one entry point per kind of call, each a walk of the
//! attempt engine ([`Engine::walk`]) with its [`Call`](super::engine::Call).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pressure_core::{Backend, ResourceBroker};

use super::answer::{Answer, EmbeddingAnswer};
use super::answer_stream::AnswerStream;
use super::caller::Caller;
use super::calls::{Complete, Open};
use super::config::LlmConfig;
use super::config::{ChainLevel, UseCaseConfig};
use super::engine::Embed;
use super::engine::{Engine, ModelEntry};
use super::error::{EmbeddingError, LlmError};
use super::fallback::{FallbackHandler, ManualQueue};
use super::metrics::{Metrics, MetricsSnapshot};
use crate::breaker::BreakerRegistry;
use crate::provider::{ChatRequest, EmbeddingRequest, PoolStats};

/// The LLM client: every use case of one configuration, on one broker.
pub struct LlmClient<B: Backend> {
    engine: Engine<B>,
    /// Per-client random prefix and counter of generated event ids.
    ids: (u64, AtomicU64),
}

impl<B: Backend> std::fmt::Debug for LlmClient<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmClient")
            .field("providers", &self.engine.providers.len())
            .field("models", &self.engine.models.len())
            .field("use_cases", &self.engine.config.use_cases.len())
            .finish_non_exhaustive()
    }
}

impl<B: Backend> LlmClient<B> {
    /// Validates `config`, registers each model's resource
    /// `llm:<provider>:<model>` with its limits on `broker`, builds the
    /// provider clients, the breakers (on tokio's clock), the keyword rule
    /// handlers of `config.rules`, an in-memory manual queue, and the
    /// tokenizer tables of every model (so the first request does not pay
    /// for them).
    pub fn new(config: LlmConfig, broker: ResourceBroker<B>) -> Result<Self, LlmError> {
        Ok(Self {
            engine: Engine::new(config, broker)?,
            ids: (rand::random::<u64>(), AtomicU64::new(0)),
        })
    }

    /// Registers (or replaces) the handler of `{"rules": name}` levels.
    pub fn with_handler(mut self, name: impl Into<String>, handler: Arc<dyn FallbackHandler>) -> Self {
        self.engine.handlers.insert(name.into(), handler);
        self
    }

    /// Shares every breaker with the fleet through `store` (`scope`
    /// `fleet`, docs/architecture.md#what-openai-and-anthropic-clients-expect); call it right after [`new`](Self::new), on a
    /// tokio runtime, before any event ran.
    pub fn with_shared_breakers(
        mut self,
        store: Arc<dyn pressure_core::shared_breaker::SharedBreakerStore>,
    ) -> Result<Self, LlmError> {
        let config = self.engine.config.breaker.clone();
        self.engine.breakers = BreakerRegistry::fleet(config, Arc::clone(&self.engine.clock), None, store)
            .map_err(|e| e.under("breaker"))?;
        Ok(self)
    }

    /// Replaces the manual queue.
    pub fn with_manual_queue(mut self, queue: Arc<dyn ManualQueue>) -> Self {
        self.engine.queue = queue;
        self
    }

    /// The manual queue of the `manualQueue` levels (to list and drain it).
    pub fn manual_queue(&self) -> &Arc<dyn ManualQueue> {
        &self.engine.queue
    }

    /// The configuration.
    pub fn config(&self) -> &LlmConfig {
        &self.engine.config
    }

    /// The broker.
    pub fn broker(&self) -> &ResourceBroker<B> {
        &self.engine.broker
    }

    /// The circuit breakers, one per (provider, model).
    pub fn breakers(&self) -> &BreakerRegistry {
        &self.engine.breakers
    }

    /// Each provider's connection pool use, by provider name.
    pub fn provider_pools(&self) -> std::collections::BTreeMap<String, PoolStats> {
        self.engine
            .providers
            .iter()
            .map(|(name, p)| (name.clone(), p.pool_stats()))
            .collect()
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> MetricsSnapshot {
        self.engine.metrics.snapshot()
    }

    /// A fresh event id, unique per client: a random prefix and a counter.
    pub fn new_request_id(&self) -> String {
        let n = self.ids.1.fetch_add(1, Ordering::Relaxed);
        format!("{:012x}-{n}", self.ids.0 & 0xffff_ffff_ffff)
    }

    fn metrics(&self) -> &Metrics {
        &self.engine.metrics
    }

    /// The input tokens of an agent's request for `use_case` (Anthropic's
    /// `count_tokens`): counted by the provider of the use case's first
    /// model when it speaks the request's own wire (an Anthropic provider
    /// for a Messages request; the call is free, and neither reserved nor
    /// charged), else — and when that call fails — by the gateway's
    /// tokenizer ([`count_prompt`](Self::count_prompt)).
    pub async fn count_tokens(&self, use_case: &str, req: &ChatRequest) -> Result<u64, LlmError> {
        let (uc, first) = self.first_model(use_case)?;
        if let Some(m) = first {
            if let Some(provider) = self.engine.providers.get(&m.provider) {
                let deadline = tokio::time::Instant::now() + uc.total();
                match provider.count_tokens(req, &m.model, deadline).await {
                    Some(Ok(n)) => return Ok(n),
                    Some(Err(e)) => {
                        tracing::warn!(provider = %m.provider, error = %e.message, "count_tokens failed; the tokenizer counts");
                    }
                    None => {}
                }
            }
        }
        self.count_prompt(use_case, req)
    }

    /// The prompt tokens of `req` as the first model level of `use_case`
    /// counts them (its tokenizer), without a call, a reservation or a
    /// charge.
    pub fn count_prompt(&self, use_case: &str, req: &ChatRequest) -> Result<u64, LlmError> {
        let model = self.first_model(use_case)?.1.map_or("", |m| m.model.as_str());
        let messages: Vec<(String, String)> =
            req.messages.iter().map(|m| (m.role.clone(), m.text())).collect();
        Ok(self.engine.counter.count_chat(model, &messages)?)
    }

    /// The use case `use_case` and its first model level, if it has one.
    fn first_model(&self, use_case: &str) -> Result<(&UseCaseConfig, Option<&ModelEntry>), LlmError> {
        let uc = self
            .engine
            .config
            .use_cases
            .get(use_case)
            .ok_or_else(|| LlmError::UnknownUseCase(use_case.to_owned()))?;
        let first = uc
            .chain
            .iter()
            .flat_map(ChainLevel::model_keys)
            .find_map(|key| self.engine.models.get(key));
        Ok((uc, first))
    }

    /// Runs one event of `use_case`: see the [module docs](super).
    pub async fn complete(&self, use_case: &str, req: ChatRequest) -> Result<Answer, LlmError> {
        self.complete_as(use_case, req, self.new_request_id()).await
    }

    /// [`complete`](Self::complete) for `caller`: under its event id (e.g.
    /// the HTTP request's `x-request-id`, sent with every provider call of
    /// the event as `x-pressure-request-id` along with the attempt number),
    /// charging its payer, if any, every attempt's tokens and money (see
    /// [`Caller`]). A plain `String` is an event id without a payer.
    pub async fn complete_as(
        &self,
        use_case: &str,
        req: ChatRequest,
        caller: impl Into<Caller<B>>,
    ) -> Result<Answer, LlmError> {
        Metrics::add(&self.metrics().requests, 1);
        let result = self
            .engine
            .walk(use_case, &Complete { req }, caller.into())
            .await
            .map(|s| Answer {
                reply: s.output,
                level: s.level,
                degradation: s.degradation,
                model: s.model,
                attempts: s.attempts,
                spent: s.spent,
                failed_spent: s.failed_spent,
            });
        match &result {
            Ok(a) => self.metrics().served(a.degradation.as_str()),
            Err(e) => self.metrics().error(e.label()),
        }
        result
    }

    /// Runs one event of `use_case` as a stream: see [`AnswerStream`]. The
    /// chain is walked like [`complete`](Self::complete) until a model level
    /// produces its first output chunk (or a `rules` / `manualQueue` level
    /// answers); failures before that retry and fall back, failures after it
    /// end the stream with an error item.
    pub async fn stream(&self, use_case: &str, req: ChatRequest) -> Result<AnswerStream<B>, LlmError> {
        self.stream_as(use_case, req, self.new_request_id()).await
    }

    /// [`stream`](Self::stream) for `caller`, like
    /// [`complete_as`](Self::complete_as).
    pub async fn stream_as(
        &self,
        use_case: &str,
        req: ChatRequest,
        caller: impl Into<Caller<B>>,
    ) -> Result<AnswerStream<B>, LlmError> {
        Metrics::add(&self.metrics().requests, 1);
        let include_usage = req
            .stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false);
        let result = self.engine.walk(use_case, &Open { req }, caller.into()).await;
        match &result {
            Ok(s) => self.metrics().served(s.degradation.as_str()),
            Err(e) => self.metrics().error(e.label()),
        }
        result.map(|s| {
            AnswerStream::new(
                s,
                Arc::clone(&self.engine.metrics),
                self.engine.counter.clone(),
                include_usage,
            )
        })
    }

    /// Runs one embeddings event of `use_case` (a use case whose chain
    /// holds embedding models) through the same layers as a chat event.
    pub async fn embed(
        &self,
        use_case: &str,
        req: EmbeddingRequest,
    ) -> Result<EmbeddingAnswer, EmbeddingError> {
        self.embed_as(use_case, req, self.new_request_id()).await
    }

    /// [`embed`](Self::embed) for `caller`, like
    /// [`complete_as`](Self::complete_as). Counted in the client's
    /// metrics like a chat event (requests, attempts, spend, errors,
    /// answers by level) and in `embedding_requests` /
    /// `embedding_spent_micro_usd`.
    pub async fn embed_as(
        &self,
        use_case: &str,
        req: EmbeddingRequest,
        caller: impl Into<Caller<B>>,
    ) -> Result<EmbeddingAnswer, EmbeddingError> {
        Metrics::add(&self.metrics().requests, 1);
        Metrics::add(&self.metrics().embedding_requests, 1);
        let result = self.engine.walk(use_case, &Embed { req }, caller.into()).await;
        match result {
            Ok(s) => {
                self.metrics().served(s.degradation.as_str());
                Ok(EmbeddingAnswer {
                    response: s.output,
                    level: s.level,
                    degradation: s.degradation,
                    model: s.model.unwrap_or_default(),
                    attempts: s.attempts,
                    spent: s.spent,
                    failed_spent: s.failed_spent,
                })
            }
            Err(e) => {
                self.metrics().error(e.label());
                Err(e.into())
            }
        }
    }
}
