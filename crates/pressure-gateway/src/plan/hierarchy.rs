//! The tenant hierarchy (nested budgets): which tenant each tenant belongs
//! to, and the chain a request is charged along — the tenant, its parent,
//! the parent's parent, up to a root.
//!
//! A parent comes from `perTenant.overrides.<id>.parent` (config) or from a
//! live write (`PUT /admin/pressure/tenants/{id}/parent`, kept in the
//! backend so the fleet agrees); the live one wins, and a live `""` takes a
//! config parent away. A parent is a tenant like any other: its limits are
//! its override or the template, and its count is its whole subtree's
//! (every descendant's request is charged to it too).
//!
//! **Bounds**: no cycle, and no chain of more than `perTenant.maxDepth`
//! tenants from a root down to any descendant — both checked when the
//! config loads and when a live parent is written (a `400` naming the
//! tenants). Two instances writing at once could still close a cycle
//! between them; the request path therefore walks at most `maxDepth`
//! tenants and stops at the first repeat, so a bad link can never loop or
//! grow a chain.

use super::overrides::{check_tenant, LiveParents, View};
use super::Plan;
use crate::backend::{AnyBackend, Broker};
use crate::settings::{ConfigError, TenantOverride};
use pressure_core::ResourceHandle;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// A tenant of a chain that could not register, and why.
pub(crate) type Unregistrable = (String, pressure_core::Error);

/// Largest `perTenant.maxDepth` accepted.
pub(crate) const MAX_DEPTH_BOUND: usize = 16;

/// The parents of the config: tenant → parent.
pub(crate) type ConfigParents = BTreeMap<String, String>;

/// The parent of `tenant`: the live one (if written; `""` is none), else
/// the config's.
pub(crate) fn parent_of<'a>(
    tenant: &str,
    config: &'a ConfigParents,
    live: Option<&'a View<String>>,
) -> Option<&'a str> {
    match live.and_then(|l| l.get(tenant)) {
        Some(p) if p.is_empty() => None,
        Some(p) => Some(p.as_str()),
        None => config.get(tenant).map(String::as_str),
    }
}

/// `tenant` and its ancestors, innermost first: at most `max_depth`
/// tenants, stopping before the first repeat (module docs).
pub(crate) fn chain<'a>(
    tenant: &'a str,
    max_depth: usize,
    parent: impl Fn(&str) -> Option<&'a str>,
) -> Vec<&'a str> {
    let mut out: Vec<&'a str> = vec![tenant];
    while out.len() < max_depth {
        let Some(p) = out.last().and_then(|t| parent(t)) else {
            break;
        };
        if out.contains(&p) {
            break;
        }
        out.push(p);
    }
    out
}

/// The config's parents, checked: ids, no tenant its own ancestor, no
/// chain longer than `max_depth`; a problem names
/// `gateway.pressure.perTenant.overrides.<id>.parent`.
pub(crate) fn config_parents(
    overrides: &BTreeMap<String, TenantOverride>,
    max_depth: usize,
) -> Result<ConfigParents, ConfigError> {
    if !(1..=MAX_DEPTH_BOUND).contains(&max_depth) {
        return Err(ConfigError::new(
            "gateway.pressure.perTenant.maxDepth",
            format!("must be 1 to {MAX_DEPTH_BOUND}, found {max_depth}"),
        ));
    }
    let mut parents = ConfigParents::new();
    for (id, o) in overrides {
        if let Some(p) = &o.parent {
            let path = format!("gateway.pressure.perTenant.overrides.{id}.parent");
            check_tenant(p, &path)?;
            parents.insert(id.clone(), p.clone());
        }
    }
    for id in parents.keys() {
        let path = format!("gateway.pressure.perTenant.overrides.{id}.parent");
        check_chain(id, max_depth, |t| parents.get(t).map(String::as_str))
            .map_err(|problem| ConfigError::new(path, problem))?;
    }
    Ok(parents)
}

