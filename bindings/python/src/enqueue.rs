//! Queue+execute from Python: the core's `enqueue` runs an async Python
//! callable on the caller's event loop once capacity frees, and retries it
//! when it raises `pressure.RateLimitedError`.

use crate::errors::queue_error;
use crate::Broker;
use pressure_core::{Attempt, Priority, Request, TaskError};
use pyo3::prelude::*;
use pyo3_async_runtimes::TaskLocals;
use std::time::Duration;

/// One `enqueue` call's arguments.
pub(crate) struct Job {
    pub(crate) resource: String,
    pub(crate) execute: Py<PyAny>,
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
    pub(crate) cost_micro_usd: u64,
    pub(crate) priority: Priority,
    pub(crate) max_wait_ms: Option<u64>,
}

/// What `enqueue` resolves to.
#[pyclass(name = "Response", module = "pressure", frozen)]
pub(crate) struct PyResponse {
    /// What `execute` returned.
    #[pyo3(get)]
    result: Py<PyAny>,
    /// Milliseconds spent waiting for capacity, over all attempts.
    #[pyo3(get)]
    wait_time_ms: f64,
    /// Runs of `execute` (1 + rate-limit retries).
    #[pyo3(get)]
    attempts: u32,
}

#[pymethods]
impl PyResponse {
    fn __repr__(&self) -> String {
        format!(
            "Response(attempts={}, wait_time_ms={:.3})",
            self.attempts, self.wait_time_ms
        )
    }
}

/// The `pressure._util` helper that says whether `execute` takes the
/// attempt number, and the `RateLimitedError` class.
fn util(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    py.import("pressure._util")
}

/// How a task's exception counts: a `RateLimitedError` is retried after its
/// `retry_after_ms` (or the broker's backoff), anything else is final.
fn classify(err: PyErr) -> TaskError<PyErr> {
    Python::attach(|py| {
        let rate_limited = util(py)
            .and_then(|u| u.getattr("RateLimitedError"))
            .is_ok_and(|cls| err.value(py).is_instance(&cls).unwrap_or(false));
        if !rate_limited {
            return TaskError::Failed(err);
        }
        let retry_after = err
            .value(py)
            .getattr("retry_after_ms")
            .and_then(|v| v.extract::<Option<f64>>())
            .ok()
            .flatten()
            .filter(|ms| ms.is_finite() && *ms >= 0.0)
            .map(|ms| Duration::from_secs_f64(ms / 1000.0));
        TaskError::RateLimited {
            retry_after,
            error: err,
        }
    })
}

/// Starts one attempt: calls `execute` and hands its awaitable to the
/// caller's event loop.
fn attempt(
    execute: &Py<PyAny>,
    wants_attempt: bool,
    locals: &TaskLocals,
    number: u32,
) -> PyResult<impl std::future::Future<Output = PyResult<Py<PyAny>>> + Send> {
    Python::attach(|py| {
        let awaitable = if wants_attempt {
            execute.call1(py, (number,))?
        } else {
            execute.call0(py)?
        }
        .into_bound(py);
        // Refused here: the event loop would only log it, and the attempt
        // would never finish.
        util(py)?.call_method1("check_awaitable", (&awaitable,))?;
        pyo3_async_runtimes::into_future_with_locals(locals, awaitable)
    })
}

/// `enqueue` as an asyncio future. Cancelling it (e.g. `asyncio.wait_for`)
/// drops the request: nothing stays queued or reserved.
pub(crate) fn start(py: Python<'_>, broker: Broker, job: Job) -> PyResult<Bound<'_, PyAny>> {
    let locals = pyo3_async_runtimes::tokio::get_current_locals(py)?;
    let wants_attempt: bool = util(py)?
        .call_method1("wants_attempt", (job.execute.bind(py),))?
        .extract()?;
    let task_locals = locals.clone();
    let Job {
        resource,
        execute,
        input_tokens,
        output_tokens,
        cost_micro_usd,
        priority,
        max_wait_ms,
    } = job;
    let fut = async move {
        let task = move |a: Attempt| {
            let started = attempt(&execute, wants_attempt, &task_locals, a.number);
            async move {
                match started {
                    Ok(f) => f.await.map_err(classify),
                    Err(e) => Err(classify(e)),
                }
            }
        };
        let mut request = Request::new(resource, task)
            .priority(priority)
            .tokens(input_tokens, output_tokens)
            .cost_micro_usd(cost_micro_usd);
        if let Some(ms) = max_wait_ms {
            request = request.max_wait(Duration::from_millis(ms));
        }
        let response = broker.enqueue(request).await.map_err(queue_error)?;
        Ok(PyResponse {
            result: response.value,
            wait_time_ms: response.waited.as_secs_f64() * 1000.0,
            attempts: response.attempts,
        })
    };
    pyo3_async_runtimes::tokio::future_into_py_with_locals(py, locals, fut)
}
