//! Per-tenant limit overrides: which limits a tenant gets, and keeping the
//! tenants already registered in step when that changes (docs/architecture.md#budgets-one-tenant-quota-across-both-flows).
//!
//! **Precedence**, highest first:
//!
//! 1. a **live** override, set with `PUT /admin/pressure/tenants/{id}/limits`
//!    and kept in the backend (`store`), so every gateway on the same Redis
//!    agrees;
//! 2. a **config** override, `gateway.pressure.perTenant.overrides.<id>`;
//! 3. the **default** template, `gateway.pressure.perTenant.limits`.
//!
//! Each is a full replacement of the ones below it: a dimension the
//! override does not set is not limited for that tenant. Overrides apply
//! only while tenants are limited at all (`perTenant.enabled` and
//! `pressure.enabled`); otherwise they are kept (and shown) but unused.
//!
//! A tenant registers lazily with the limits that hold at its first request
//! (`Plan::tenant_handle`); a change of a tenant's limits —
//! a live write here or on another instance, or a reload that changes the
//! config overrides or the template — updates the registered resource in
//! place with `ResourceBroker::set_limits`, keeping its usage.
//!
//! [`LiveOverrides`] is this instance's mirror of the live overrides: every
//! write carries the store's version, so a late or repeated announcement
//! never undoes a newer one.

pub(crate) mod store;

use crate::auth::MAX_TENANT_LEN;
use crate::settings::{ConfigError, TenantOverride};
use arc_swap::ArcSwap;
use pressure_core::{LimitTemplate, Limits};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Where a tenant's limits come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Source {
    /// A live override (admin API, in the backend).
    Live,
    /// `perTenant.overrides.<id>`.
    Config,
    /// `perTenant.limits`.
    Default,
}

/// The limits that win for one tenant, and their source (module docs).
pub(crate) fn resolve<'a, T>(live: Option<&'a T>, config: Option<&'a T>, default: &'a T) -> (&'a T, Source) {
    match (live, config) {
        (Some(l), _) => (l, Source::Live),
        (None, Some(c)) => (c, Source::Config),
        (None, None) => (default, Source::Default),
    }
}

/// A tenant id as the admin API and `perTenant.overrides` accept it: what a
/// JWT may name (non-empty, at most 256 bytes).
pub(crate) fn check_tenant(id: &str, path: &str) -> Result<(), ConfigError> {
    if id.is_empty() {
        return Err(ConfigError::new(path, "a tenant id must not be empty"));
    }
    if id.len() > MAX_TENANT_LEN {
        return Err(ConfigError::new(
            path,
            format!("a tenant id has at most {MAX_TENANT_LEN} bytes"),
        ));
    }
    Ok(())
}

/// `limits` compiled for a tenant; a problem names `<path>.<field>` (or
/// the field alone when `path` is empty, for an admin request's body).
pub(crate) fn compile(limits: &Limits, path: &str) -> Result<LimitTemplate, ConfigError> {
    LimitTemplate::new(limits).map_err(|e| {
        let at = match (path, e.field) {
            ("", field) => field.to_owned(),
            (p, "limits") => p.to_owned(),
            (p, field) => format!("{p}.{field}"),
        };
        ConfigError::new(at, e.problem)
    })
}

/// `gateway.pressure.perTenant.overrides`: each id and its limits checked,
/// each problem naming `gateway.pressure.perTenant.overrides.<id>[.<field>]`.
pub(crate) fn config_overrides(
    overrides: &BTreeMap<String, TenantOverride>,
) -> Result<BTreeMap<String, LimitTemplate>, ConfigError> {
    let mut out = BTreeMap::new();
    for (id, o) in overrides {
        let path = format!("gateway.pressure.perTenant.overrides.{id}");
        check_tenant(id, &path)?;
        if let Some(limits) = &o.limits {
            out.insert(id.clone(), compile(limits, &path)?);
        }
    }
    Ok(out)
}

