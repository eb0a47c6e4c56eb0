//! [`NativeAcquisition`]: the result of `tryAcquire`, owning the core's
//! `Permit`. Release is idempotent and a no-op after a denial (the core's
//! semantics); a result collected by the garbage collector without a
//! release drops its permit, which the core releases on `Drop`.

use crate::error;
use crate::options::units;
use napi_derive::napi;
use parking_lot::Mutex;
use pressure_core::{Acquisition, ActualUsage, DenialCause, Permit};
use pressure_redis::AnyBackend;
use std::sync::Arc;

/// The permit (absent after a denial, or while a reconcile holds it) and
/// whether a release was asked for.
#[derive(Default)]
struct Held {
    permit: Option<Permit<AnyBackend>>,
    released: bool,
}

type Slot = Arc<Mutex<Held>>;

/// A denial as a plain JavaScript object (no class instance, nothing to
/// finalize): the fast path of a refused `tryAcquire`.
#[napi(object)]
pub struct Denied {
    /// Milliseconds until the same demand could fit.
    pub wait_time_ms: f64,
    /// The dimension that needed the longest wait.
    pub dimension: String,
    /// The store could not be asked (a 503, not a 429).
    pub unavailable: bool,
}

impl From<&pressure_core::Denial> for Denied {
    fn from(d: &pressure_core::Denial) -> Self {
        Self {
            wait_time_ms: error::ms(d.wait),
            dimension: d.dimension.as_str().to_owned(),
            unavailable: d.cause == DenialCause::Unavailable,
        }
    }
}

/// One check+reject answer: granted (holding a permit until released) or
/// denied (with the wait until the same demand could fit).
#[napi]
pub struct NativeAcquisition {
    allowed: bool,
    wait_ms: f64,
    dimension: Option<&'static str>,
    unavailable: bool,
    memory: bool,
    permit: Slot,
}

impl NativeAcquisition {
    /// Wraps the core's answer.
    pub(crate) fn new(acq: Acquisition<AnyBackend>, memory: bool) -> Self {
        let wait_ms = error::ms(acq.wait_time());
        match acq {
            Acquisition::Granted(p) => Self {
                allowed: true,
                wait_ms,
                dimension: None,
                unavailable: false,
                memory,
                permit: Arc::new(Mutex::new(Held {
                    permit: Some(p),
                    released: false,
                })),
            },
            Acquisition::Denied(d) => Self {
                allowed: false,
                wait_ms,
                dimension: Some(d.dimension.as_str()),
                unavailable: d.cause == DenialCause::Unavailable,
                memory,
                permit: Slot::default(),
            },
        }
    }
}

#[napi]
impl NativeAcquisition {
    /// Whether capacity was reserved.
    #[napi(getter)]
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// 0 when granted; otherwise milliseconds until the same demand could fit.
    #[napi(getter)]
    pub fn wait_time_ms(&self) -> f64 {
        self.wait_ms
    }

    /// On a denial, the dimension that needed the longest wait
    /// (`requestsPerSecond`, `maxConcurrentRequests`, …).
    #[napi(getter)]
    pub fn dimension(&self) -> Option<String> {
        self.dimension.map(str::to_owned)
    }

    /// On a denial, whether the store could not be asked (Redis down, failure
    /// mode `closed`) rather than a limit being exhausted: a 503, not a 429.
    #[napi(getter)]
    pub fn unavailable(&self) -> bool {
        self.unavailable
    }

    /// Whether the permit still holds capacity (not yet released).
    #[napi(getter)]
    pub fn held(&self) -> bool {
        !self.permit.lock().released && self.allowed
    }

    /// Releases at once when the state is in this process (the core's
    /// release on drop, which the memory backend settles synchronously) and
    /// returns `true`; `false` on Redis, where [`NativeAcquisition::release`]
    /// must be awaited. Also `true` when there was nothing to release.
    #[napi]
    pub fn release_now(&self) -> bool {
        let mut held = self.permit.lock();
        if held.released || held.permit.is_none() {
            held.released = true;
            return true;
        }
        if !self.memory {
            return false;
        }
        held.released = true;
        if let Some(p) = held.permit.take() {
            drop(held);
            crate::runtime::within(move || drop(p));
        }
        true
    }

    /// Gives the capacity back and waits for the backend to confirm.
    /// Idempotent; a no-op after a denial.
    #[napi]
    pub async fn release(&self) -> napi::Result<()> {
        let taken = {
            let mut held = self.permit.lock();
            held.released = true;
            held.permit.take()
        };
        if let Some(mut p) = taken {
            p.release().await.map_err(error::broker)?;
        }
        Ok(())
    }

    /// Corrects the token and money reservation to the actual usage (money:
    /// absent keeps what was reserved); a no-op after a denial or a release.
    #[napi]
    pub async fn reconcile(
        &self,
        requests: f64,
        input_tokens: f64,
        output_tokens: f64,
        cost_micro_usd: Option<f64>,
    ) -> napi::Result<()> {
        let mut actual = ActualUsage {
            requests: units("requests", requests)?,
            input_tokens: units("inputTokens", input_tokens)?,
            output_tokens: units("outputTokens", output_tokens)?,
            cost_micro_usd: 0,
        };
        let cost = cost_micro_usd.map(|c| units("costMicroUsd", c)).transpose()?;
        // Taken out for the await; a release that comes meanwhile finds the
        // slot empty, so it is done here afterwards instead.
        let taken = self.permit.lock().permit.take();
        let Some(mut p) = taken else {
            return Ok(());
        };
        actual.cost_micro_usd = cost.unwrap_or(p.grant().reserved.cost_micro_usd);
        let out = p.reconcile(actual).await.map_err(error::broker);
        let late_release = {
            let mut held = self.permit.lock();
            if held.released {
                Some(p)
            } else {
                held.permit = Some(p);
                None
            }
        };
        if let Some(mut p) = late_release {
            p.release().await.map_err(error::broker)?;
        }
        out
    }
}

impl Drop for NativeAcquisition {
    fn drop(&mut self) {
        // Collected without a release: the core's `Drop` releases, in the
        // runtime's context (a Redis release is sent from a task).
        if let Some(p) = self.permit.lock().permit.take() {
            crate::runtime::within(move || drop(p));
        }
    }
}
