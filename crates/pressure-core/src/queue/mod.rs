//! Queue+execute: `enqueue` waits in a priority queue until the resource has
//! capacity, runs the task, and retries it transparently when the task
//! reports a rate limit.
//!
//! # Order and the starvation rule
//! Two classes, `interactive` and `batch`. Interactive requests go first;
//! within a class, first come first served. **Batch never starves**: after
//! `interactiveBurst` (default 8) consecutive interactive grants while a batch
//! request was waiting, the oldest batch request goes next. So a batch request
//! waits for at most `interactiveBurst` interactive grants per batch request
//! ahead of it.
//!
//! Across a fleet, priority needs no coordination: batch callers may fill only
//! `1 − batchHeadroom` of every limit (backend-enforced), so interactive
//! traffic from any instance always finds the headroom.
//!
//! # Bounds
//! At most `maxQueued` waiters (beyond: [`crate::QueueError::Full`] at once);
//! each request waits at most its `maxWait` (beyond:
//! [`crate::QueueError::Timeout`], as soon as the backend's wait time shows
//! the deadline cannot be met). Dropping the `enqueue` future removes the
//! request from the queue and releases anything it held.
//!
//! # Waking
//! The dispatcher sleeps exactly until the backend's `wait_time`, or until a
//! permit of this process frees capacity; with `gcra` limits it books each
//! waiter's future slot so the waiter sleeps once and runs on time.

mod dispatch;
mod request;
mod run;
mod state;

pub use request::{Attempt, Priority, QueueConfig, Request, Response, TaskError, UsageReport};
pub(crate) use run::enqueue;
pub(crate) use state::Queue;
