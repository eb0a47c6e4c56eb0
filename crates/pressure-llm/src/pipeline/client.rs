//! [`LlmClient`]: one event through deadline, chain, retry, breaker, limiter.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pressure_core::clock::{duration_to_millis as duration_ms, duration_to_nanos, Clock, TokioClock};
use pressure_core::{Backend, QueueConfig, ResourceBroker, ResourceConfig};
use tokio::time::Instant;

use super::config::{ChainLevel, LlmConfig, UseCaseConfig};
use super::fallback::{FallbackHandler, InMemoryQueue, KeywordRules, ManualQueue};
use super::metrics::{Metrics, MetricsSnapshot};
use super::stream::{AnswerStream, Live};
use super::{Answer, Degradation, LlmError, Reply};
use crate::breaker::{BreakerRegistry, CallPermit, CircuitBreaker};
use crate::price::{ModelPrice, Money};
use crate::provider::{
    CallError, CallTag, ChatRequest, PoolStats, ProviderClient, ProviderKind, RateLimitHints,
};
use crate::reservation::{resource_id, ModelLimits, Reservation};
use crate::retry::{Decision, GiveUpReason, RetryState};
use crate::taxonomy::{Disposition, ErrorKind, TimeoutPhase};
use crate::tokens::TokenCounter;

/// What [`LlmClient::gate`] decided before one attempt.
pub(super) enum Gate<B: Backend> {
    /// Call: the breaker's permit, and the limiter's (none for a model
    /// without limits).
    Go(CallPermit, Option<pressure_core::Permit<B>>),
    /// Ask the gate again: a provider hold ended, or the breaker changed
    /// state while the limiter decided (the reservation was given back).
    Again,
    /// The level cannot call now: a hold past the deadline, an open
    /// breaker, or the limiter's refusal.
    Refused(LlmError),
}

/// One configured model, ready to call.
#[derive(Debug)]
pub(super) struct ModelEntry {
    pub(super) provider: String,
    pub(super) model: String,
    pub(super) key: String,
    /// The broker resource, when the model has limits.
    pub(super) resource: Option<String>,
    context: ModelLimits,
    pub(super) price: ModelPrice,
    /// Provider hold: no call before this instant (nanoseconds on the
    /// client's clock; 0 = none). See [`hold_for`].
    pub(super) hold: Arc<AtomicU64>,
}

/// The LLM client: every use case of one configuration, on one broker.
pub struct LlmClient<B: pressure_core::Backend> {
    config: LlmConfig,
    broker: ResourceBroker<B>,
    pub(super) providers: HashMap<String, ProviderClient>,
    pub(super) models: HashMap<String, ModelEntry>,
    breakers: BreakerRegistry,
    pub(super) counter: TokenCounter,
    handlers: HashMap<String, Arc<dyn FallbackHandler>>,
    queue: Arc<dyn ManualQueue>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) metrics: Arc<Metrics>,
    /// Per-client random prefix and counter of generated event ids.
    ids: (u64, Arc<AtomicU64>),
}

impl<B: Backend> std::fmt::Debug for LlmClient<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmClient")
            .field("providers", &self.providers.len())
            .field("models", &self.models.len())
            .field("use_cases", &self.config.use_cases.len())
            .finish_non_exhaustive()
    }
}

/// How a model level ended without an answer.
enum LevelEnd {
    /// Move on to the next level; the error is remembered.
    Next(LlmError),
    /// Fail the event.
    Fail(LlmError),
}

/// One provider call's success.
enum Attempt {
    Done(Box<crate::provider::Completion>),
    Live(
        Box<(
            crate::provider::ChatStream,
            std::collections::VecDeque<crate::provider::ChatChunk>,
        )>,
    ),
}

/// Whether an event wants a complete answer or a stream.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Complete,
    Stream,
}

/// What a model level produced.
enum Got<B: Backend> {
    Response(crate::provider::ChatResponse),
    /// A stream committed at its first output chunk (stream mode only).
    Live(Box<Live<B>>),
}

/// What served an event, with the event's totals.
pub(super) struct Served<B: Backend> {
    pub(super) level: usize,
    pub(super) degradation: Degradation,
    pub(super) model: Option<String>,
    pub(super) attempts: u32,
    pub(super) spent: Money,
    pub(super) failed_spent: Money,
    pub(super) payload: Payload<B>,
}