/// One mirrored live entry: the version of its last write, and its value
/// (`None`: removed by that write).
#[derive(Debug, Clone)]
struct Entry<V> {
    version: u64,
    limits: Option<V>,
}

#[derive(Debug)]
struct Mirror<V> {
    /// Every write up to this version is already reflected (a snapshot).
    floor: u64,
    entries: HashMap<String, Entry<V>>,
}

impl<V> Default for Mirror<V> {
    fn default() -> Self {
        Self {
            floor: 0,
            entries: HashMap::new(),
        }
    }
}

/// The live entries in force: tenant → value.
pub(crate) type View<V = LimitTemplate> = HashMap<String, V>;

/// This instance's mirror of the live overrides: tenant → limits.
pub(crate) type LiveOverrides = LiveMap<LimitTemplate>;

/// This instance's mirror of the live tenant parents (`PUT
/// /admin/pressure/tenants/{id}/parent`): tenant → parent, where `""`
/// means "no parent" (a live write that takes a config parent away).
pub(crate) type LiveParents = LiveMap<String>;

/// This instance's mirror of a live per-tenant map kept in the backend
/// (module docs). Read on the request path of every tenant request: one
/// relaxed flag while there is none, else a lock-free snapshot
/// ([`View`]); written under a lock by the rare admin writes and
/// announcements.
#[derive(Debug)]
pub(crate) struct LiveMap<V> {
    mirror: parking_lot::Mutex<Mirror<V>>,
    /// What the request path reads, published after every change.
    view: ArcSwap<View<V>>,
    /// Whether `view` has any entry (the request path's fast exit).
    any: AtomicBool,
    /// Bumped on every change, so a registration can tell that a change
    /// raced it.
    changes: AtomicU64,
}

impl<V> Default for LiveMap<V> {
    fn default() -> Self {
        Self {
            mirror: parking_lot::Mutex::default(),
            view: ArcSwap::from_pointee(HashMap::new()),
            any: AtomicBool::new(false),
            changes: AtomicU64::new(0),
        }
    }
}

impl<V: Clone> LiveMap<V> {
    /// The entries in force now, unless there is none.
    pub(crate) fn view(&self) -> Option<arc_swap::Guard<Arc<View<V>>>> {
        self.any.load(Ordering::Acquire).then(|| self.view.load())
    }

    /// The live entry of `tenant`, if any.
    pub(crate) fn get(&self, tenant: &str) -> Option<V> {
        self.view()?.get(tenant).cloned()
    }

    /// A number that changes whenever an entry does.
    pub(crate) fn changes(&self) -> u64 {
        self.changes.load(Ordering::SeqCst)
    }

    /// Records the write of `version` (set or, with `None`, removed);
    /// `false` when a newer write is already known (nothing changes).
    pub(crate) fn apply(&self, version: u64, tenant: &str, limits: Option<V>) -> bool {
        let mut m = self.mirror.lock();
        if version <= m.floor || m.entries.get(tenant).is_some_and(|e| e.version >= version) {
            return false;
        }
        m.entries.insert(tenant.to_owned(), Entry { version, limits });
        self.changed(&m);
        true
    }

    /// Replaces everything with the store's whole content as of `version`
    /// (entries written later locally are kept); the tenants whose
    /// entry may have changed.
    pub(crate) fn replace(&self, version: u64, all: HashMap<String, V>) -> Vec<String> {
        let mut m = self.mirror.lock();
        let mut touched: Vec<String> = Vec::new();
        m.entries.retain(|tenant, e| {
            let keep = e.version > version;
            if !keep && e.limits.is_some() {
                touched.push(tenant.clone());
            }
            keep
        });
        for (tenant, limits) in all {
            if let std::collections::hash_map::Entry::Vacant(slot) = m.entries.entry(tenant) {
                touched.push(slot.key().clone());
                slot.insert(Entry {
                    version,
                    limits: Some(limits),
                });
            }
        }
        m.floor = m.floor.max(version);
        self.changed(&m);
        touched.sort_unstable();
        touched.dedup();
        touched
    }

