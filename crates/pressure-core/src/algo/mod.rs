//! The counting algorithms as pure state machines over an injected `now`.
//!
//! Backends own the state and the clock; these modules own the arithmetic, so
//! the in-memory backend and the Redis Lua scripts implement one documented
//! definition and the property tests check it once.

pub(crate) mod calendar;
pub(crate) mod gcra;
pub(crate) mod leases;
pub(crate) mod window;
