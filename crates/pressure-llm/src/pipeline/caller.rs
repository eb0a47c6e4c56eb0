//! [`Caller`]: who one event is for — the id its provider calls carry, and
//! the broker resource that pays for its attempts (a tenant's budget).
//!
//! A payer is charged beside the model's own resource on every attempt:
//! the attempt's estimated tokens and money (input tokens × input price +
//! the output reserved × output price), no request (the caller's own
//! request was counted where it came in), reconciled to what the provider
//! billed once the attempt ends — a failed attempt the provider billed
//! counts too. A payer's limits are never waited for: a budget that is
//! spent stays spent until its calendar period ends, so the level is
//! refused at once ([`LlmError::BudgetExceeded`](super::LlmError::BudgetExceeded)
//! on a calendar dimension) and the chain goes on to levels that cost
//! nothing (`rules`, `manualQueue`) or fit what is left.

use pressure_core::{Backend, MemoryBackend, Nest, ResourceHandle};

/// Who one event is for: its id and, optionally, the resource that pays.
#[derive(Debug, Clone)]
pub struct Caller<B: Backend = MemoryBackend> {
    /// Sent with every provider call of the event as `x-pressure-request-id`.
    pub request_id: String,
    /// Charged the tokens and money of every attempt (see the module
    /// docs): every level of the nest, all or nothing (a key, its tenant
    /// and the tenant's ancestors: nested budgets).
    pub payer: Option<Nest<B>>,
    /// The trace the event's spans join (tracing on, the request sampled):
    /// a span for the event, one per attempt, `traceparent` to providers.
    pub trace: Option<CallerTrace>,
}

/// Where an event's spans go: the tracer and the parent span (the
/// gateway's server span).
#[derive(Debug, Clone)]
pub struct CallerTrace {
    /// Records the spans.
    pub tracer: pressure_core::trace::Tracer,
    /// Their parent.
    pub parent: pressure_core::trace::SpanContext,
}

impl<B: Backend> Caller<B> {
    /// An event with this id and no payer.
    pub fn new(request_id: impl Into<String>) -> Self {
        Self {
            request_id: request_id.into(),
            payer: None,
            trace: None,
        }
    }

    /// The same event, traced under `parent` with `tracer`.
    pub fn traced(
        mut self,
        tracer: pressure_core::trace::Tracer,
        parent: pressure_core::trace::SpanContext,
    ) -> Self {
        self.trace = Some(CallerTrace { tracer, parent });
        self
    }

    /// The same event, paid for by `payer`.
    pub fn paid_by(mut self, payer: ResourceHandle<B>) -> Self {
        self.payer = Some(Nest::new(vec![payer]));
        self
    }

    /// The same event, paid for by every level of `payer`, all or nothing.
    pub fn paid_by_all(mut self, payer: Nest<B>) -> Self {
        self.payer = Some(payer);
        self
    }
}

impl<B: Backend> From<String> for Caller<B> {
    fn from(request_id: String) -> Self {
        Self::new(request_id)
    }
}
