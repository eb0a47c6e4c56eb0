//! What one acquisition asks for ([`AcquireOptions`]), what it reports back
//! ([`ActualUsage`]), and the check+reject result: [`Acquisition`], a granted
//! [`Permit`] or a denial with a wait time. The permit itself lives with the
//! resource it holds (`entry/permit.rs`).

use crate::backend::{Backend, Denial, Reserved};
use crate::entry::Permit;
use crate::error::Error;
use crate::priority::Priority;
use crate::MemoryBackend;
use std::time::Duration;

/// What one acquisition asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireOptions {
    /// Requests (default 1).
    pub requests: u64,
    /// Input tokens, counted before the call.
    pub input_tokens: u64,
    /// Output tokens reserved (an estimate such as `max_tokens`); correct it
    /// later with [`Permit::reconcile`].
    pub output_tokens: u64,
    /// Cost reserved in micro-USD (an estimate, counted by the
    /// `costMicroUsdPer*` dimensions); corrected by [`Permit::reconcile`].
    pub cost_micro_usd: u64,
    /// Priority class; `Batch` may only fill the share of each limit left
    /// after the resource's batch headroom.
    pub priority: Priority,
    /// Whether a resource with `maxConcurrentRequests` takes (and checks) a
    /// concurrency lease (default `true`). `false` charges the rate and
    /// token dimensions only: for a caller that can never give a slot back,
    /// such as a forward-auth subrequest.
    pub lease: bool,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        Self {
            requests: 1,
            input_tokens: 0,
            output_tokens: 0,
            cost_micro_usd: 0,
            priority: Priority::Interactive,
            lease: true,
        }
    }
}

impl AcquireOptions {
    /// Sets the token estimate.
    pub fn tokens(mut self, input: u64, output: u64) -> Self {
        self.input_tokens = input;
        self.output_tokens = output;
        self
    }
    /// Sets the cost estimate in micro-USD (see
    /// [`AcquireOptions::cost_micro_usd`]).
    pub fn cost_micro_usd(mut self, micro_usd: u64) -> Self {
        self.cost_micro_usd = micro_usd;
        self
    }
    /// Sets the number of requests.
    pub fn requests(mut self, n: u64) -> Self {
        self.requests = n;
        self
    }
    /// Sets the priority class.
    pub fn priority(mut self, p: Priority) -> Self {
        self.priority = p;
        self
    }
    /// Charges no concurrency lease (see [`AcquireOptions::lease`]).
    pub fn without_lease(mut self) -> Self {
        self.lease = false;
        self
    }
}

/// Actual usage reported after the work, for [`Permit::reconcile`].
pub type ActualUsage = Reserved;

/// The result of `try_acquire`: a denial is a value that carries its wait
/// time (mapped straight to `Retry-After` by the gateway).
#[derive(Debug)]
pub enum Acquisition<B: Backend = MemoryBackend> {
    /// Capacity reserved; the permit gives it back.
    Granted(Permit<B>),
    /// Nothing reserved.
    Denied(Denial),
}

impl<B: Backend> Acquisition<B> {
    /// Whether capacity was reserved.
    #[inline]
    pub fn allowed(&self) -> bool {
        matches!(self, Acquisition::Granted(_))
    }

    /// Zero when granted; otherwise the earliest moment the same demand could
    /// fit.
    pub fn wait_time(&self) -> Duration {
        match self {
            Acquisition::Granted(p) => p.delay(),
            Acquisition::Denied(d) => d.wait,
        }
    }

    /// The permit, when granted.
    pub fn permit(&self) -> Option<&Permit<B>> {
        match self {
            Acquisition::Granted(p) => Some(p),
            Acquisition::Denied(_) => None,
        }
    }

    /// Takes the permit, when granted.
    pub fn into_permit(self) -> Option<Permit<B>> {
        match self {
            Acquisition::Granted(p) => Some(p),
            Acquisition::Denied(_) => None,
        }
    }

    /// The denial, when denied.
    pub fn denial(&self) -> Option<&Denial> {
        match self {
            Acquisition::Granted(_) => None,
            Acquisition::Denied(d) => Some(d),
        }
    }

    /// Releases the permit if granted; a no-op for a denial.
    pub async fn release(&mut self) -> Result<(), Error> {
        match self {
            Acquisition::Granted(p) => p.release().await,
            Acquisition::Denied(_) => Ok(()),
        }
    }
}
