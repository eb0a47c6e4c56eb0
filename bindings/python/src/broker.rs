//! `pressure.ResourceBroker`: the core's broker on the memory or Redis
//! backend, with the asyncio API (`register`, `register_limit`,
//! `try_acquire`, `enqueue`, `get_stats`).

use crate::acquisition::AcquireCall;
use crate::config;
use crate::errors::{broker_error, BackendError, ConfigError};
use crate::runtime::{in_runtime, now_or_later};
use crate::Broker;
use pressure_core::{AcquireOptions, MemoryBackend, ResourceBroker, ResourceConfig};
use pressure_redis::{AnyBackend, RedisBackend};
use pyo3::prelude::*;

/// One admission-control broker: check+reject (`try_acquire`) and
/// queue+execute (`enqueue`) over the same counters.
#[pyclass(name = "ResourceBroker", module = "pressure", frozen)]
pub(crate) struct PyBroker {
    broker: Broker,
    /// `"memory"` or `"redis"`.
    backend: &'static str,
}

/// The input and output tokens of one demand, each argument a count
/// ([`config::opt_count`]): `tokens` is a shorthand for input tokens when
/// `input_tokens` / `output_tokens` are not given.
fn token_split(
    tokens: Option<&Bound<'_, PyAny>>,
    input_tokens: Option<&Bound<'_, PyAny>>,
    output_tokens: Option<&Bound<'_, PyAny>>,
) -> PyResult<(u64, u64)> {
    match (
        config::opt_count("tokens", tokens)?,
        config::opt_count("input_tokens", input_tokens)?,
        config::opt_count("output_tokens", output_tokens)?,
    ) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => Err(ConfigError::new_err(
            "give either `tokens` or `input_tokens`/`output_tokens`, not both",
        )),
        (Some(t), None, None) => Ok((t, 0)),
        (None, i, o) => Ok((i.unwrap_or(0), o.unwrap_or(0))),
    }
}

impl PyBroker {
    fn with_backend(backend: AnyBackend) -> Self {
        let name = match backend {
            AnyBackend::Memory(_) => "memory",
            AnyBackend::Redis(_) => "redis",
        };
        Self {
            broker: in_runtime(|| ResourceBroker::builder(backend).build()),
            backend: name,
        }
    }
}

#[pymethods]
impl PyBroker {
    /// A broker whose state lives in this process.
    #[new]
    fn new() -> Self {
        Self::with_backend(AnyBackend::Memory(MemoryBackend::new()))
    }

