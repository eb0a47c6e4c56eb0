//! The Lua scripts, loaded from their own files.

use redis::Script;
use std::sync::LazyLock;

/// Check and reserve all dimensions (`lua/acquire.lua`).
pub(crate) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/acquire.lua")));
/// Correct a grant's units (`lua/reconcile.lua`).
pub(crate) static RECONCILE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/reconcile.lua")));
/// Give a lease back (`lua/release.lua`).
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/release.lua")));
/// Extend a live lease (`lua/renew.lua`).
pub(crate) static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/renew.lua")));
/// Read current usage (`lua/usage.lua`).
pub(crate) static USAGE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/usage.lua")));
