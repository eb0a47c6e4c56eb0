//! Check+reject from Python: `broker.try_acquire(...)` returns an
//! [`AcquireCall`], awaitable (→ [`PyAcquisition`]) and an async context
//! manager that releases on exit, like aiohttp's `session.get`.

use crate::errors::broker_error;
use crate::runtime::{in_runtime, now_or_later};
use crate::Broker;
use pressure_core::{AcquireOptions, Acquisition, ActualUsage, DenialCause, Permit};
use pressure_redis::AnyBackend;
use pyo3::prelude::*;
use std::sync::Arc;

/// The permit of a granted acquisition, shared by the Python object and
/// the futures that release or reconcile it.
pub(crate) struct Held {
    permit: tokio::sync::Mutex<Option<Permit<AnyBackend>>>,
}

impl Drop for Held {
    fn drop(&mut self) {
        // The last reference may go on a Python thread (garbage collection):
        // the permit's release on drop spawns onto the runtime.
        if let Some(p) = self.permit.get_mut().take() {
            in_runtime(|| drop(p));
        }
    }
}

impl Held {
    /// Gives the permit back (idempotent; nothing for a denial).
    async fn release(&self) -> PyResult<()> {
        let permit = self.permit.lock().await.take();
        if let Some(mut p) = permit {
            p.release().await.map_err(broker_error)?;
        }
        Ok(())
    }
}

/// Milliseconds, rounded up: waiting that long is always enough.
pub(crate) fn ceil_ms(d: std::time::Duration) -> u64 {
    let ns = d.as_nanos();
    u64::try_from(ns.div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// The outcome of `try_acquire`: `allowed` with a permit to release, or
/// denied with the wait before the same demand could fit.
#[pyclass(name = "Acquisition", module = "pressure", frozen)]
pub(crate) struct PyAcquisition {
    /// Whether capacity was reserved.
    #[pyo3(get)]
    allowed: bool,
    /// 0 when allowed; otherwise milliseconds (rounded up) until the same
    /// demand could fit (→ `Retry-After`).
    #[pyo3(get)]
    wait_time_ms: u64,
    /// On a denial, the limit that needed the longest wait
    /// (`requestsPerSecond`, …); `None` when allowed.
    #[pyo3(get)]
    dimension: Option<&'static str>,
    /// On a denial, `"exhausted"` (a limit refused: 429) or `"unavailable"`
    /// (the store could not be asked and the failure mode refuses: 503);
    /// `None` when allowed.
    #[pyo3(get)]
    cause: Option<&'static str>,
    held: Arc<Held>,
}

impl PyAcquisition {
    fn new(acq: Acquisition<AnyBackend>) -> Self {
        let wait_time_ms = ceil_ms(acq.wait_time());
        let dimension = acq.denial().map(|d| d.dimension.as_str());
        let cause = acq.denial().map(|d| match d.cause {
            DenialCause::Exhausted => "exhausted",
            DenialCause::Unavailable => "unavailable",
        });
        Self {
            allowed: acq.allowed(),
            wait_time_ms,
            dimension,
            cause,
            held: Arc::new(Held {
                permit: tokio::sync::Mutex::new(acq.into_permit()),
            }),
        }
    }
}

#[pymethods]
impl PyAcquisition {
    /// Gives the capacity back; idempotent, and a no-op for a denial.
    fn release<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let held = Arc::clone(&self.held);
        now_or_later(py, async move { held.release().await })
    }

    /// Corrects the token and money reservation to the actual usage (each
    /// count defaults to what was reserved); a no-op once released or denied.
    #[pyo3(signature = (input_tokens=None, output_tokens=None, cost_micro_usd=None))]
    fn reconcile<'py>(
        &self,
        py: Python<'py>,
        input_tokens: Option<&Bound<'py, PyAny>>,
        output_tokens: Option<&Bound<'py, PyAny>>,
        cost_micro_usd: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // Checked here, before anything starts: a ConfigError naming the count.
        let input_tokens = crate::config::opt_count("input_tokens", input_tokens)?;
        let output_tokens = crate::config::opt_count("output_tokens", output_tokens)?;
        let cost_micro_usd = crate::config::opt_count("cost_micro_usd", cost_micro_usd)?;
        let held = Arc::clone(&self.held);
        now_or_later(py, async move {
            let mut guard = held.permit.lock().await;
            if let Some(p) = guard.as_mut() {
                let reserved = p.grant().reserved;
                let actual = ActualUsage {
                    requests: reserved.requests,
                    input_tokens: input_tokens.unwrap_or(reserved.input_tokens),
                    output_tokens: output_tokens.unwrap_or(reserved.output_tokens),
                    cost_micro_usd: cost_micro_usd.unwrap_or(reserved.cost_micro_usd),
                };
                p.reconcile(actual).await.map_err(broker_error)?;
            }
            Ok(())
        })
    }

    fn __bool__(&self) -> bool {
        self.allowed
    }

    fn __repr__(&self) -> String {
        match self.dimension {
            None => format!(
                "Acquisition(allowed={})",
                if self.allowed { "True" } else { "False" }
            ),
            Some(d) => format!(
                "Acquisition(allowed=False, wait_time_ms={}, dimension={d:?})",
                self.wait_time_ms
            ),
        }
    }
}

/// A `try_acquire` not yet started: `await` it for the [`PyAcquisition`],
/// or `async with` it to have the permit released on exit.
#[pyclass(name = "AcquireCall", module = "pressure", frozen)]
pub(crate) struct AcquireCall {
    broker: Broker,
    resource: String,
    opts: AcquireOptions,
    /// The acquisition of `async with`, for `__aexit__`.
    entered: Arc<parking_lot::Mutex<Option<Arc<Held>>>>,
}

impl AcquireCall {
    pub(crate) fn new(broker: Broker, resource: String, opts: AcquireOptions) -> Self {
        Self {
            broker,
            resource,
            opts,
            entered: Arc::new(parking_lot::Mutex::new(None)),
        }
    }

    /// Starts the acquisition; `keep` receives the permit's handle.
    fn start<'py>(
        &self,
        py: Python<'py>,
        keep: Option<Arc<parking_lot::Mutex<Option<Arc<Held>>>>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let broker = self.broker.clone();
        let resource = self.resource.clone();
        let opts = self.opts;
        now_or_later(py, async move {
            let acq = broker.try_acquire(&resource, opts).await.map_err(broker_error)?;
            let out = PyAcquisition::new(acq);
            if let Some(slot) = keep {
                *slot.lock() = Some(Arc::clone(&out.held));
            }
            Ok(out)
        })
    }
}

#[pymethods]
impl AcquireCall {
    fn __await__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.start(py, None)?.call_method0("__await__")
    }

    fn __aenter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.start(py, Some(Arc::clone(&self.entered)))
    }

    /// Releases the permit taken by `__aenter__`; never suppresses the
    /// exception of the block.
    #[pyo3(signature = (*_exc))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _exc: &Bound<'py, pyo3::types::PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let held = self.entered.lock().take();
        now_or_later(py, async move {
            if let Some(h) = held {
                h.release().await?;
            }
            Ok(false)
        })
    }
}
