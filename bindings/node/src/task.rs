//! The bridge of `enqueue`: the core's queue calls a JavaScript task through
//! a napi thread-safe function and awaits the Promise it returns.
//!
//! `index.js` wraps the user's `execute` so that its Promise always resolves
//! to a small JSON verdict — `{"ok": true, "usage"?}`, `{"rateLimited":
//! true, "retryAfterMs"?}` or `{"failed": true}` — and keeps the value or
//! the error itself on the JavaScript side. So nothing but text crosses the
//! boundary, and a thrown `RateLimitedError` becomes the core's
//! `TaskError::RateLimited`: the core's queue, priorities and retries apply.

use crate::error;
use napi::bindgen_prelude::Promise;
use napi::threadsafe_function::ThreadsafeFunction;
use napi::Status;
use pressure_core::{AcquireOptions, ActualUsage, Attempt, Request, ResourceBroker, TaskError};
use pressure_redis::AnyBackend;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// The JavaScript task: called with the attempt number, resolves to a
/// verdict in JSON.
pub(crate) type RunAttempt = ThreadsafeFunction<u32, Promise<String>, u32, Status, false>;

/// What one attempt of the JavaScript task came to.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Verdict {
    #[serde(default)]
    ok: bool,
    #[serde(default)]
    rate_limited: bool,
    retry_after_ms: Option<f64>,
    usage: Option<Usage>,
}

/// Usage the task reported (`reportUsage` in JavaScript).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Usage {
    #[serde(default)]
    requests: Option<u64>,
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    /// Absent: the reserved money stands.
    #[serde(default)]
    cost_micro_usd: Option<u64>,
}

/// Runs `run` through the core's queue; JSON `{"waitTimeMs", "attempts"}`.
pub(crate) async fn enqueue(
    broker: &ResourceBroker<AnyBackend>,
    resource: String,
    opts: AcquireOptions,
    max_wait_ms: Option<u64>,
    run: RunAttempt,
) -> napi::Result<String> {
    let run = Arc::new(run);
    let (requests, cost) = (opts.requests, opts.cost_micro_usd);
    let mut request = Request::new(resource, move |attempt: Attempt| {
        let run = Arc::clone(&run);
        async move { one_attempt(&run, attempt, requests, cost).await }
    })
    .priority(opts.priority)
    .tokens(opts.input_tokens, opts.output_tokens)
    .cost_micro_usd(opts.cost_micro_usd);
    if let Some(ms) = max_wait_ms {
        request = request.max_wait(Duration::from_millis(ms));
    }
    let response = broker.enqueue(request).await.map_err(error::queue)?;
    Ok(serde_json::json!({
        "waitTimeMs": error::ms(response.waited),
        "attempts": response.attempts,
    })
    .to_string())
}

async fn one_attempt(
    run: &RunAttempt,
    attempt: Attempt,
    requests: u64,
    cost: u64,
) -> Result<(), TaskError<String>> {
    let failed = |e: napi::Error| TaskError::Failed(e.reason.clone());
    let promise = run.call_async(attempt.number).await.map_err(failed)?;
    let text = promise.await.map_err(failed)?;
    let v: Verdict =
        serde_json::from_str(&text).map_err(|e| TaskError::Failed(format!("bad verdict {text:?}: {e}")))?;
    if let Some(u) = v.usage {
        attempt.usage.set(ActualUsage {
            requests: u.requests.unwrap_or(requests),
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cost_micro_usd: u.cost_micro_usd.unwrap_or(cost),
        });
    }
    if v.ok {
        Ok(())
    } else if v.rate_limited {
        let retry_after = v
            .retry_after_ms
            .filter(|m| m.is_finite() && *m >= 0.0)
            .map(|m| Duration::from_secs_f64(m / 1000.0));
        Err(TaskError::RateLimited {
            retry_after,
            error: "rate limited".into(),
        })
    } else {
        Err(TaskError::Failed("task failed".into()))
    }
}