/// Whether the chain up from `tenant` is acyclic and at most `max_depth`
/// tenants long; the problem, naming the tenants, otherwise.
fn check_chain<'a>(
    tenant: &'a str,
    max_depth: usize,
    parent: impl Fn(&str) -> Option<&'a str>,
) -> Result<(), String> {
    let mut seen: Vec<&str> = vec![tenant];
    let mut at = tenant;
    while let Some(p) = parent(at) {
        if seen.contains(&p) {
            seen.push(p);
            return Err(format!("a cycle: {}", seen.join(" → ")));
        }
        seen.push(p);
        if seen.len() > max_depth {
            return Err(format!(
                "a chain of more than perTenant.maxDepth ({max_depth}) tenants: {} → …",
                seen.join(" → ")
            ));
        }
        at = p;
    }
    Ok(())
}

/// Whether giving `tenant` the parent `parent` (`None`: no parent) keeps
/// the hierarchy acyclic and every chain within `max_depth`, given every
/// other link (`links`: tenant → parent, the config's overlaid by the live
/// ones, `tenant`'s own ignored); the problem otherwise.
pub(crate) fn check_link(
    tenant: &str,
    parent: Option<&str>,
    links: &HashMap<String, String>,
    max_depth: usize,
) -> Result<(), String> {
    let Some(parent) = parent else {
        return Ok(());
    };
    if parent == tenant {
        return Err(format!("a tenant cannot be its own parent: {tenant}"));
    }
    let up = |t: &str| -> Option<&str> {
        if t == tenant {
            Some(parent)
        } else {
            links.get(t).map(String::as_str)
        }
    };
    // Every chain through `tenant`: its deepest descendant's.
    let mut children: HashMap<&str, Vec<&str>> = HashMap::new();
    for (c, p) in links {
        if c != tenant {
            children.entry(p.as_str()).or_default().push(c.as_str());
        }
    }
    let mut deepest = tenant;
    let mut frontier = vec![tenant];
    let mut visited: HashSet<&str> = HashSet::from([tenant]);
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for t in frontier {
            for &c in children.get(t).map(Vec::as_slice).unwrap_or(&[]) {
                if visited.insert(c) {
                    deepest = c;
                    next.push(c);
                }
            }
        }
        frontier = next;
    }
    check_chain(deepest, max_depth, up)?;
    check_chain(tenant, max_depth, up)
}

impl Plan {
    /// The plan reading `live` as its live tenant parents (a gateway's
    /// plans share one).
    pub(crate) fn with_live_parents(mut self, live: Arc<LiveParents>) -> Self {
        self.live_parents = live;
        self
    }

    /// `perTenant.maxDepth`.
    pub(crate) fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// Whether any tenant has a parent (config or live): without, a
    /// tenant's chain is the tenant alone and the request path skips the
    /// walk.
    pub(crate) fn has_parents(&self) -> bool {
        !self.parents.is_empty() || self.live_parents.view().is_some()
    }

    /// The parent of `tenant` now, if any.
    pub(crate) fn parent(&self, tenant: &str) -> Option<String> {
        let live = self.live_parents.view();
        parent_of(tenant, &self.parents, live.as_deref().map(|v| &**v)).map(str::to_owned)
    }

    /// `tenant` and its ancestors now, innermost first (module docs).
    pub(crate) fn lineage(&self, tenant: &str) -> Vec<String> {
        let live = self.live_parents.view();
        chain(tenant, self.max_depth, |t| {
            parent_of(t, &self.parents, live.as_deref().map(|v| &**v))
        })
        .into_iter()
        .map(str::to_owned)
        .collect()
    }

    /// Every parent link now: the config's overlaid by the live ones.
    pub(crate) fn parent_links(&self) -> HashMap<String, String> {
        let mut links: HashMap<String, String> =
            self.parents.iter().map(|(c, p)| (c.clone(), p.clone())).collect();
        if let Some(live) = self.live_parents.view() {
            for (c, p) in live.iter() {
                if p.is_empty() {
                    links.remove(c);
                } else {
                    links.insert(c.clone(), p.clone());
                }
            }
        }
        links
    }