    /// Publishes the view of `m`.
    fn changed(&self, m: &Mirror<V>) {
        let view: View<V> = m
            .entries
            .iter()
            .filter_map(|(tenant, e)| Some((tenant.clone(), e.limits.clone()?)))
            .collect();
        self.any.store(!view.is_empty(), Ordering::Release);
        self.view.store(Arc::new(view));
        self.changes.fetch_add(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(rpm: u64) -> Limits {
        Limits {
            requests_per_minute: Some(rpm),
            ..Limits::default()
        }
    }

    fn rpm(t: Option<LimitTemplate>) -> Option<u64> {
        t.and_then(|t| t.limits().requests_per_minute)
    }

    #[test]
    fn live_beats_config_beats_default() {
        let (l, c, d) = (1, 2, 3);
        assert_eq!(resolve(Some(&l), Some(&c), &d), (&1, Source::Live));
        assert_eq!(resolve(Some(&l), None, &d), (&1, Source::Live));
        assert_eq!(resolve(None, Some(&c), &d), (&2, Source::Config));
        assert_eq!(resolve(None, None, &d), (&3, Source::Default));
        assert_eq!(serde_json::to_value(Source::Default).unwrap(), "default");
    }

    #[test]
    fn config_overrides_name_their_path() {
        let mut o = BTreeMap::new();
        let over = |n| TenantOverride::from(limits(n));
        o.insert("acme".to_owned(), over(0));
        let e = config_overrides(&o).unwrap_err();
        assert_eq!(
            e.path,
            "gateway.pressure.perTenant.overrides.acme.requestsPerMinute"
        );
        o.clear();
        o.insert(String::new(), over(5));
        assert_eq!(
            config_overrides(&o).unwrap_err().path,
            "gateway.pressure.perTenant.overrides."
        );
        o.clear();
        o.insert("x".repeat(257), over(5));
        assert!(config_overrides(&o).unwrap_err().problem.contains("256"));
        o.clear();
        o.insert("acme".into(), over(5));
        assert_eq!(rpm(config_overrides(&o).unwrap().remove("acme")), Some(5));
        assert_eq!(compile(&limits(0), "").unwrap_err().path, "requestsPerMinute");
        assert_eq!(compile(&Limits::default(), "p").unwrap_err().path, "p");
    }

    #[test]
    fn an_older_write_never_undoes_a_newer_one() {
        let live = LiveOverrides::default();
        let t = |n| Some(LimitTemplate::new(&limits(n)).unwrap());
        assert!(live.get("a").is_none());
        assert!(live.apply(2, "a", t(10)));
        assert_eq!(rpm(live.get("a")), Some(10));
        assert!(!live.apply(1, "a", t(5)), "older");
        assert!(live.apply(3, "a", None));
        assert!(live.get("a").is_none());
        assert!(!live.apply(2, "a", t(10)), "a removal is remembered");
        let before = live.changes();
        assert!(live.apply(4, "b", t(7)));
        assert_ne!(live.changes(), before);
    }

    #[test]
    fn a_snapshot_replaces_what_it_covers_and_keeps_later_writes() {
        let live = LiveOverrides::default();
        let t = |n| LimitTemplate::new(&limits(n)).unwrap();
        live.apply(1, "gone", Some(t(1)));
        live.apply(9, "later", Some(t(9)));
        let mut all = HashMap::new();
        all.insert("kept".to_owned(), t(3));
        all.insert("later".to_owned(), t(2));
        let touched = live.replace(5, all);
        assert_eq!(touched, ["gone", "kept"]);
        assert!(live.get("gone").is_none());
        assert_eq!(rpm(live.get("kept")), Some(3));
        assert_eq!(rpm(live.get("later")), Some(9), "written after the snapshot");
        assert!(!live.apply(4, "gone", Some(t(4))), "covered by the snapshot");
        assert!(live.apply(6, "gone", Some(t(6))));
    }
}
