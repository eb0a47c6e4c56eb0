//! The exception classes of `pressure` and the mapping of the core's error
//! enums onto them, so Python code catches `pressure.PressureError` (or a
//! precise subclass) and never sees a Rust panic.

use pressure_core::Error;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    pressure,
    PressureError,
    PyException,
    "Base class of every error raised by pressure."
);
create_exception!(
    pressure,
    ConfigError,
    PressureError,
    "Invalid limits, queue settings or Redis options; the message names the key."
);
create_exception!(
    pressure,
    UnknownResourceError,
    PressureError,
    "No resource is registered under this id."
);
create_exception!(
    pressure,
    DemandTooLargeError,
    PressureError,
    "The demand can never fit the resource's limits, so waiting would not help."
);
create_exception!(
    pressure,
    QueueError,
    PressureError,
    "`enqueue` returned without running the task to completion."
);
create_exception!(
    pressure,
    QueueFullError,
    QueueError,
    "The resource's queue already holds `maxQueued` requests: refused at once."
);
create_exception!(
    pressure,
    QueueTimeoutError,
    QueueError,
    "No capacity within the request's max wait."
);
create_exception!(
    pressure,
    BackendError,
    PressureError,
    "The state backend (Redis) failed or could not be reached."
);

/// The Python exception for a broker error.
pub(crate) fn broker_error(e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::UnknownResource(_) => UnknownResourceError::new_err(msg),
        Error::NotAQueue(_)
        | Error::AlreadyRegistered(_)
        | Error::InvalidLimits { .. }
        | Error::InvalidQueue { .. } => ConfigError::new_err(msg),
        Error::DemandTooLarge { .. } => DemandTooLargeError::new_err(msg),
        Error::WaitExceeded { .. } => QueueTimeoutError::new_err(msg),
        Error::Backend(_) => BackendError::new_err(msg),
    }
}

/// The Python exception for an `enqueue` failure. The task's own exception
/// (or, once retries ran out, its last `RateLimitedError`) comes back
/// unchanged.
pub(crate) fn queue_error(e: pressure_core::QueueError<PyErr>) -> PyErr {
    let msg = e.to_string();
    match e {
        pressure_core::QueueError::Full { .. } => QueueFullError::new_err(msg),
        pressure_core::QueueError::Timeout { .. } => QueueTimeoutError::new_err(msg),
        pressure_core::QueueError::RateLimited { last, .. } => last,
        pressure_core::QueueError::Task(err) => err,
        pressure_core::QueueError::Broker(err) => broker_error(err),
    }
}

/// Adds the exception classes to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("PressureError", py.get_type::<PressureError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("UnknownResourceError", py.get_type::<UnknownResourceError>())?;
    m.add("DemandTooLargeError", py.get_type::<DemandTooLargeError>())?;
    m.add("QueueError", py.get_type::<QueueError>())?;
    m.add("QueueFullError", py.get_type::<QueueFullError>())?;
    m.add("QueueTimeoutError", py.get_type::<QueueTimeoutError>())?;
    m.add("BackendError", py.get_type::<BackendError>())?;
    Ok(())
}