    /// The resources of `tenant` and of each of its ancestors, innermost
    /// first, each registered on first use with its limits, all placed in
    /// the group named by the root's resource, whose own keys carry that
    /// name as their hash tag — so a hierarchy lives in one hash slot on
    /// Redis Cluster and a root's keys never move.
    /// `None` while tenants are not limited; the failing tenant and why
    /// when one cannot register.
    pub(crate) fn tenant_chain(
        &self,
        broker: &Broker,
        tenant: &str,
    ) -> Option<Result<Vec<ResourceHandle<AnyBackend>>, Unregistrable>> {
        let lineage = self.lineage(tenant);
        let root = lineage.last().map_or(tenant, String::as_str);
        let group = crate::resources::tenant(root);
        let mut out = Vec::with_capacity(lineage.len());
        for t in &lineage {
            // The root in its own group keeps its plain keys (and a former
            // member that became a root moves back to them).
            match self.tenant_handle_in(broker, t, Some(group.as_str()))? {
                Ok(h) => out.push(h),
                Err(e) => return Some(Err((t.clone(), e))),
            }
        }
        Some(Ok(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overrides(links: &[(&str, &str)]) -> BTreeMap<String, TenantOverride> {
        links
            .iter()
            .map(|(c, p)| {
                (
                    (*c).to_owned(),
                    TenantOverride {
                        limits: None,
                        parent: Some((*p).to_owned()),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn the_chain_is_innermost_first_and_bounded() {
        let p = config_parents(&overrides(&[("key", "team"), ("team", "org")]), 4).unwrap();
        assert_eq!(
            chain("key", 4, |t| parent_of(t, &p, None)),
            ["key", "team", "org"]
        );
        assert_eq!(chain("key", 2, |t| parent_of(t, &p, None)), ["key", "team"]);
        assert_eq!(chain("other", 4, |t| parent_of(t, &p, None)), ["other"]);
        let mut live = View::new();
        live.insert("team".to_owned(), String::new());
        assert_eq!(
            chain("key", 4, |t| parent_of(t, &p, Some(&live))),
            ["key", "team"]
        );
        live.insert("team".to_owned(), "key".to_owned());
        assert_eq!(
            chain("key", 9, |t| parent_of(t, &p, Some(&live))),
            ["key", "team"],
            "a cycle written by a race stops at the repeat"
        );
    }

    #[test]
    fn config_cycles_and_deep_chains_name_the_tenants() {
        let e = config_parents(&overrides(&[("a", "b"), ("b", "a")]), 4).unwrap_err();
        assert_eq!(e.path, "gateway.pressure.perTenant.overrides.a.parent");
        assert!(e.problem.contains("cycle: a → b → a"), "{}", e.problem);
        let e = config_parents(&overrides(&[("a", "a")]), 4).unwrap_err();
        assert!(e.problem.contains("cycle"), "{}", e.problem);
        let deep = overrides(&[("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")]);
        let e = config_parents(&deep, 4).unwrap_err();
        assert!(e.problem.contains("maxDepth (4)"), "{}", e.problem);
        assert!(config_parents(&deep, 5).is_ok());
        assert_eq!(
            config_parents(&deep, 0).unwrap_err().path,
            "gateway.pressure.perTenant.maxDepth"
        );
        let e = config_parents(&overrides(&[("a", "")]), 4).unwrap_err();
        assert!(e.problem.contains("empty"), "{}", e.problem);
    }

    #[test]
    fn a_live_link_is_checked_against_ancestors_and_descendants() {
        let links: HashMap<String, String> = [("key", "team"), ("team", "org")]
            .iter()
            .map(|(c, p)| ((*c).to_owned(), (*p).to_owned()))
            .collect();
        assert!(check_link("org", Some("key"), &links, 9)
            .unwrap_err()
            .contains("cycle"));
        assert!(check_link("org", Some("org"), &links, 9)
            .unwrap_err()
            .contains("own parent"));
        assert!(check_link("org", Some("corp"), &links, 4).is_ok());
        let e = check_link("org", Some("corp"), &links, 3).unwrap_err();
        assert!(e.contains("maxDepth (3)"), "{e}");
        assert!(check_link("new", Some("key"), &links, 4).is_ok());
        assert!(check_link("new", Some("key"), &links, 3).is_err());
        assert!(check_link("org", None, &links, 1).is_ok());
    }
}
