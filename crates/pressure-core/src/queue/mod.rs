//! Queue+execute: `enqueue` waits in a priority queue until the resource has
//! capacity, runs the task, and retries it transparently when the task
//! reports a rate limit. The order, the starvation rule and the bounds are
//! documented once, in the crate docs ("Queue order").
//!
//! `request.rs` holds the public types, `dispatch.rs` the dispatcher that
//! grants waiters in order, `run.rs` one request from enqueue to its last
//! attempt. The waiting line itself belongs to the resource
//! (`entry/waiting_line.rs`), as do [`crate::Priority`] (`priority.rs`) and
//! [`crate::QueueConfig`] (`queue_config.rs`), which the check+reject side
//! uses too: this module only points down to `entry` and `acquisition`.

mod dispatch;
mod request;
mod run;

pub use request::{Attempt, Request, Response, TaskError, UsageReport};
pub(crate) use run::enqueue;
