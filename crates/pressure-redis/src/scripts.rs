//! The Lua scripts, loaded from their own files.

use redis::Script;
use std::sync::LazyLock;

/// The calendar periods (`lua/calendar.lua`), a prelude of the scripts
/// that count calendar dimensions. The lease scripts (release, renew) are
/// likewise preceded by `lua/outlive.lua`, the expiry of a written key.
pub(crate) const CALENDAR_LUA: &str = include_str!("../lua/calendar.lua");
pub(crate) const ACQUIRE_LUA: &str = concat!(
    include_str!("../lua/calendar.lua"),
    include_str!("../lua/acquire.lua")
);
pub(crate) const RECONCILE_LUA: &str = concat!(
    include_str!("../lua/calendar.lua"),
    include_str!("../lua/reconcile.lua")
);
pub(crate) const RELEASE_LUA: &str = concat!(
    include_str!("../lua/outlive.lua"),
    include_str!("../lua/release.lua")
);
const RENEW_LUA: &str = concat!(
    include_str!("../lua/outlive.lua"),
    include_str!("../lua/renew.lua")
);
pub(crate) const USAGE_LUA: &str = concat!(
    include_str!("../lua/calendar.lua"),
    include_str!("../lua/usage.lua")
);
/// Quota leasing (`lua/lease.lua`), with the acquire and reconcile logic
/// wrapped as functions it calls, so a batch is checked, counted and given
/// back exactly as acquisitions and corrections are.
pub(crate) const LEASE_LUA: &str = concat!(
    include_str!("../lua/calendar.lua"),
    "local function acquire_(ARGV)\n",
    include_str!("../lua/acquire.lua"),
    "\nend\nlocal function reconcile_(ARGV)\n",
    include_str!("../lua/reconcile.lua"),
    "\nend\n",
    include_str!("../lua/lease.lua")
);
/// Nested acquisitions (`lua/nested.lua`), with the acquire logic wrapped
/// as a function of its own keys and arguments, run once per level.
pub(crate) const NESTED_LUA: &str = concat!(
    include_str!("../lua/calendar.lua"),
    "local function acquire_(KEYS, ARGV)\n",
    include_str!("../lua/acquire.lua"),
    "\nend\n",
    include_str!("../lua/nested.lua")
);
const BREAKER_LUA: &str = include_str!("../lua/breaker.lua");
const GC_LUA: &str = include_str!("../lua/gc.lua");

/// Check and reserve all dimensions (`lua/acquire.lua`).
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_LUA));
/// Correct a grant's units (`lua/reconcile.lua`).
pub(crate) static RECONCILE: LazyLock<Script> = LazyLock::new(|| Script::new(RECONCILE_LUA));
/// Give leases back, with tombstones for lost acquisitions (`lua/release.lua`).
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));
/// Extend live leases, many per call (`lua/renew.lua`).
pub(crate) static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(RENEW_LUA));
/// Read current usage (`lua/usage.lua`).
pub(crate) static USAGE: LazyLock<Script> = LazyLock::new(|| Script::new(USAGE_LUA));

/// One reservation on every level of a nest, or none (`lua/nested.lua`).
pub(crate) static NESTED: LazyLock<Script> = LazyLock::new(|| Script::new(NESTED_LUA));

/// Take and give back quota leases (`lua/lease.lua`).
pub(crate) static LEASE: LazyLock<Script> = LazyLock::new(|| Script::new(LEASE_LUA));

/// Shared circuit breaker state, one op per call (`lua/breaker.lua`).
pub(crate) static BREAKER: LazyLock<Script> = LazyLock::new(|| Script::new(BREAKER_LUA));

/// Give a key without an expiry the one it was meant to have
/// (`lua/gc.lua`, run by `gc.rs` for `pressure redis gc`). Not in
/// [`sources`]: the backend never runs it, and `gc` loads it itself on
/// NOSCRIPT.
pub(crate) static GC: LazyLock<Script> = LazyLock::new(|| Script::new(GC_LUA));

/// The source of every script the backend runs, for `SCRIPT LOAD` on a new connection.
pub(crate) fn sources() -> [&'static str; 8] {
    [
        LEASE_LUA,
        NESTED_LUA,
        ACQUIRE_LUA,
        RECONCILE_LUA,
        RELEASE_LUA,
        RENEW_LUA,
        USAGE_LUA,
        BREAKER_LUA,
    ]
}

/// A number a script returned (a time, a count of units) as `u64`: the
/// scripts return none below zero, and one would read as 0.
pub(crate) fn reply_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}
