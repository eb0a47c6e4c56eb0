//! [`LlmClient::embed`]: one embeddings event of a use case whose chain
//! holds embedding models (`"kind": "embedding"`), through the same layers
//! as a chat completion (DESIGN §6.1):
//!
//! * one deadline (`totalMs`) covers every retry and fallback;
//! * the request is checked first ([`EmbeddingRequest::validate`]): a
//!   request OpenAI would refuse, a chat use case, or inputs longer than
//!   every level's `maxInputTokens` fail with a 400 before any call;
//! * each model level asks its breaker (open: next level, no call, no
//!   quota), then reserves **one request and the input tokens** (no output
//!   tokens: embeddings produce none) on `llm:<provider>:<model>` within the
//!   time left (none: next level), then calls `POST {baseUrl}/embeddings`;
//!   the reservation is reconciled to the answer's `usage.prompt_tokens`;
//! * a failure is priced on its input tokens into the event's money budget,
//!   and the retry decision retries the level, falls to the next embedding
//!   model, or fails the event.
//!
//! Embedding chains hold model levels only (configuration validation
//! refuses `rules` and `manualQueue` there), so the answer is always a
//! model's: [`Degradation::Primary`] or [`Degradation::Backup`].
//!
//! A failed event says when to try again ([`EmbeddingError::retry_after`]):
//! the limiter's wait, the breaker's remaining open time or the provider's
//! `retry-after`, of the last level that refused.

use std::sync::atomic::Ordering;
use std::time::Duration;

use pressure_core::clock::{duration_to_millis as duration_ms, duration_to_nanos};
use pressure_core::Backend;
use tokio::time::Instant;

use super::client::{breaker_outcome, given_up, hold_for, upstream, Gate, ModelEntry, Outcome};
use super::config::{ChainLevel, ModelKind, UseCaseConfig};
use super::metrics::Metrics;
use super::{Degradation, LlmClient, LlmError};
use crate::price::Money;
use crate::provider::{CallTag, EmbeddingRequest, EmbeddingResponse, InputItem};
use crate::reservation::Reservation;
use crate::retry::{Decision, RetryState};

/// The answer of one embeddings event.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingAnswer {
    /// The provider's answer (vectors, model, usage).
    pub response: EmbeddingResponse,
    /// Index of the chain level that served it.
    pub level: usize,
    /// `Primary` or `Backup(n)`.
    pub degradation: Degradation,
    /// `provider/model` of that level.
    pub model: String,
    /// Provider calls made (all levels).
    pub attempts: u32,
    /// Money spent on every attempt, the successful one included.
    pub spent: Money,
    /// Money spent on failed attempts.
    pub failed_spent: Money,
}

/// Why an embeddings event got no answer, and when it could be tried again.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct EmbeddingError {
    /// What failed (its [`LlmError::openai_error`] is the HTTP answer).
    pub error: LlmError,
    /// When the last level that refused would take a request again: the
    /// limiter's wait, the breaker's open time or the provider's
    /// `retry-after`; `None` when it said nothing.
    pub retry_after: Option<Duration>,
}

impl From<LlmError> for EmbeddingError {
    fn from(error: LlmError) -> Self {
        Self {
            error,
            retry_after: None,
        }
    }
}

impl EmbeddingError {
    fn with_wait(error: LlmError, wait: Option<Duration>) -> Self {
        Self {
            error,
            retry_after: wait.filter(|d| !d.is_zero()),
        }
    }
}

/// The gate's refusal as an embeddings level ends with it: the wait of a
/// capacity refusal travels in the [`EmbeddingError`] (not in the error
/// itself); a breaker's stays in both.
fn refusal(error: LlmError) -> EmbeddingError {
    match error {
        LlmError::NoCapacity {
            resource,
            retry_after,
        } => EmbeddingError::with_wait(
            LlmError::NoCapacity {
                resource,
                retry_after: None,
            },
            retry_after,
        ),
        LlmError::BreakerOpen {
            provider,
            model,
            retry_after,
        } => EmbeddingError::with_wait(
            LlmError::BreakerOpen {
                provider,
                model,
                retry_after,
            },
            retry_after,
        ),
        other => other.into(),
    }
}

/// How a level ended without an answer.
enum Step {
    Next(EmbeddingError),
    Fail(EmbeddingError),
}

/// The running totals of one event.
struct Totals {
    request_id: String,
    retry: RetryState,
    attempts: u32,
    spent: Money,
    failed_spent: Money,
}

impl<B: Backend> LlmClient<B> {
    /// Fails with [`LlmError::WrongKind`] when `use_case` serves another
    /// kind than `want` (an unknown use case passes: the caller reports it).
    pub(super) fn expect_kind(&self, use_case: &str, want: ModelKind) -> Result<(), LlmError> {
        match self.config().use_case_kind(use_case) {
            Some(serves) if serves != want => Err(LlmError::WrongKind {
                use_case: use_case.to_owned(),
                serves,
            }),
            _ => Ok(()),
        }
    }

