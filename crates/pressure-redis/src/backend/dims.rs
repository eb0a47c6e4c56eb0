//! The rate dimensions of a limit as the scripts count them ([`Dim`]):
//! computed once per limit, when a resource is attached.

use crate::shape::RateArgs;
use pressure_core::{Algorithm, BackendError, Demand, LimitSpec, RateSpec};

/// One rate dimension of a limit as the scripts count it: its algorithm,
/// step and window in µs, and its fields in the resource's hash.
#[derive(Debug, Clone)]
pub(super) struct Dim {
    pub(super) rate: RateSpec,
    pub(super) gcra: bool,
    /// gcra: emission interval; window: sub-window length (microseconds).
    pub(super) step_us: u64,
    /// The window length W (microseconds): a window dimension's units all
    /// leave W after its last grant.
    pub(super) window_us: u64,
    /// Hash fields: gcra `g<d>` and the T it was counted with `g<d>t`;
    /// window the prefix `w<d>:` of its sub-windows (and of `w<d>:t`, the
    /// time of its last grant), its sum `w<d>:s` and its oldest sub-window
    /// `w<d>:lo`.
    pub(super) fields: [String; 3],
}

impl Dim {
    /// This dimension's per-call arguments for `demand`: units, and the
    /// limit scaled by its ceiling (gcra: as a tolerance in µs).
    pub(super) fn args(&self, demand: &Demand) -> RateArgs {
        let limit = if self.gcra {
            RateSpec::scaled(self.rate.capacity, demand.ceiling_ppm).saturating_mul(self.step_us)
        } else {
            RateSpec::scaled(self.rate.limit, demand.ceiling_ppm)
        };
        RateArgs {
            units: self.rate.units(demand),
            limit,
            step_us: self.step_us,
        }
    }
}

/// The rate dimensions of `spec` as the scripts count them; refuses a
/// `gcra` rate finer than 1 µs.
pub(super) fn dims_of(spec: &LimitSpec) -> Result<Vec<Dim>, BackendError> {
    let mut dims = Vec::with_capacity(spec.rates.len());
    for r in &spec.rates {
        let window_us = r.window_ns / 1_000;
        let gcra = r.algorithm == Algorithm::Gcra;
        let step_us = if gcra {
            if r.limit > window_us {
                return Err(BackendError::Unsupported(format!(
                    "{}: {} per window is finer than the store's 1 µs resolution with gcra; use window",
                    r.dimension, r.limit
                )));
            }
            window_us.div_ceil(r.limit)
        } else {
            window_us.div_ceil(pressure_core::SUB_WINDOWS)
        };
        let id = r.dimension.index();
        dims.push(Dim {
            rate: *r,
            gcra,
            step_us,
            window_us,
            fields: if gcra {
                [format!("g{id}"), format!("g{id}t"), "-".to_owned()]
            } else {
                [format!("w{id}:"), format!("w{id}:s"), format!("w{id}:lo")]
            },
        });
    }
    Ok(dims)
}
