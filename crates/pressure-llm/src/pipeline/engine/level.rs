//! The retry loop of one model level: gate, attempt, settle, decide — until
//! the level answers, gives up, or the deadline passes.
//!
//! A failure is priced (input tokens plus the output the provider bills)
//! into the event's [`RetryState`], whose decision retries the same level,
//! falls to the next level, or fails the event.

use std::sync::Arc;

use pressure_core::{Backend, Permit};
use tokio::time::Instant;

use super::call::{Call, Request, Target};
use super::gate::Gate;
use super::hint::RetryHint;
use super::ledger::Ledger;
use super::models::ModelEntry;
use super::payer::Paid;
use super::Engine;
use crate::breaker::{CallPermit, State};
use crate::pipeline::config::ModelKind;
use crate::pipeline::error::LlmError;
use crate::pipeline::metrics::Metrics;
use crate::price::Money;
use crate::provider::{CallError, CallTag, ProviderClient};
use crate::reservation::Reservation;
use crate::retry::{Decision, GiveUpReason, RetryState};
use crate::taxonomy::{Disposition, ErrorKind, TimeoutPhase};

/// The running totals of one event.
pub(super) struct Event<B: Backend> {
    /// Sent with every call of the event (`x-pressure-request-id`).
    pub(super) request_id: String,
    /// Charged every attempt's tokens and money, beside the model.
    pub(super) payer: Option<pressure_core::Nest<B>>,
    pub(super) retry: RetryState,
    pub(super) attempts: u32,
    pub(super) spent: Money,
    pub(super) failed_spent: Money,
    /// When the levels that gave up could answer again.
    pub(super) hint: RetryHint,
    /// The use case's total budget, for [`LlmError::DeadlineExceeded`].
    pub(super) total_ms: u64,
    /// The event's span (tracing on): the parent of its attempts' spans.
    pub(super) trace: Option<(pressure_core::trace::Tracer, pressure_core::trace::SpanContext)>,
    /// The chain level being walked (`pressure.level`).
    pub(super) level: usize,
}

impl<B: Backend> Event<B> {
    pub(super) fn deadline_error(&self) -> LlmError {
        LlmError::DeadlineExceeded {
            total_ms: self.total_ms,
        }
    }
}

/// How a model level ended without an answer.
pub(super) enum LevelEnd {
    /// Move on to the next level; the error is remembered.
    Next(LlmError),
    /// Fail the event.
    Fail(LlmError),
}

impl<B: Backend> Engine<B> {
    /// Retries one model level until it answers, gives up, or the deadline
    /// passes; a provider hold is waited for only until `share_end`.
    pub(super) async fn run_level<C: Call<B>>(
        &self,
        call: &C,
        m: &ModelEntry,
        reservation: Reservation,
        share_end: Instant,
        deadline: Instant,
        event: &mut Event<B>,
    ) -> Result<C::Output, LevelEnd> {
        let Some(provider) = self.providers.get(&m.provider) else {
            return Err(LevelEnd::Next(LlmError::NoAnswer));
        };
        let breaker = self.breakers.get(&m.provider, &m.model);
        let prepared = call.request().prepare(m, provider, &reservation);
        loop {
            if Instant::now() >= deadline {
                return Err(LevelEnd::Next(event.deadline_error()));
            }
            let payer = event.payer.as_ref();
            let (bp, permit, paid) = match self
                .gate(m, &breaker, &reservation, payer, share_end, deadline)
                .await
            {
                Gate::Go(bp, permit, paid) => (bp, permit, paid),
                Gate::Again => continue,
                Gate::Refused(e) => return Err(LevelEnd::Next(e)),
            };
            let (e, cost) = match self
                .attempt(
                    call,
                    (m, provider, &prepared),
                    (bp, permit, paid),
                    reservation,
                    deadline,
                    event,
                )
                .await
            {
                Ok(output) => return Ok(output),
                Err(failed) => failed,
            };
            let next = m.price.cost(reservation.input_tokens, reservation.output_tokens);
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
                Decision::GiveUp(reason) => return Err(given_up(err, &reason, event)),
            }
        }
    }
}

/// What an attempt is sent to: the model, its provider, and the request
/// as prepared for it.
pub(super) type To<'a, P> = (&'a ModelEntry, &'a ProviderClient, &'a P);

/// What the gate let through for one attempt: the breaker's permit, the
/// limiter's and the payer's.
pub(super) type Admitted<B> = (CallPermit, Option<Permit<B>>, Option<Paid<B>>);