    /// Runs one embeddings event of `use_case`: see the [module docs](self).
    pub async fn embed(
        &self,
        use_case: &str,
        req: EmbeddingRequest,
    ) -> Result<EmbeddingAnswer, EmbeddingError> {
        self.embed_as(use_case, req, self.new_request_id()).await
    }

    /// [`embed`](Self::embed) under the caller's event id, sent with every
    /// provider call as `x-pressure-request-id`. Counted in the client's
    /// metrics like a chat event (requests, attempts, spend, errors,
    /// answers by level) and in `embedding_requests` /
    /// `embedding_spent_micro_usd`.
    pub async fn embed_as(
        &self,
        use_case: &str,
        req: EmbeddingRequest,
        request_id: String,
    ) -> Result<EmbeddingAnswer, EmbeddingError> {
        Metrics::add(&self.metrics.requests, 1);
        Metrics::add(&self.metrics.embedding_requests, 1);
        let result = self.run_embedding(use_case, req, request_id).await;
        match &result {
            Ok(a) => self.metrics.served(a.degradation.as_str()),
            Err(e) => self.metrics.error(e.error.label()),
        }
        result
    }

    /// Tokens of each input, counted with `model`'s tokenizer (token-id
    /// inputs count their ids).
    fn count_inputs(&self, model: &str, req: &EmbeddingRequest) -> Result<Vec<u64>, LlmError> {
        req.input
            .items()
            .into_iter()
            .map(|item| match item {
                InputItem::Text(t) => Ok(self.counter.count_text(model, t)?),
                InputItem::Tokens(ids) => Ok(ids.len() as u64),
            })
            .collect()
    }

    async fn run_embedding(
        &self,
        use_case: &str,
        req: EmbeddingRequest,
        request_id: String,
    ) -> Result<EmbeddingAnswer, EmbeddingError> {
        let uc = self
            .config()
            .use_cases
            .get(use_case)
            .ok_or_else(|| LlmError::UnknownUseCase(use_case.to_owned()))?;
        self.expect_kind(use_case, ModelKind::Embedding)?;
        req.validate().map_err(LlmError::InvalidEmbedding)?;
        let total = uc.total();
        let deadline = Instant::now() + total;
        let deadline_nanos = self.clock.now_nanos().saturating_add(duration_to_nanos(total));

        // Each level's reservation (input tokens only), before any call.
        let mut plans: Vec<Option<Reservation>> = Vec::with_capacity(uc.chain.len());
        let mut too_long = None;
        for level in &uc.chain {
            let (ChainLevel::Model(key), Some(m)) = (level, self.model_entry(level)) else {
                plans.push(None);
                continue;
            };
            let counts = self.count_inputs(&m.model, &req)?;
            let max = self.config().model(key).and_then(|c| c.max_input_tokens);
            let over = max.and_then(|max| {
                counts
                    .iter()
                    .position(|&n| n > max)
                    .map(|index| (index, counts[index], max))
            });
            match over {
                Some((index, tokens, max)) => {
                    too_long.get_or_insert(LlmError::InputTooLong { index, tokens, max });
                    plans.push(None);
                }
                None => plans.push(Some(
                    Reservation::new(counts.iter().sum(), 0).with_priority(uc.priority.broker_priority()),
                )),
            }
        }
        if plans.iter().all(Option::is_none) {
            return Err(too_long.unwrap_or(LlmError::NoAnswer).into());
        }

        let mut totals = Totals {
            request_id,
            retry: RetryState::new(&uc.retry, Some(deadline_nanos)),
            attempts: 0,
            spent: Money::ZERO,
            failed_spent: Money::ZERO,
        };
        let mut last: Option<EmbeddingError> = None;
        let mut ordinal = 0usize;
        for (i, level) in uc.chain.iter().enumerate() {
            let this = ordinal;
            ordinal += usize::from(matches!(level, ChainLevel::Model(_)));
            let (Some(m), Some(reservation)) = (self.model_entry(level), plans[i]) else {
                continue;
            };
            if Instant::now() >= deadline {
                last = Some(
                    LlmError::DeadlineExceeded {
                        total_ms: duration_ms(total),
                    }
                    .into(),
                );
                break;
            }
            totals.retry.start_fallback_level();
            match self
                .embed_level(uc, m, reservation, &req, deadline, &mut totals)
                .await
            {
                Ok(response) => {
                    return Ok(EmbeddingAnswer {
                        response,
                        level: i,
                        degradation: if this == 0 {
                            Degradation::Primary
                        } else {
                            Degradation::Backup(this)
                        },
                        model: m.key.clone(),
                        attempts: totals.attempts,
                        spent: totals.spent,
                        failed_spent: totals.failed_spent,
                    })
                }
                Err(Step::Next(e)) => last = Some(e),
                Err(Step::Fail(e)) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| LlmError::NoAnswer.into()))
    }

