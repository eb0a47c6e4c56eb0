//! The chain walk of one event, for every kind of call.
//!
//! * one deadline (`totalMs`) covers every retry and every fallback;
//! * the reservation of every model level is estimated first ([`Request::plan`]):
//!   levels the request cannot fit are skipped, and when it fits none, the
//!   event fails with the first level's reason before any provider or quota
//!   is touched;
//! * the event's payer ([`Caller::payer`]), if any, is charged every
//!   attempt beside the model (`gate`);
//! * each model level runs its retry loop (`level`), with a provider hold
//!   waited for only within the level's share of the time left (the time
//!   left divided by the model levels still to try, this one included), so
//!   an idle backup answers instead of a wait for a held primary;
//! * a `knn` level embeds the request's text with its local model through
//!   the same retry loop (`knn`) and answers with the examples' vote; it
//!   still runs once the deadline has passed (its call gets at least
//!   [`KNN_MIN_TIME`](crate::pipeline::knn::KNN_MIN_TIME));
//! * levels without a model (`rules`, `manualQueue`) ask the request
//!   ([`Request::degraded`]); they still run once the deadline has passed: they
//!   make no provider call, and a degraded answer beats none;
//! * when every level gave up, the last error says when to ask again
//!   ([`RetryHint`](super::hint::RetryHint)).

use std::time::Duration;

use pressure_core::clock::{duration_to_millis, duration_to_nanos};
use pressure_core::Backend;
use tokio::time::Instant;

use super::call::{Call, Request};
use super::hint::RetryHint;
use super::level::{Event, LevelEnd};
use super::pool::Member;
use super::rotation::Rotation;
use super::Engine;
use crate::pipeline::answer::Degradation;
use crate::pipeline::caller::{Caller, CallerTrace};
use crate::pipeline::config::{ChainLevel, ModelKind, UseCaseConfig};
use crate::pipeline::error::LlmError;
use crate::price::Money;
use crate::reservation::Reservation;
use crate::retry::RetryState;
use pressure_core::trace::{Span, SpanKind};

/// The span of an event of `use_case` (tracing on, sampled): its attempts
/// are its children (`event.trace`), its fallbacks its events; it ends
/// with the walk.
fn event_span<B: Backend>(trace: Option<&CallerTrace>, use_case: &str, event: &mut Event<B>) -> Option<Span> {
    let t = trace?;
    let mut span = t.tracer.start(
        Some(&t.parent),
        format!("pressure.llm {use_case}"),
        SpanKind::Internal,
    )?;
    span.set("pressure.use_case", use_case.to_owned());
    event.trace = Some((t.tracer.clone(), span.context().clone()));
    Some(span)
}

/// The event falls back to chain level `level` after `e`.
fn fell_back(span: &mut Span, level: usize, e: &LlmError) {
    span.event(
        "pressure.fallback",
        vec![
            (
                "pressure.level".into(),
                u64::try_from(level).unwrap_or(u64::MAX).into(),
            ),
            ("error.type".into(), e.to_string().into()),
        ],
    );
}

/// Chain level `level` answered the event.
fn answered<B: Backend>(span: &mut Span, level: usize, event: &Event<B>) {
    span.set("pressure.level", u64::try_from(level).unwrap_or(u64::MAX));
    span.set("pressure.attempts", event.attempts);
    span.set("pressure.cost_micro_usd", event.spent.micro_usd());
}

/// The model levels among `chain` that the request fits (at least 1):
/// `plans` holds the reservations of their models, in order.
fn levels_fitting(chain: &[ChainLevel], plans: &[Option<Reservation>]) -> usize {
    let mut at = 0usize;
    let mut fitting = 0usize;
    for level in chain {
        let n = level.model_keys().count();
        if plans
            .get(at..at + n)
            .is_some_and(|p| p.iter().any(Option::is_some))
        {
            fitting += 1;
        }
        at += n;
    }
    fitting.max(1)
}

/// What one level of the chain came to.
enum Step<O> {
    /// It answered: the output, how degraded, and the `provider/model` of
    /// a model level.
    Answered(O, Degradation, Option<String>),
    /// It had no answer; the walk goes on, remembering the error, if any,
    /// for when no later level answers either.
    Passed(Option<LlmError>),
}

/// A model level of the chain (a model or a pool), as the walk reaches it.
struct ModelLevel<'a> {
    /// The level: a model, or a pool of them.
    level: &'a ChainLevel,
    /// Its rotation, when it is a pool.
    rotation: Option<&'a Rotation>,
    /// Its place among the chain's model levels (0: the primary).
    ordinal: usize,
    /// What each of its models ([`ChainLevel::model_keys`]) reserves per
    /// attempt; `None`: the request does not fit that model.
    reservations: &'a [Option<Reservation>],
    /// The model levels the request fits from this one on, this one
    /// included (at least 1): the level gets that share of the time left.
    levels_left: usize,
}

