//! What one acquisition sends ([`AcquireArgs`]): the `ARGV` of the generic
//! `lua/acquire.lua` or of the script generated for the limit's shape, and
//! which of the two scripts a call in flight runs ([`AcquireScript`]).

use super::dims::Dim;
use crate::scripts;
use crate::shape::{self, calendar_kind, CalendarArgs, RateArgs, Shape};
use crate::store::ShapeScript;
use pressure_core::{Demand, LimitSpec, RateSpec};
use std::sync::Arc;

/// What one acquisition sends, whichever script counts it.
pub(super) struct AcquireArgs<'a> {
    pub(super) dims: &'a [Dim],
    pub(super) spec: &'a LimitSpec,
    pub(super) demand: &'a Demand,
    /// The concurrency limit scaled by the ceiling; 0 without a lease.
    pub(super) conc: u64,
    /// The lease's member in the concurrency set.
    pub(super) member: &'a str,
    /// The wall-time offset for calendar periods (µs).
    pub(super) offset_us: i64,
}

impl AcquireArgs<'_> {
    /// `ARGV` of one call of the generic `lua/acquire.lua` (see its header).
    pub(super) fn generic(&self) -> Vec<String> {
        let (dims, spec, demand) = (self.dims, self.spec, self.demand);
        let mut out = Vec::with_capacity(dims.len() * 9 + 5);
        out.push(dims.len().to_string());
        for d in dims {
            let a = d.args(demand);
            out.push(u8::from(d.gcra).to_string());
            out.push(d.rate.dimension.index().to_string());
            out.push(a.units.to_string());
            out.push(a.limit.to_string());
            out.push(d.step_us.to_string());
            out.push(d.window_us.to_string());
            out.extend(d.fields.iter().cloned());
        }
        out.push(self.conc.to_string());
        out.push((spec.lease_ttl_ns / 1_000).to_string());
        out.push(self.member.to_owned());
        out.push((demand.book_within_ns / 1_000).to_string());
        out.extend(calendar_args(spec, demand, self.offset_us));
        out
    }

    /// `ARGV` of one call of the script generated for `shape` (see
    /// [`shape::generate`]).
    pub(super) fn shaped(&self, shape: &Shape) -> Vec<String> {
        let rates: Vec<RateArgs> = self.dims.iter().map(|d| d.args(self.demand)).collect();
        let calendars = CalendarArgs {
            offset_us: self.offset_us,
            dims: calendar_units(self.spec, self.demand).collect(),
        };
        shape::args(
            shape,
            &rates,
            self.conc,
            self.member,
            self.demand.book_within_ns / 1_000,
            &calendars,
        )
    }
}

#[cfg(test)]
impl<'a> AcquireArgs<'a> {
    /// A test's acquisition that takes no concurrency slot.
    pub(super) fn unleased(
        dims: &'a [Dim],
        spec: &'a LimitSpec,
        demand: &'a Demand,
        member: &'a str,
        offset_us: i64,
    ) -> Self {
        Self {
            dims,
            spec,
            demand,
            conc: 0,
            member,
            offset_us,
        }
    }
}

/// The calendar part of an acquire script's `ARGV` (see `lua/acquire.lua`):
/// the number of calendar dimensions, the wall-time offset (µs), and per
/// dimension its kind, id, units and limit scaled by the ceiling. Always
/// sent, so the arguments that follow it in tests stay in place.
fn calendar_args(spec: &LimitSpec, demand: &Demand, offset_us: i64) -> Vec<String> {
    let mut out = Vec::with_capacity(2 + 4 * spec.calendars.len());
    out.push(spec.calendars.len().to_string());
    out.push(offset_us.to_string());
    for (c, (units, limit)) in spec.calendars.iter().zip(calendar_units(spec, demand)) {
        out.push(calendar_kind(c.calendar).to_string());
        out.push(c.dimension.index().to_string());
        out.push(units.to_string());
        out.push(limit.to_string());
    }
    out
}

/// Per calendar dimension of `spec`: the units `demand` asks for and the
/// limit scaled by its ceiling.
fn calendar_units<'a>(spec: &'a LimitSpec, demand: &'a Demand) -> impl Iterator<Item = (u64, u64)> + 'a {
    spec.calendars
        .iter()
        .map(|c| (c.units(demand), RateSpec::scaled(c.limit, demand.ceiling_ppm)))
}

/// The acquire script of a call in flight, owned by it.
pub(super) enum AcquireScript {
    /// The script generated for the limit's shape.
    Shaped(Arc<ShapeScript>),
    /// `lua/acquire.lua`.
    Generic,
}

impl AcquireScript {
    pub(super) fn get(&self) -> &redis::Script {
        match self {
            AcquireScript::Shaped(s) => &s.script,
            AcquireScript::Generic => &scripts::ACQUIRE,
        }
    }
}