    /// A broker on Redis (`redis="redis://host:6379"`) or a Redis Cluster
    /// (`cluster=["redis://h1:7000", ...]`), shared by every process that
    /// connects to the same store. Fails with `BackendError` when the store
    /// does not answer now; later outages follow `options["failureMode"]`.
    #[staticmethod]
    #[pyo3(signature = (redis=None, *, cluster=None, options=None))]
    fn connect<'py>(
        py: Python<'py>,
        redis: Option<String>,
        cluster: Option<Vec<String>>,
        options: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let config = config::redis(redis, cluster, options)?;
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let backend = RedisBackend::connect(config)
                .await
                .map_err(|e| BackendError::new_err(e.to_string()))?;
            Ok(Self::with_backend(AnyBackend::Redis(backend)))
        })
    }

    /// `"memory"` or `"redis"`.
    #[getter]
    fn backend(&self) -> &'static str {
        self.backend
    }

    /// Registers a queue+execute resource: `limits` as in the gateway
    /// config (`{"requestsPerMinute": 600, "tokensPerMinute": 90000}`),
    /// `queue` its queue settings (`{"maxQueued", "maxWaitMs",
    /// "interactiveBurst", "batchHeadroom", "maxRateLimitRetries"}`).
    #[pyo3(signature = (resource, limits, queue=None))]
    fn register(
        &self,
        py: Python<'_>,
        resource: String,
        limits: &Bound<'_, PyAny>,
        queue: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let config =
            ResourceConfig::new(config::limits(&resource, limits)?).queue(config::queue(&resource, queue)?);
        py.detach(|| in_runtime(|| self.broker.register(resource, config)))
            .map_err(broker_error)
    }

    /// Registers a check+reject resource (no queue) with `limits`.
    fn register_limit(&self, py: Python<'_>, resource: String, limits: &Bound<'_, PyAny>) -> PyResult<()> {
        let limits = config::limits(&resource, limits)?;
        py.detach(|| in_runtime(|| self.broker.register_limit(resource, limits)))
            .map_err(broker_error)
    }

    /// Reserves capacity now or answers with the wait: `await` the result
    /// for an `Acquisition`, or `async with` it to release on exit.
    /// `cost_micro_usd` reserves money on the calendar budgets
    /// (`costMicroUsdPerDay`, `costMicroUsdPerMonth`).
    /// Counts are checked by [`config::count`]: a float, a negative or a
    /// too large number is a `ConfigError`, never truncated or wrapped.
    #[pyo3(signature = (resource, requests=None, tokens=None, input_tokens=None, output_tokens=None, priority="interactive", cost_micro_usd=None))]
    #[allow(clippy::too_many_arguments)]
    fn try_acquire(
        &self,
        resource: String,
        requests: Option<&Bound<'_, PyAny>>,
        tokens: Option<&Bound<'_, PyAny>>,
        input_tokens: Option<&Bound<'_, PyAny>>,
        output_tokens: Option<&Bound<'_, PyAny>>,
        priority: &str,
        cost_micro_usd: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<AcquireCall> {
        let requests = config::opt_count("requests", requests)?.unwrap_or(1);
        let cost_micro_usd = config::opt_count("cost_micro_usd", cost_micro_usd)?.unwrap_or(0);
        let (input, output) = token_split(tokens, input_tokens, output_tokens)?;
        let opts = AcquireOptions::default()
            .requests(requests)
            .tokens(input, output)
            .cost_micro_usd(cost_micro_usd)
            .priority(config::priority(priority)?);
        Ok(AcquireCall::new(self.broker.clone(), resource, opts))
    }

    /// Waits in the resource's priority queue until capacity frees, then
    /// awaits `execute()` (or `execute(attempt)` when it takes an argument);
    /// a `RateLimitedError` it raises is retried after its `retry_after_ms`.
    /// Returns a `Response` (`result`, `wait_time_ms`, `attempts`).
    #[pyo3(signature = (resource, execute, *, tokens=None, input_tokens=None, output_tokens=None, priority="interactive", max_wait_ms=None, cost_micro_usd=None))]
    #[allow(clippy::too_many_arguments)]
    fn enqueue<'py>(
        &self,
        py: Python<'py>,
        resource: String,
        execute: Py<PyAny>,
        tokens: Option<&Bound<'py, PyAny>>,
        input_tokens: Option<&Bound<'py, PyAny>>,
        output_tokens: Option<&Bound<'py, PyAny>>,
        priority: &str,
        max_wait_ms: Option<&Bound<'py, PyAny>>,
        cost_micro_usd: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let max_wait_ms = config::opt_count("max_wait_ms", max_wait_ms)?;
        let cost_micro_usd = config::opt_count("cost_micro_usd", cost_micro_usd)?.unwrap_or(0);
        let (input, output) = token_split(tokens, input_tokens, output_tokens)?;
        let job = crate::enqueue::Job {
            resource,
            execute,
            input_tokens: input,
            output_tokens: output,
            cost_micro_usd,
            priority: config::priority(priority)?,
            max_wait_ms,
        };
        crate::enqueue::start(py, self.broker.clone(), job)
    }

    /// A snapshot of every resource (dicts with the admin endpoint's
    /// camelCase keys); for a limit resource the queue fields are `None`.
    fn get_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let broker = self.broker.clone();
        now_or_later(py, async move {
            let stats = broker.stats().await;
            Ok(Stats(stats))
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "ResourceBroker(backend={:?}, resources={})",
            self.backend,
            self.broker.len()
        )
    }
}

/// Stats on their way to Python: a list of dicts.
struct Stats(Vec<pressure_core::ResourceStats>);

impl<'py> IntoPyObject<'py> for Stats {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> Result<Self::Output, Self::Error> {
        pythonize::pythonize(py, &self.0)
            .map_err(|e| crate::errors::PressureError::new_err(format!("stats: {e}")))
    }
}