    fn model_entry(&self, level: &ChainLevel) -> Option<&ModelEntry> {
        match level {
            ChainLevel::Model(key) => self.models.get(key),
            _ => None,
        }
    }

    /// Retries one embedding model until it answers, gives up, or the
    /// deadline passes; the steps of `run_model` for a chat level.
    async fn embed_level(
        &self,
        uc: &UseCaseConfig,
        m: &ModelEntry,
        reservation: Reservation,
        req: &EmbeddingRequest,
        deadline: Instant,
        totals: &mut Totals,
    ) -> Result<EmbeddingResponse, Step> {
        let Some(provider) = self.providers.get(&m.provider) else {
            return Err(Step::Next(LlmError::NoAnswer.into()));
        };
        let breaker = self.breakers().get(&m.provider, &m.model);
        let mut call = req.clone();
        call.model = m.model.clone();
        let deadline_error = || LlmError::DeadlineExceeded {
            total_ms: duration_ms(uc.total()),
        };
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(Step::Next(deadline_error().into()));
            }
            let (bp, mut permit) = match self.gate(m, &breaker, &reservation, now, deadline).await {
                Gate::Go(bp, permit) => (bp, permit),
                Gate::Again => continue,
                Gate::Refused(e) => return Err(Step::Next(refusal(e))),
            };
            totals.attempts += 1;
            Metrics::add(&self.metrics.attempts, 1);
            let tag = CallTag {
                request_id: Some(totals.request_id.clone()),
                attempt: totals.attempts,
                probe: bp.is_probe(),
            };
            match provider.embed_tagged(&call, deadline, &tag).await {
                Ok(done) => {
                    if let Some(d) = hold_for(&done.ratelimit, &reservation) {
                        let until = self.clock.now_nanos().saturating_add(duration_to_nanos(d));
                        m.hold.fetch_max(until, Ordering::Relaxed);
                    }
                    self.metrics
                        .timing(&m.provider, &m.model, Some(done.ttft), Some(done.total));
                    let prompt = done
                        .response
                        .usage
                        .as_ref()
                        .map_or(reservation.input_tokens, |u| u.prompt_tokens);
                    if let Some(p) = permit.as_mut() {
                        if let Err(e) = p.reconcile(Reservation::actual((prompt, 0))).await {
                            tracing::warn!(model = %m.key, error = %e, "reconcile failed");
                        }
                    }
                    bp.success(done.ttft);
                    let cost = m.price.cost(prompt, 0);
                    totals.spent = totals.spent + cost;
                    self.add_spend(cost, false);
                    return Ok(done.response);
                }
                Err(e) => {
                    let elapsed = bp.elapsed();
                    match breaker_outcome(&e.kind) {
                        Outcome::Failure => bp.failure(elapsed),
                        Outcome::Success => bp.success(elapsed),
                        Outcome::Ignore => bp.ignore(),
                    }
                    if let Some(p) = permit.as_mut() {
                        let actual = Reservation::actual((reservation.input_tokens, 0));
                        if let Err(re) = p.reconcile(actual).await {
                            tracing::warn!(model = %m.key, error = %re, "reconcile failed");
                        }
                    }
                    self.metrics.attempt_error(e.kind.label());
                    // Like a chat attempt, a failed call costs its input tokens.
                    let cost = m.price.cost(reservation.input_tokens, 0);
                    totals.spent = totals.spent + cost;
                    totals.failed_spent = totals.failed_spent + cost;
                    self.add_spend(cost, true);
                    let decision = totals
                        .retry
                        .on_failure(&e.kind, cost, cost, self.clock.now_nanos());
                    tracing::debug!(model = %m.key, error = %e.kind, ?decision, "embeddings attempt failed");
                    let wait = e.kind.retry_after();
                    let error = upstream(m, e);
                    match decision {
                        Decision::RetryAfter(d) => {
                            Metrics::add(&self.metrics.retries, 1);
                            tokio::time::sleep_until((Instant::now() + d).min(deadline)).await;
                        }
                        Decision::GiveUp(reason) => {
                            let (error, fail) = given_up(error, &reason, deadline_error);
                            let refused = EmbeddingError::with_wait(error, wait);
                            return Err(if fail {
                                Step::Fail(refused)
                            } else {
                                Step::Next(refused)
                            });
                        }
                    }
                }
            }
        }
    }

    /// Adds an attempt's cost to the spend counters (and the failed spend).
    fn add_spend(&self, cost: Money, failed: bool) {
        let micro = cost.micro_usd();
        Metrics::add(&self.metrics.spent_micro_usd, micro);
        Metrics::add(&self.metrics.embedding_spent_micro_usd, micro);
        if failed {
            Metrics::add(&self.metrics.failed_spent_micro_usd, micro);
        }
    }
}
