//! The public types of queue+execute: the request with its task, what the
//! task reports back, and the response.

use crate::acquisition::{AcquireOptions, ActualUsage};
use crate::priority::Priority;
use std::sync::Arc;
use std::time::Duration;

/// How a task attempt failed.
#[derive(Debug)]
pub enum TaskError<E> {
    /// Downstream said "too much" (e.g. HTTP 429): the broker pauses the
    /// resource for `retry_after` (or a backoff) and runs the task again.
    RateLimited {
        /// The provider's `retry-after`, if it gave one.
        retry_after: Option<Duration>,
        /// The error, returned if retries run out.
        error: E,
    },
    /// Any other failure: returned to the caller as is.
    Failed(E),
}

/// Lets a task report what it actually used (e.g. the provider's `usage`),
/// so the broker reconciles the reservation.
#[derive(Debug, Clone, Default)]
pub struct UsageReport(Arc<parking_lot::Mutex<Option<ActualUsage>>>);

impl UsageReport {
    /// Records the actual usage of this attempt.
    pub fn set(&self, actual: ActualUsage) {
        *self.0.lock() = Some(actual);
    }

    pub(crate) fn take(&self) -> Option<ActualUsage> {
        self.0.lock().take()
    }
}

/// Handed to each run of the task.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// 1 for the first run, 2 for the first retry, …
    pub number: u32,
    /// Where to report actual usage.
    pub usage: UsageReport,
}

/// A unit of work for [`crate::ResourceBroker::enqueue`].
#[derive(Debug)]
pub struct Request<F> {
    pub(crate) resource: String,
    /// What each attempt reserves: the same options as `try_acquire`
    /// (one request, with a concurrency lease when the resource has one).
    pub(crate) opts: AcquireOptions,
    pub(crate) max_wait: Option<Duration>,
    pub(crate) task: F,
}

impl<F> Request<F> {
    /// A request for one unit of `resource`, at interactive priority, running
    /// `task` (a closure called once per attempt).
    pub fn new<Fut>(resource: impl Into<String>, task: F) -> Self
    where
        F: FnMut(Attempt) -> Fut,
    {
        Self {
            resource: resource.into(),
            opts: AcquireOptions::default(),
            max_wait: None,
            task,
        }
    }

    /// Sets the priority class.
    pub fn priority(mut self, p: Priority) -> Self {
        self.opts = self.opts.priority(p);
        self
    }

    /// Reserves tokens: input counted, output estimated (e.g. `max_tokens`).
    pub fn tokens(mut self, input: u64, output: u64) -> Self {
        self.opts = self.opts.tokens(input, output);
        self
    }

    /// Reserves a cost estimate in micro-USD for the `costMicroUsdPer*`
    /// dimensions; report the billed cost with the attempt's usage.
    pub fn cost_micro_usd(mut self, micro_usd: u64) -> Self {
        self.opts = self.opts.cost_micro_usd(micro_usd);
        self
    }

    /// Overrides the resource's max wait for this request.
    pub fn max_wait(mut self, d: Duration) -> Self {
        self.max_wait = Some(d);
        self
    }
}

/// The task's value with how it was obtained.
#[derive(Debug)]
pub struct Response<T> {
    /// What the task returned.
    pub value: T,
    /// Runs of the task (1 + rate-limit retries).
    pub attempts: u32,
    /// Time spent waiting for capacity (queue and booked slots), all attempts.
    pub waited: Duration,
}
