//! # pressure-python
//!
//! The `pressure` Python package's native module (`pressure._pressure`):
//! the Rust [`pressure_core::ResourceBroker`] on the memory or Redis
//! backend, with an asyncio API — `try_acquire` (awaitable and `async
//! with`), `enqueue` of async callables, `register`, `register_limit`,
//! `get_stats` — and exceptions rooted at `pressure.PressureError`.
//!
//! Futures run on one tokio runtime per process; an acquisition the
//! in-memory backend answers at once resolves without leaving the event
//! loop's thread. The Python side (`pressure/__init__.py`) re-exports this
//! module and adds `RateLimitedError`.

mod acquisition;
mod broker;
mod config;
mod enqueue;
mod errors;
mod runtime;

use pressure_core::ResourceBroker;
use pressure_redis::AnyBackend;
use pyo3::prelude::*;

/// The broker type behind every Python `ResourceBroker` (memory or Redis,
/// chosen at construction), shared by the broker, its acquisitions and its
/// queued jobs.
pub(crate) type Broker = ResourceBroker<AnyBackend>;

/// The module `pressure._pressure`.
#[pymodule]
fn _pressure(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<broker::PyBroker>()?;
    m.add_class::<acquisition::PyAcquisition>()?;
    m.add_class::<acquisition::AcquireCall>()?;
    m.add_class::<enqueue::PyResponse>()?;
    errors::register(m)?;
    Ok(())
}
