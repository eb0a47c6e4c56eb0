//! Queue+execute: `enqueue` waits in a priority queue until the resource has
//! capacity, runs the task, and retries it transparently when the task
//! reports a rate limit. The order, the starvation rule and the bounds are
//! documented once, in the crate docs ("Queue order").
//!
//! `request.rs` holds the public types, `state.rs` the waiting line,
//! `dispatch.rs` the dispatcher that grants them in order, `run.rs` one
//! request from enqueue to its last attempt.

mod dispatch;
mod request;
mod run;
mod state;

pub use request::{Attempt, Priority, QueueConfig, Request, Response, TaskError, UsageReport};
pub(crate) use run::enqueue;
pub(crate) use state::Queue;
