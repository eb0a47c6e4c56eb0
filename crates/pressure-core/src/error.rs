//! Typed errors of the broker: bad input is refused at once with a reason,
//! never a panic or an endless wait.

use crate::backend::BackendError;
use crate::limits::Dimension;
use crate::limits_error::LimitsError;
use std::time::Duration;

/// Why a broker operation failed (a denial is not an error: see
/// [`crate::Acquisition`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// No resource is registered under this id.
    #[error("unknown resource {0:?}")]
    UnknownResource(String),
    /// `enqueue` on a resource registered with `register_limit`: it has no
    /// queue settings. Register it with `register` to queue on it.
    #[error("resource {0:?} is a limit resource without a queue; register it with `register`")]
    NotAQueue(String),
    /// The id is already registered (with `register` or `register_limit`).
    #[error("resource {0:?} is already registered")]
    AlreadyRegistered(String),
    /// The limits are invalid; `source.field` names the JSON field.
    #[error("resource {resource:?}: {source}")]
    InvalidLimits {
        /// The resource being registered.
        resource: String,
        /// What is wrong.
        source: LimitsError,
    },
    /// The queue settings are invalid.
    #[error("resource {resource:?}: queue.{field}: {problem}")]
    InvalidQueue {
        /// The resource being registered.
        resource: String,
        /// JSON name of the field.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// The demand exceeds what the dimension can ever admit at once, so
    /// waiting would never help.
    #[error("resource {resource:?}: demand of {demand} on {dimension} can never fit (at most {max})")]
    DemandTooLarge {
        /// The resource.
        resource: String,
        /// The dimension that can never fit it.
        dimension: Dimension,
        /// Units asked for.
        demand: u64,
        /// Most units the dimension admits at once for this caller.
        max: u64,
    },
    /// The acquisition was denied and the caller asked to wait no longer
    /// than `max_wait` (see [`crate::ResourceBroker::acquire_within`]).
    #[error("resource {resource:?}: no capacity within {max_wait:?} (next in {wait:?})")]
    WaitExceeded {
        /// The resource.
        resource: String,
        /// The caller's bound.
        max_wait: Duration,
        /// When capacity would have been available.
        wait: Duration,
        /// The last denial: its dimension and cause (a limit, or an outage
        /// of the store), for a caller that answers `429` or `503`.
        last: crate::backend::Denial,
    },
    /// The state backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// Why [`crate::ResourceBroker::enqueue`] returned without a result from the
/// task.
#[derive(Debug, thiserror::Error)]
pub enum QueueError<E> {
    /// The queue already holds `max_queued` requests: rejected at once.
    #[error("resource {resource:?}: queue is full ({max_queued} waiting)")]
    Full {
        /// The resource.
        resource: String,
        /// The configured bound.
        max_queued: usize,
    },
    /// The request waited its whole `max_wait` (or would have: capacity comes
    /// back only after its deadline, so it was refused as soon as that was
    /// known).
    #[error("resource {resource:?}: no capacity within max wait {max_wait:?}")]
    Timeout {
        /// The resource.
        resource: String,
        /// The request's bound.
        max_wait: Duration,
    },
    /// The task kept reporting rate limits until retries or time ran out.
    #[error("resource {resource:?}: still rate limited after {attempts} attempts")]
    RateLimited {
        /// The resource.
        resource: String,
        /// Attempts made.
        attempts: u32,
        /// The last error the task reported.
        last: E,
    },
    /// The task failed with an error that is not a rate limit.
    #[error("task failed: {0}")]
    Task(E),
    /// The broker refused the request (unknown resource, demand too large,
    /// backend failure).
    #[error(transparent)]
    Broker(#[from] Error),
}