/// A complete reply (any level), or a live stream of a model level.
pub(super) enum Payload<B: Backend> {
    Reply(Reply),
    Live(Box<Live<B>>),
}

/// The running totals of one event.
struct Event {
    /// Sent with every call of the event (`x-pressure-request-id`).
    request_id: String,
    retry: RetryState,
    attempts: u32,
    spent: Money,
    failed_spent: Money,
    /// The soonest instant a level that gave up said it could answer again
    /// (limiter wait, breaker open time, provider `retry-after`).
    retry_at: Option<Instant>,
}

impl Event {
    /// Remembers `err`'s retry hint when it is sooner than the ones seen.
    fn note_retry(&mut self, err: &LlmError) {
        if let Some(d) = err.retry_after() {
            let at = Instant::now() + d;
            self.retry_at = Some(self.retry_at.map_or(at, |t| t.min(at)));
        }
    }

    /// The soonest retry hint, from now.
    fn retry_after(&self) -> Option<Duration> {
        self.retry_at.map(|t| t.saturating_duration_since(Instant::now()))
    }
}

impl<B: Backend> LlmClient<B> {
    /// Validates `config`, registers each model's resource
    /// `llm:<provider>:<model>` with its limits on `broker`, builds the
    /// provider clients, the breakers (on tokio's clock), the keyword rule
    /// handlers of `config.rules`, an [`InMemoryQueue`], and the tokenizer
    /// tables of every model (so the first request does not pay for them).
    pub fn new(config: LlmConfig, broker: ResourceBroker<B>) -> Result<Self, LlmError> {
        config.validate()?;
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
        let mut providers = HashMap::new();
        for (name, p) in &config.providers {
            providers.insert(name.clone(), ProviderClient::new(p.to_provider_config(name))?);
        }
        let mut models = HashMap::new();
        for m in &config.models {
            let resource = match &m.limits {
                Some(limits) => {
                    let id = resource_id(&m.provider, &m.model);
                    // A `queue` resource (not `register_limit`) so that the
                    // batch ceiling applies to `Priority::Batch` acquisitions.
                    let queue = QueueConfig {
                        batch_headroom: m.batch_headroom(),
                        ..QueueConfig::default()
                    };
                    broker.register(id.clone(), ResourceConfig::new(limits.clone()).queue(queue))?;
                    Some(id)
                }
                None => None,
            };
            models.insert(
                m.key(),
                ModelEntry {
                    provider: m.provider.clone(),
                    model: m.model.clone(),
                    key: m.key(),
                    resource,
                    context: m.context,
                    price: m.price,
                    hold: Arc::new(AtomicU64::new(0)),
                },
            );
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
        // The tokenizer tables of every configured model are built now, not
        // on the first request: building one takes ~0.2 s in a release build
        // (seconds in a debug build), which would otherwise come out of the
        // first event's deadline.
        let counter = TokenCounter::new();
        let encodings: Vec<_> = models
            .values()
            .map(|m| counter.encoding_for(&m.model).encoding)
            .collect();
        counter.preload(&encodings)?;
        Ok(Self {
            config,
            broker,
            providers,
            models,
            breakers,
            counter,
            handlers,
            queue: Arc::new(InMemoryQueue::default()),
            clock,
            metrics: Arc::new(Metrics::default()),
            ids: (rand::random::<u64>(), Arc::new(AtomicU64::new(0))),
        })
    }

    /// Registers (or replaces) the handler of `{"rules": name}` levels.
    pub fn with_handler(mut self, name: impl Into<String>, handler: Arc<dyn FallbackHandler>) -> Self {
        self.handlers.insert(name.into(), handler);
        self
    }

    /// Shares every breaker with the fleet through `store` (`scope`
    /// `fleet`, DESIGN §6.1); call it right after [`new`](Self::new), on a
    /// tokio runtime, before any event ran.
    pub fn with_shared_breakers(
        mut self,
        store: Arc<dyn pressure_core::shared_breaker::SharedBreakerStore>,
    ) -> Result<Self, LlmError> {
        let config = self.config.breaker.clone();
        self.breakers = BreakerRegistry::fleet(config, Arc::clone(&self.clock), None, store)
            .map_err(|e| e.under("breaker"))?;
        Ok(self)
    }

    /// Replaces the manual queue.
    pub fn with_manual_queue(mut self, queue: Arc<dyn ManualQueue>) -> Self {
        self.queue = queue;
        self
    }

    /// The manual queue of the `manualQueue` levels (to list and drain it).
    pub fn manual_queue(&self) -> &Arc<dyn ManualQueue> {
        &self.queue
    }

    /// The configuration.
    pub fn config(&self) -> &LlmConfig {
        &self.config
    }

    /// The broker.
    pub fn broker(&self) -> &ResourceBroker<B> {
        &self.broker
    }

    /// The circuit breakers, one per (provider, model).
    pub fn breakers(&self) -> &BreakerRegistry {
        &self.breakers
    }

    /// Each provider's connection pool use, by provider name.
    pub fn provider_pools(&self) -> std::collections::BTreeMap<String, PoolStats> {
        self.providers
            .iter()
            .map(|(name, p)| (name.clone(), p.pool_stats()))
            .collect()
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> MetricsSnapshot {
        self.metrics.snapshot()
    }

    /// A fresh event id, unique per client: a random prefix and a counter.
    pub fn new_request_id(&self) -> String {
        let n = self.ids.1.fetch_add(1, Ordering::Relaxed);
        format!("{:012x}-{n}", self.ids.0 & 0xffff_ffff_ffff)
    }

    /// Runs one event of `use_case`: see the [module docs](super).
    pub async fn complete(&self, use_case: &str, req: ChatRequest) -> Result<Answer, LlmError> {
        self.complete_as(use_case, req, self.new_request_id()).await
    }

    /// [`complete`](Self::complete) under the caller's event id (e.g. the
    /// HTTP request's `x-request-id`), sent with every provider call of the
    /// event as `x-pressure-request-id` along with the attempt number.
    pub async fn complete_as(
        &self,
        use_case: &str,
        req: ChatRequest,
        request_id: String,
    ) -> Result<Answer, LlmError> {
        Metrics::add(&self.metrics.requests, 1);
        let result = self
            .run(use_case, req, Mode::Complete, request_id)
            .await
            .and_then(|s| {
                let reply = match s.payload {
                    Payload::Reply(reply) => reply,
                    // Complete mode never commits a stream.
                    Payload::Live(_) => return Err(LlmError::NoAnswer),
                };
                Ok(Answer {
                    reply,
                    level: s.level,
                    degradation: s.degradation,
                    model: s.model,
                    attempts: s.attempts,
                    spent: s.spent,
                    failed_spent: s.failed_spent,
                })
            });
        match &result {
            Ok(a) => self.metrics.served(a.degradation.as_str()),
            Err(e) => self.metrics.error(e.label()),
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

    /// [`stream`](Self::stream) under the caller's event id, like
    /// [`complete_as`](Self::complete_as).
    pub async fn stream_as(
        &self,
        use_case: &str,
        req: ChatRequest,
        request_id: String,
    ) -> Result<AnswerStream<B>, LlmError> {
        Metrics::add(&self.metrics.requests, 1);
        let include_usage = req
            .stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false);
        let result = self.run(use_case, req, Mode::Stream, request_id).await;
        match &result {
            Ok(s) => self.metrics.served(s.degradation.as_str()),
            Err(e) => self.metrics.error(e.label()),
        }
        result.map(|s| AnswerStream::new(s, Arc::clone(&self.metrics), self.counter.clone(), include_usage))
    }

    async fn run(
        &self,
        use_case: &str,
        req: ChatRequest,
        mode: Mode,
        request_id: String,
    ) -> Result<Served<B>, LlmError> {
        let uc = self
            .config
            .use_cases
            .get(use_case)
            .ok_or_else(|| LlmError::UnknownUseCase(use_case.to_owned()))?;
        self.expect_kind(use_case, crate::pipeline::ModelKind::Chat)?;
        let total = uc.total();
        let deadline = Instant::now() + total;
        let deadline_nanos = self.clock.now_nanos().saturating_add(duration_to_nanos(total));

        // Reservations of every model level, before anything is touched.
        let mut plans: Vec<Option<Reservation>> = Vec::with_capacity(uc.chain.len());
        let mut first_context_error = None;
        let mut model_levels = 0usize;
        for level in &uc.chain {
            let ChainLevel::Model(key) = level else {
                plans.push(None);
                continue;
            };
            model_levels += 1;
            let Some(m) = self.models.get(key) else {
                plans.push(None);
                continue;
            };
            let input = self.count_input(&m.model, &req)?;
            let max_tokens = req.max_output_tokens().map(u64::from);
            match Reservation::for_request(input, max_tokens, &m.context) {
                Ok(r) => plans.push(Some(r.with_priority(uc.priority.broker_priority()))),
                Err(e) => {
                    first_context_error.get_or_insert(e);
                    plans.push(None);
                }
            }
        }
        if model_levels > 0 && plans.iter().all(Option::is_none) {
            if let Some(e) = first_context_error {
                return Err(LlmError::ContextLength(e));
            }
        }

        let mut event = Event {
            request_id,
            retry: RetryState::new(&uc.retry, Some(deadline_nanos)),
            attempts: 0,
            spent: Money::ZERO,
            failed_spent: Money::ZERO,
            retry_at: None,
        };
        let mut last_error: Option<LlmError> = None;
        let mut model_ordinal = 0usize;
        for (i, level) in uc.chain.iter().enumerate() {
            match level {
                ChainLevel::Model(key) => {
                    let ordinal = model_ordinal;
                    model_ordinal += 1;
                    let (Some(m), Some(reservation)) = (self.models.get(key), plans[i]) else {
                        continue;
                    };
                    if Instant::now() >= deadline {
                        last_error = Some(LlmError::DeadlineExceeded {
                            total_ms: duration_ms(total),
                        });
                        continue;
                    }
                    event.retry.start_fallback_level();
                    match self
                        .run_model(uc, m, reservation, &req, deadline, &mut event, mode)
                        .await
                    {
                        Ok(got) => {
                            return Ok(Served {
                                payload: match got {
                                    Got::Response(response) => Payload::Reply(Reply::Completion(response)),
                                    Got::Live(live) => Payload::Live(live),
                                },
                                level: i,
                                degradation: if ordinal == 0 {
                                    Degradation::Primary
                                } else {
                                    Degradation::Backup(ordinal)
                                },
                                model: Some(m.key.clone()),
                                attempts: event.attempts,
                                spent: event.spent,
                                failed_spent: event.failed_spent,
                            })
                        }
                        Err(LevelEnd::Next(e)) => {
                            event.note_retry(&e);
                            last_error = Some(e);
                        }
                        Err(LevelEnd::Fail(e)) => return Err(e),
                    }
                }
                ChainLevel::Rules(name) => {
                    let Some(handler) = self.handlers.get(name) else {
                        tracing::warn!(use_case, rules = %name, "no handler registered for rules level; skipped");
                        continue;
                    };
                    if let Some(response) = handler.handle(&req) {
                        return Ok(self.answer(Reply::Completion(response), i, Degradation::Rules, &event));
                    }
                }
                ChainLevel::ManualQueue(_) => {
                    let ticket = self.queue.push(use_case, &req).await?;
                    return Ok(self.answer(Reply::Queued { ticket }, i, Degradation::ManualQueue, &event));
                }
            }
        }
        // Given up: the error says when the soonest level could answer.
        Err(last_error.map_or(LlmError::NoAnswer, |e| e.with_retry_after(event.retry_after())))
    }

    fn answer(&self, reply: Reply, level: usize, degradation: Degradation, event: &Event) -> Served<B> {
        Served {
            payload: Payload::Reply(reply),
            level,
            degradation,
            model: None,
            attempts: event.attempts,
            spent: event.spent,
            failed_spent: event.failed_spent,
        }
    }

    fn count_input(&self, model: &str, req: &ChatRequest) -> Result<u64, LlmError> {
        let messages: Vec<(String, String)> =
            req.messages.iter().map(|m| (m.role.clone(), m.text())).collect();
        Ok(self.counter.count_chat(model, &messages)?)
    }

    /// The gate before each attempt on model `m`, for chat and embeddings
    /// alike. A provider hold (its rate-limit headers said the quota is
    /// spent) is a limiter denial: waited out when it ends before the
    /// deadline, else the level is refused. Then the breaker: an open
    /// breaker costs no quota and no call. Then the limiter, within the
    /// time left. The limiter may take a while (a wait for capacity, a
    /// store round trip): if the breaker changed state meanwhile, its
    /// permit is void, so the reservation is given back and the gate is
    /// asked again, and an open breaker sends nothing.
    pub(super) async fn gate(
        &self,
        m: &ModelEntry,
        breaker: &CircuitBreaker,
        reservation: &Reservation,
        now: Instant,
        deadline: Instant,
    ) -> Gate<B> {
        let held = m.hold.load(Ordering::Relaxed);
        let now_nanos = self.clock.now_nanos();
        if held > now_nanos {
            let wait = Duration::from_nanos(held - now_nanos);
            if now + wait <= deadline {
                tokio::time::sleep_until(now + wait).await;
                return Gate::Again;
            }
            Metrics::add(&self.metrics.limiter_rejections, 1);
            return Gate::Refused(LlmError::NoCapacity {
                resource: resource_id(&m.provider, &m.model),
                retry_after: Some(wait),
            });
        }
        let bp = match breaker.acquire().await {
            Ok(p) => p,
            Err(rejected) => {
                Metrics::add(&self.metrics.breaker_rejections, 1);
                return Gate::Refused(LlmError::BreakerOpen {
                    provider: m.provider.clone(),
                    model: m.model.clone(),
                    retry_after: Some(rejected.retry_in),
                });
            }
        };
        let permit = match &m.resource {
            None => None,
            Some(resource) => {
                let remaining = deadline.saturating_duration_since(now);
                match self
                    .broker
                    .acquire_within(resource, reservation.acquire_options(), remaining)
                    .await
                {
                    Ok(p) => Some(p),
                    Err(e) => {
                        bp.ignore();
                        Metrics::add(&self.metrics.limiter_rejections, 1);
                        return Gate::Refused(match e {
                            pressure_core::Error::WaitExceeded { wait, .. } => LlmError::NoCapacity {
                                resource: resource.clone(),
                                retry_after: Some(wait),
                            },
                            // Never fits: no wait would help.
                            pressure_core::Error::DemandTooLarge { .. } => LlmError::NoCapacity {
                                resource: resource.clone(),
                                retry_after: None,
                            },
                            other => LlmError::Limiter(other),
                        });
                    }
                }
            }
        };
        if !bp.is_current() {
            if let Some(mut p) = permit {
                if let Err(e) = p.reconcile(Reservation::actual((0, 0))).await {
                    tracing::warn!(model = %m.key, error = %e, "reconcile failed");
                }
            }
            bp.ignore();
            return Gate::Again;
        }
        Gate::Go(bp, permit)
    }

    /// Retries one model level until it answers, gives up, or the deadline passes.
    #[allow(clippy::too_many_arguments)]
    async fn run_model(
        &self,
        uc: &UseCaseConfig,
        m: &ModelEntry,
        reservation: Reservation,
        req: &ChatRequest,
        deadline: Instant,
        event: &mut Event,
        mode: Mode,
    ) -> Result<Got<B>, LevelEnd> {
        let Some(provider) = self.providers.get(&m.provider) else {
            return Err(LevelEnd::Next(LlmError::NoAnswer));
        };
        let breaker = self.breakers.get(&m.provider, &m.model);
        let mut call = req.clone();
        call.model = m.model.clone();
        if provider.kind() == ProviderKind::Anthropic && call.max_output_tokens().is_none() {
            // Anthropic requires `max_tokens`: send the output reserved for the call.
            call.max_tokens = u32::try_from(reservation.output_tokens).ok();
        }
        let deadline_error = || LlmError::DeadlineExceeded {
            total_ms: duration_ms(uc.total()),
        };
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(LevelEnd::Next(deadline_error()));
            }
            let (bp, mut permit) = match self.gate(m, &breaker, &reservation, now, deadline).await {
                Gate::Go(bp, permit) => (bp, permit),
                Gate::Again => continue,
                Gate::Refused(e) => return Err(LevelEnd::Next(e)),
            };
            event.attempts += 1;
            Metrics::add(&self.metrics.attempts, 1);
            let tag = CallTag {
                request_id: Some(event.request_id.clone()),
                attempt: event.attempts,
                probe: bp.is_probe(),
            };
            let attempt = match mode {
                Mode::Complete => provider
                    .complete_tagged(&call, deadline, &tag)
                    .await
                    .map(|done| Attempt::Done(Box::new(done))),
                Mode::Stream => super::stream::open(provider, &call, deadline, &tag)
                    .await
                    .map(|opened| Attempt::Live(Box::new(opened))),
            };
            match attempt {
                Ok(Attempt::Live(opened)) => {
                    let (stream, buffered) = *opened;
                    self.apply_hints(m, stream.ratelimit(), &reservation);
                    // Committed at the first output chunk: the permits now live in the stream.
                    return Ok(Got::Live(Box::new(Live {
                        stream,
                        buffered,
                        permit,
                        breaker: bp,
                        provider: m.provider.clone(),
                        model: m.model.clone(),
                        input_tokens: reservation.input_tokens,
                        price: m.price,
                    })));
                }
                Ok(Attempt::Done(done)) => {
                    self.apply_hints(m, &done.ratelimit, &reservation);
                    self.metrics
                        .timing(&m.provider, &m.model, Some(done.ttft), Some(done.total));
                    let (prompt, completion) = done
                        .usage
                        .as_ref()
                        .map(|u| (u.prompt_tokens, u.completion_tokens))
                        .unwrap_or((reservation.input_tokens, reservation.output_tokens));
                    if let Some(permit) = permit.as_mut() {
                        if let Err(e) = permit.reconcile(Reservation::actual((prompt, completion))).await {
                            tracing::warn!(model = %m.key, error = %e, "reconcile failed");
                        }
                    }
                    bp.success(done.ttft);
                    let cost = m.price.cost(prompt, completion);
                    event.spent = event.spent + cost;
                    Metrics::add(&self.metrics.spent_micro_usd, cost.micro_usd());
                    return Ok(Got::Response(done.response));
                }
                Err(e) => {
                    let elapsed = bp.elapsed();
                    match breaker_outcome(&e.kind) {
                        Outcome::Failure => bp.failure(elapsed),
                        Outcome::Success => bp.success(elapsed),
                        Outcome::Ignore => bp.ignore(),
                    }
                    // A failure before any output chunk generated no output: refund it.
                    let generated = 0;
                    if let Some(permit) = permit.as_mut() {
                        let actual = Reservation::actual((reservation.input_tokens, generated));
                        if let Err(re) = permit.reconcile(actual).await {
                            tracing::warn!(model = %m.key, error = %re, "reconcile failed");
                        }
                    }
                    self.metrics.attempt_error(e.kind.label());
                    let cost = m
                        .price
                        .cost(reservation.input_tokens, billed_output(&e.kind, &reservation));
                    let next = m.price.cost(reservation.input_tokens, reservation.output_tokens);
                    event.spent = event.spent + cost;
                    event.failed_spent = event.failed_spent + cost;
                    Metrics::add(&self.metrics.spent_micro_usd, cost.micro_usd());
                    Metrics::add(&self.metrics.failed_spent_micro_usd, cost.micro_usd());
                    let decision = event
                        .retry
                        .on_failure(&e.kind, cost, next, self.clock.now_nanos());
                    tracing::debug!(model = %m.key, error = %e.kind, ?decision, "attempt failed");
                    let err = upstream(m, e);
                    match decision {
                        Decision::RetryAfter(wait) => {
                            Metrics::add(&self.metrics.retries, 1);
                            tokio::time::sleep_until((Instant::now() + wait).min(deadline)).await;
                        }
                        Decision::GiveUp(reason) => {
                            let (err, fail) = given_up(err, &reason, deadline_error);
                            return Err(if fail {
                                LevelEnd::Fail(err)
                            } else {
                                LevelEnd::Next(err)
                            });
                        }
                    }
                }
            }
        }
    }
}

impl<B: Backend> LlmClient<B> {
    /// Holds `m` until the reset the provider announced, when [`hold_for`]
    /// says its quota is spent. A hold only ever extends.
    fn apply_hints(&self, m: &ModelEntry, hints: &RateLimitHints, typical: &Reservation) {
        if let Some(d) = hold_for(hints, typical) {
            let until = self.clock.now_nanos().saturating_add(duration_to_nanos(d));
            let before = m.hold.fetch_max(until, Ordering::Relaxed);
            if before < until {
                tracing::info!(model = %m.key, hold_ms = duration_ms(d), "provider rate-limit headers: holding model until reset");
            }
        }
    }
}

/// Longest hold a provider's headers can impose (a guard against a bogus reset).
pub const MAX_PROVIDER_HOLD: Duration = Duration::from_secs(60);

/// How long a (provider, model) must not be called after a successful answer
/// whose rate-limit headers say the quota is spent, before the provider
/// would answer 429:
///
/// * remaining requests is 0 → until the request window resets;
/// * remaining tokens (or, Anthropic, input / output tokens) is below what
///   `typical` (the reservation of the call that got the answer, as an
///   estimate of the next one) needs → until the token window resets.
///
/// Without a reset figure there is no hold (the local limiter and the
/// provider's 429 with `retry-after` still apply). The longest applicable
/// reset wins, capped at [`MAX_PROVIDER_HOLD`]. The hold is kept in this
/// process only (not shared through the broker backend).
pub fn hold_for(hints: &RateLimitHints, typical: &Reservation) -> Option<Duration> {
    let mut hold: Option<Duration> = None;
    let mut extend = |d: Option<Duration>| {
        if let Some(d) = d {
            hold = Some(hold.map_or(d, |h| h.max(d)));
        }
    };
    if hints.remaining_requests == Some(0) {
        extend(hints.reset_requests);
    }
    let total = typical.input_tokens.saturating_add(typical.output_tokens);
    let short = hints.remaining_tokens.is_some_and(|r| r < total)
        || hints
            .remaining_input_tokens
            .is_some_and(|r| r < typical.input_tokens)
        || hints
            .remaining_output_tokens
            .is_some_and(|r| r < typical.output_tokens);
    if short {
        extend(hints.reset_tokens);
    }
    hold.filter(|d| !d.is_zero()).map(|d| d.min(MAX_PROVIDER_HOLD))
}

/// How a level ends when its retries gave up on `err` for `reason`: a
/// total timeout is the use case's deadline error, and the event fails
/// (no fallback) only when the reason says so and the deadline has not
/// passed. Returns the error and whether the event fails.
pub(super) fn given_up(
    err: LlmError,
    reason: &GiveUpReason,
    deadline_error: impl FnOnce() -> LlmError,
) -> (LlmError, bool) {
    let err = match &err {
        LlmError::Upstream {
            kind: ErrorKind::Timeout {
                phase: TimeoutPhase::Total,
            },
            ..
        } => deadline_error(),
        _ => err,
    };
    let fail = reason.disposition() == Disposition::Fail && !matches!(err, LlmError::DeadlineExceeded { .. });
    (err, fail)
}

/// A failed provider call of `m` as the pipeline's error.
pub(super) fn upstream(m: &ModelEntry, e: CallError) -> LlmError {
    LlmError::Upstream {
        provider: m.provider.clone(),
        model: m.model.clone(),
        kind: e.kind,
        status: e.status,
        message: e.message,
    }
}

pub(super) enum Outcome {
    Failure,
    Success,
    Ignore,
}

/// How a failed attempt counts for the breaker; see the module docs.
/// Output tokens a failed attempt is assumed to have cost: the whole
/// reservation when we stopped waiting for a provider that had the request
/// (a first-byte, read or deadline timeout: providers go on generating, and
/// billing, after the client has gone — the chaos stand's stall scenario
/// measures it), none otherwise. The money budget then stops retries that
/// would burn more than it allows, instead of counting only the prompt.
pub(super) fn billed_output(kind: &ErrorKind, reservation: &Reservation) -> u64 {
    match kind {
        ErrorKind::Timeout {
            phase: TimeoutPhase::FirstByte | TimeoutPhase::Read | TimeoutPhase::Total,
        } => reservation.output_tokens,
        _ => 0,
    }
}

pub(super) fn breaker_outcome(kind: &ErrorKind) -> Outcome {
    match kind {
        ErrorKind::RateLimited { .. } | ErrorKind::QuotaExhausted | ErrorKind::Conflict => Outcome::Ignore,
        ErrorKind::BadRequest | ErrorKind::ContextLength | ErrorKind::ContentRefusal => Outcome::Success,
        _ => Outcome::Failure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_we_stopped_waiting_for_is_charged_its_whole_output() {
        let limits = ModelLimits {
            context_tokens: 1_000,
            max_output_tokens: 100,
            default_max_tokens: None,
        };
        let r = Reservation::for_request(40, Some(64), &limits).unwrap();
        let timeout = |phase| ErrorKind::Timeout { phase };
        for phase in [TimeoutPhase::FirstByte, TimeoutPhase::Read, TimeoutPhase::Total] {
            assert_eq!(billed_output(&timeout(phase), &r), 64, "{phase:?}");
        }
        for phase in [TimeoutPhase::Connect, TimeoutPhase::PoolWait, TimeoutPhase::Write] {
            assert_eq!(
                billed_output(&timeout(phase), &r),
                0,
                "{phase:?}: the provider never had it"
            );
        }
        assert_eq!(
            billed_output(&ErrorKind::RateLimited { retry_after: None }, &r),
            0
        );
        assert_eq!(billed_output(&ErrorKind::BadRequest, &r), 0);
    }
}
