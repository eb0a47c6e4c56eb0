//! The tokio runtime the addon's work runs on (napi's), reachable also from
//! places napi does not enter it: the garbage collector's finalizers and
//! the synchronous fast paths.
//!
//! The handle is kept once taken, so a finalizer that runs while Node tears
//! its environment down (after napi shut its runtime) still enters a valid
//! context: a task spawned then is simply never run, instead of a panic.

use std::sync::OnceLock;
use tokio::runtime::Handle;

static HANDLE: OnceLock<Handle> = OnceLock::new();

/// Remembers napi's runtime; called while it is certainly up (a broker's
/// construction).
pub(crate) fn init() {
    if HANDLE.get().is_none() {
        let h = napi::bindgen_prelude::within_runtime_if_available(Handle::current);
        let _ = HANDLE.set(h);
    }
}

/// Runs `f` inside the runtime's context (so the core may spawn a release
/// or register a lease with its renewal task).
pub(crate) fn within<T>(f: impl FnOnce() -> T) -> T {
    match Handle::try_current() {
        Ok(_) => f(),
        Err(_) => {
            let _guard = HANDLE.get().map(Handle::enter);
            f()
        }
    }
}