/// What served an event, with the event's totals.
#[derive(Debug)]
pub(crate) struct Served<O> {
    pub(crate) level: usize,
    pub(crate) degradation: Degradation,
    /// `provider/model` for a model level.
    pub(crate) model: Option<String>,
    pub(crate) attempts: u32,
    pub(crate) spent: Money,
    pub(crate) failed_spent: Money,
    pub(crate) output: O,
}

impl<B: Backend> Engine<B> {
    /// Fails with [`LlmError::WrongKind`] when `use_case` serves another
    /// kind than `want` (an unknown use case passes: the caller reports it).
    fn expect_kind(&self, use_case: &str, want: ModelKind) -> Result<(), LlmError> {
        match self.config.use_case_kind(use_case) {
            Some(serves) if serves != want => Err(LlmError::WrongKind {
                use_case: use_case.to_owned(),
                serves,
            }),
            _ => Ok(()),
        }
    }

    /// The reservation of every model of every level of `uc`, in the
    /// chain's order (the keys of each level's [`ChainLevel::model_keys`],
    /// one after the other), before anything is touched (`None`: the
    /// request does not fit that model); when the request fits no model
    /// of the chain, the first misfit's reason.
    fn plans<R: Request<B>>(
        &self,
        uc: &UseCaseConfig,
        req: &R,
    ) -> Result<Vec<Option<Reservation>>, LlmError> {
        let keys = uc.chain.iter().map(|l| l.model_keys().count()).sum();
        let mut plans: Vec<Option<Reservation>> = Vec::with_capacity(keys);
        let mut first_misfit = None;
        for key in uc.chain.iter().flat_map(ChainLevel::model_keys) {
            let Some(m) = self.models.get(key) else {
                plans.push(None);
                continue;
            };
            match req.plan(self, m)? {
                Ok(r) => plans.push(Some(r.with_priority(uc.priority.broker_priority()))),
                Err(e) => {
                    first_misfit.get_or_insert(e);
                    plans.push(None);
                }
            }
        }
        match first_misfit {
            Some(e) if keys > 0 && plans.iter().all(Option::is_none) => Err(e),
            _ => Ok(plans),
        }
    }

    /// Runs one event of `use_case`: see the module docs.
    pub(crate) async fn walk<C: Call<B>>(
        &self,
        use_case: &str,
        call: &C,
        caller: Caller<B>,
    ) -> Result<Served<C::Output>, LlmError> {
        let uc = self
            .config
            .use_cases
            .get(use_case)
            .ok_or_else(|| LlmError::UnknownUseCase(use_case.to_owned()))?;
        let req = call.request();
        self.expect_kind(use_case, <C::Request as Request<B>>::KIND)?;
        req.validate()?;
        let total = uc.total();
        let deadline = Instant::now() + total;
        let plans = self.plans(uc, req)?;
        let trace = caller.trace.clone();
        let mut event = self.start_event(uc, caller, total);
        let mut span = event_span(trace.as_ref(), use_case, &mut event);

        let mut last_error: Option<LlmError> = None;
        let mut ordinal = 0usize;
        // The plans of the levels before this one.
        let mut planned = 0usize;
        for (i, level) in uc.chain.iter().enumerate() {
            event.level = i;
            if let (Some(span), Some(e)) = (span.as_mut(), last_error.as_ref()) {
                fell_back(span, i, e);
            }
            let step = match level {
                ChainLevel::Knn(knn) => {
                    let priority = uc.priority.broker_priority();
                    match self.knn_level(knn, req, priority, deadline, &mut event).await {
                        Ok(Some(answer)) => Step::Answered(C::degraded(answer), Degradation::Knn, None),
                        Ok(None) => Step::Passed(None),
                        Err(e) => {
                            tracing::debug!(use_case, level = i, error = %e, "knn level gave no answer");
                            Step::Passed(Some(e))
                        }
                    }
                }
                ChainLevel::Model(_) | ChainLevel::Pool(_) => {
                    let this = ordinal;
                    ordinal += 1;
                    let n = level.model_keys().count();
                    let level = ModelLevel {
                        level,
                        rotation: self.rotations.get(use_case).and_then(|r| r.get(&i)),
                        ordinal: this,
                        reservations: plans.get(planned..planned + n).unwrap_or_default(),
                        levels_left: levels_fitting(&uc.chain[i..], plans.get(planned..).unwrap_or_default()),
                    };
                    planned += n;
                    self.model_level(call, uc, &level, deadline, &mut event).await?
                }
                _ => match req.degraded(self, use_case, level).await? {
                    Some(answer) => {
                        let degradation = match level {
                            ChainLevel::ManualQueue(_) => Degradation::ManualQueue,
                            _ => Degradation::Rules,
                        };
                        Step::Answered(C::degraded(answer), degradation, None)
                    }
                    None => Step::Passed(None),
                },
            };
            match step {
                Step::Answered(output, degradation, model) => {
                    if let Some(span) = span.as_mut() {
                        answered(span, i, &event);
                    }
                    return Ok(Served {
                        level: i,
                        degradation,
                        model,
                        attempts: event.attempts,
                        spent: event.spent,
                        failed_spent: event.failed_spent,
                        output,
                    });
                }
                Step::Passed(Some(e)) => last_error = Some(e),
                Step::Passed(None) => {}
            }
        }
        // Given up: the error says when the soonest level could answer.
        Err(last_error.map_or(LlmError::NoAnswer, |e| {
            e.with_retry_after(event.hint.at(Instant::now()))
        }))
    }

