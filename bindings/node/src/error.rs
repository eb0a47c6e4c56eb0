//! Errors crossing into JavaScript: one `code` per kind of failure, carried
//! as JSON in the message of the thrown `Error` so that `index.js` can
//! rebuild a typed subclass (`ConfigError`, `QueueFullError`, …) with the
//! same `code` and fields.

use pressure_core::{Error, QueueError};
use serde_json::{json, Value};

/// The invalid options or limits (unknown key, bad value, duplicate id,
/// enqueue on a limit-only resource).
pub(crate) const CONFIG: &str = "ERR_PRESSURE_CONFIG";
/// No resource under that id.
pub(crate) const UNKNOWN_RESOURCE: &str = "ERR_PRESSURE_UNKNOWN_RESOURCE";
/// A demand that no wait can ever satisfy.
pub(crate) const DEMAND_TOO_LARGE: &str = "ERR_PRESSURE_DEMAND_TOO_LARGE";
/// The queue is full.
pub(crate) const QUEUE_FULL: &str = "ERR_PRESSURE_QUEUE_FULL";
/// The request waited its whole max wait.
pub(crate) const QUEUE_TIMEOUT: &str = "ERR_PRESSURE_QUEUE_TIMEOUT";
/// The task kept reporting rate limits until its retries ran out.
pub(crate) const RATE_LIMITED: &str = "ERR_PRESSURE_RATE_LIMITED";
/// The task failed (its own error is rethrown by `index.js`).
pub(crate) const TASK_FAILED: &str = "ERR_PRESSURE_TASK_FAILED";
/// The state backend (Redis) failed.
pub(crate) const BACKEND: &str = "ERR_PRESSURE_BACKEND";

/// A napi error whose message is `{"code", "message", ...extra}`.
pub(crate) fn coded(code: &str, message: impl Into<String>, extra: Value) -> napi::Error {
    let mut body = json!({ "code": code, "message": message.into() });
    if let (Some(b), Value::Object(extra)) = (body.as_object_mut(), extra) {
        b.extend(extra);
    }
    napi::Error::from_reason(body.to_string())
}

/// A configuration error with its message.
pub(crate) fn config(message: impl Into<String>) -> napi::Error {
    coded(CONFIG, message, Value::Null)
}

/// The core's broker error, by kind.
pub(crate) fn broker(e: Error) -> napi::Error {
    let message = e.to_string();
    match e {
        Error::UnknownResource(resource) => coded(UNKNOWN_RESOURCE, message, json!({ "resource": resource })),
        Error::NotAQueue(resource) | Error::AlreadyRegistered(resource) => {
            coded(CONFIG, message, json!({ "resource": resource }))
        }
        Error::InvalidLimits { resource, source } => coded(
            CONFIG,
            message,
            json!({ "resource": resource, "field": format!("limits.{}", source.field) }),
        ),
        Error::InvalidQueue { resource, field, .. } => coded(
            CONFIG,
            message,
            json!({ "resource": resource, "field": format!("queue.{field}") }),
        ),
        Error::DemandTooLarge {
            resource,
            dimension,
            demand,
            max,
        } => coded(
            DEMAND_TOO_LARGE,
            message,
            json!({ "resource": resource, "dimension": dimension.as_str(), "demand": demand, "max": max }),
        ),
        Error::WaitExceeded { resource, wait, .. } => coded(
            QUEUE_TIMEOUT,
            message,
            json!({ "resource": resource, "retryAfterMs": ms(wait) }),
        ),
        Error::Backend(_) => coded(BACKEND, message, Value::Null),
    }
}

/// The core's queue error, by kind; `E` is the bridge's own error text.
pub(crate) fn queue(e: QueueError<String>) -> napi::Error {
    let message = e.to_string();
    match e {
        QueueError::Full { resource, max_queued } => coded(
            QUEUE_FULL,
            message,
            json!({ "resource": resource, "maxQueued": max_queued }),
        ),
        QueueError::Timeout { resource, max_wait } => coded(
            QUEUE_TIMEOUT,
            message,
            json!({ "resource": resource, "maxWaitMs": ms(max_wait) }),
        ),
        QueueError::RateLimited {
            resource, attempts, ..
        } => coded(
            RATE_LIMITED,
            message,
            json!({ "resource": resource, "attempts": attempts }),
        ),
        QueueError::Task(reason) => coded(TASK_FAILED, reason, Value::Null),
        QueueError::Broker(e) => broker(e),
    }
}

/// Milliseconds as a JavaScript number (fractions kept).
pub(crate) fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
