//! The tokio runtime the broker runs on (pyo3-async-runtimes' shared one),
//! and [`now_or_later`]: a future that is already done (the in-memory
//! backend answers at once) resolves without a trip through tokio, and any
//! other becomes an asyncio future.

use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;
use pyo3::BoundObject;
use std::future::Future;
use std::task::{Context, Poll};

/// The runtime shared by every broker of the process.
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    pyo3_async_runtimes::tokio::get_runtime()
}

/// Runs `f` inside the runtime's context, so what it spawns (lease
/// renewal, the release of a dropped permit, Redis reconnects) lands on it.
pub(crate) fn in_runtime<R>(f: impl FnOnce() -> R) -> R {
    let _guard = runtime().enter();
    f()
}

/// An awaitable for `fut`: polled once here, in the runtime's context; if
/// that finishes it, an awaitable that returns the value at once, else an
/// asyncio future driven by the tokio runtime (cancelling it drops `fut`).
pub(crate) fn now_or_later<F, T>(py: Python<'_>, fut: F) -> PyResult<Bound<'_, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    let mut fut = Box::pin(fut);
    let first = in_runtime(|| {
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        fut.as_mut().poll(&mut cx)
    });
    match first {
        Poll::Ready(out) => {
            let value = out?.into_pyobject(py).map_err(Into::into)?.into_any().unbind();
            Ok(Bound::new(py, Ready { value: Some(value) })?.into_any())
        }
        // Polled again by tokio with a real waker: a future registers the
        // waker of its latest poll, so the no-op one above is forgotten.
        Poll::Pending => pyo3_async_runtimes::tokio::future_into_py(py, fut),
    }
}

/// An awaitable whose value is already known: `await` returns it without
/// suspending (its iterator stops at the first step).
#[pyclass(module = "pressure._pressure", frozen)]
pub(crate) struct Ready {
    value: Option<Py<PyAny>>,
}

#[pymethods]
impl Ready {
    fn __await__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let value = match &self.value {
            Some(v) => v.clone_ref(py),
            None => py.None(),
        };
        Err(PyStopIteration::new_err((value,)))
    }
}