impl<B: Backend> Engine<B> {
    /// One attempt the gate admitted: sent, then settled — its output, or
    /// its error and what it cost (already added to the event's totals).
    pub(super) async fn attempt<C: Call<B>>(
        &self,
        call: &C,
        to: To<'_, <C::Request as Request<B>>::Prepared>,
        admitted: Admitted<B>,
        reservation: Reservation,
        deadline: Instant,
        event: &mut Event<B>,
    ) -> Result<C::Output, (CallError, Money)> {
        let (m, provider, prepared) = to;
        let (bp, permit, paid) = admitted;
        event.attempts += 1;
        Metrics::add(&self.metrics.attempts, 1);
        let kind = <C::Request as Request<B>>::KIND;
        let ledger = Ledger::new(
            m,
            bp,
            (permit, paid),
            reservation,
            kind,
            Arc::clone(&self.metrics),
        );
        let mut span = event
            .trace
            .as_ref()
            .and_then(|(tracer, parent)| attempt_span(tracer, parent, kind, m, event));
        // The breaker's state before the attempt (traced only): a
        // transition its outcome causes is an event of the attempt's span.
        let breaker_before = span
            .as_ref()
            .map(|_| self.breakers.get(&m.provider, &m.model).state());
        let tag = CallTag {
            request_id: Some(event.request_id.clone()),
            attempt: event.attempts,
            probe: ledger.is_probe(),
            traceparent: span.as_ref().map(|s| s.context().traceparent()),
        };
        let target = Target {
            provider,
            deadline,
            tag: &tag,
        };
        let e = match call.send(target, prepared).await {
            Ok(sent) => {
                m.apply_hints(C::hints(&sent), &reservation, self.clock.now_nanos());
                let (output, cost) = call.finish(sent, ledger).await;
                event.spent = event.spent + cost;
                if let Some(span) = span.as_mut() {
                    span.set("pressure.cost_micro_usd", cost.micro_usd());
                    C::trace_output(&output, span);
                    self.trace_breaker(m, breaker_before, span);
                }
                return Ok(output);
            }
            Err(e) => e,
        };
        let cost = ledger.fail(e.kind.clone()).await;
        if let Some(span) = span.as_mut() {
            span.set("pressure.cost_micro_usd", cost.micro_usd());
            span.set("error.type", e.kind.to_string());
            if let Some(status) = e.status {
                span.set("http.response.status_code", status);
            }
            span.fail("provider call failed");
            self.trace_breaker(m, breaker_before, span);
        }
        event.spent = event.spent + cost;
        event.failed_spent = event.failed_spent + cost;
        Err((e, cost))
    }
}

impl<B: Backend> Engine<B> {
    /// A `pressure.breaker` event on `span` when `m`'s breaker is no
    /// longer in the state `before`.
    fn trace_breaker(&self, m: &ModelEntry, before: Option<State>, span: &mut pressure_core::trace::Span) {
        let after = self.breakers.get(&m.provider, &m.model).state();
        if let Some(before) = before.filter(|b| *b != after) {
            span.event(
                "pressure.breaker",
                vec![
                    ("pressure.model".into(), m.key.clone().into()),
                    ("pressure.breaker.from".into(), before.as_str().into()),
                    ("pressure.breaker.to".into(), after.as_str().into()),
                ],
            );
        }
    }
}

/// The span of one attempt of `event` on `m` (GenAI semantic
/// conventions, plus pressure's level and attempt number).
fn attempt_span<B: Backend>(
    tracer: &pressure_core::trace::Tracer,
    parent: &pressure_core::trace::SpanContext,
    kind: ModelKind,
    m: &ModelEntry,
    event: &Event<B>,
) -> Option<pressure_core::trace::Span> {
    let operation = match kind {
        ModelKind::Embedding => "embeddings",
        _ => "chat",
    };
    let mut span = tracer.start(
        Some(parent),
        format!("{operation} {}", m.model),
        pressure_core::trace::SpanKind::Client,
    )?;
    span.set("gen_ai.operation.name", operation);
    span.set("gen_ai.provider.name", m.provider.to_string());
    span.set("gen_ai.request.model", m.model.to_string());
    span.set("pressure.model", m.key.to_string());
    span.set("pressure.level", u64::try_from(event.level).unwrap_or(u64::MAX));
    span.set("pressure.attempt", event.attempts);
    Some(span)
}

/// How a level ends when its retries gave up on `err` for `reason`: a
/// total timeout is the use case's deadline error, and the event fails
/// (no fallback) only when the reason says so and the deadline has not
/// passed.
pub(super) fn given_up<B: Backend>(err: LlmError, reason: &GiveUpReason, event: &Event<B>) -> LevelEnd {
    let err = match &err {
        LlmError::Upstream {
            kind: ErrorKind::Timeout {
                phase: TimeoutPhase::Total,
            },
            ..
        } => event.deadline_error(),
        _ => err,
    };
    if reason.disposition() == Disposition::Fail && !matches!(err, LlmError::DeadlineExceeded { .. }) {
        LevelEnd::Fail(err)
    } else {
        LevelEnd::Next(err)
    }
}

/// A failed provider call of `m` as the pipeline's error.
pub(super) fn upstream(m: &ModelEntry, e: CallError) -> LlmError {
    LlmError::Upstream {
        provider: m.provider.clone(),
        model: m.model.clone(),
        kind: e.kind,
        status: e.status,
        message: e.message,
        param: e.param,
    }
}