    /// The running totals of a new event of `uc` for `caller`, whose
    /// deadline is `total` from now.
    fn start_event(&self, uc: &UseCaseConfig, caller: Caller<B>, total: Duration) -> Event<B> {
        let deadline_nanos = self.clock.now_nanos().saturating_add(duration_to_nanos(total));
        Event {
            request_id: caller.request_id,
            payer: caller.payer,
            retry: RetryState::new(&uc.retry, Some(deadline_nanos)),
            attempts: 0,
            spent: Money::ZERO,
            failed_spent: Money::ZERO,
            hint: RetryHint::default(),
            total_ms: duration_to_millis(total),
            trace: None,
            level: 0,
        }
    }

    /// One model level of the walk: its retry loop within its share of the
    /// time left (see the module docs). A level the request does not fit,
    /// or whose model is unknown, is passed; once the deadline has passed,
    /// it is passed with the deadline's error. A level that gives up
    /// notes when it could answer again in the event's hint.
    async fn model_level<C: Call<B>>(
        &self,
        call: &C,
        uc: &UseCaseConfig,
        level: &ModelLevel<'_>,
        deadline: Instant,
        event: &mut Event<B>,
    ) -> Result<Step<C::Output>, LlmError> {
        let now = Instant::now();
        let levels_left = u32::try_from(level.levels_left).unwrap_or(u32::MAX);
        let share_end = now + deadline.saturating_duration_since(now) / levels_left;
        let served = match (level.level, level.rotation) {
            (ChainLevel::Pool(_), Some(rotation)) => {
                let members: Vec<Member<'_>> = level
                    .level
                    .model_keys()
                    .zip(level.reservations)
                    .enumerate()
                    .filter_map(|(index, (key, r))| {
                        Some(Member {
                            index,
                            entry: self.models.get(key)?,
                            reservation: (*r)?,
                        })
                    })
                    .collect();
                if members.is_empty() {
                    return Ok(Step::Passed(None));
                }
                if now >= deadline {
                    return Ok(Step::Passed(Some(event.deadline_error())));
                }
                event.retry.start_fallback_level();
                self.run_pool(call, &members, rotation, share_end, deadline, event)
                    .await
            }
            _ => {
                let key = level.level.model_keys().next().unwrap_or_default();
                let first = level.reservations.first().copied().flatten();
                let (Some(m), Some(reservation)) = (self.models.get(key), first) else {
                    return Ok(Step::Passed(None));
                };
                if now >= deadline {
                    return Ok(Step::Passed(Some(event.deadline_error())));
                }
                event.retry.start_fallback_level();
                self.run_level(call, m, reservation, share_end, deadline, event)
                    .await
                    .map(|output| (output, m))
            }
        };
        match served {
            Ok((output, m)) => {
                let degradation = if level.ordinal == 0 {
                    Degradation::Primary
                } else {
                    Degradation::Backup(level.ordinal)
                };
                Ok(Step::Answered(output, degradation, Some(m.key.clone())))
            }
            Err(LevelEnd::Next(e)) => {
                if let Some(wait) = e.retry_after() {
                    // The chain's own backoff before it would try this
                    // level again, after the attempts it made there.
                    let tried = event.retry.attempts().max(1);
                    let backoff = uc.retry.backoff();
                    event.hint.note(Instant::now(), wait, backoff.ceiling(tried - 1));
                }
                Ok(Step::Passed(Some(e)))
            }
            Err(LevelEnd::Fail(e)) => Err(e),
        }
    }
}
