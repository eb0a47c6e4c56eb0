//! The tenant hierarchy on the operator's pages (nested budgets): the
//! summary's `hierarchy` (the dashboard draws it as a tree) and the
//! parents' spend in `/metrics`.
//!
//! A level's count is its whole subtree's (every descendant's request is
//! charged to it), so each node shows what its subtree spent against its
//! own budget. Bounded whatever the size of the hierarchy: at most
//! [`MAX_NODES`] nodes, roots first then depth by depth, each one store
//! read (`truncated` says when some were left out).

use super::store_reads::with_usage;
use super::AdminState;
use crate::resources;
use pressure_core::ResourceStats;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Most nodes the summary shows.
pub(super) const MAX_NODES: usize = 32;

/// The tenants of `links` (child → parent) in tree order — roots first,
/// then each depth in turn, by id — with their parents; `true` when more
/// than `max` were left out.
fn nodes(links: &BTreeMap<String, String>, max: usize) -> (Vec<(String, Option<String>)>, bool) {
    let mut children: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut all: BTreeSet<&str> = BTreeSet::new();
    for (c, p) in links {
        children.entry(p.as_str()).or_default().push(c.as_str());
        all.insert(c.as_str());
        all.insert(p.as_str());
    }
    let mut level: Vec<&str> = all.iter().copied().filter(|t| !links.contains_key(*t)).collect();
    let mut out = Vec::new();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    while !level.is_empty() {
        let mut next = Vec::new();
        for t in level {
            if !seen.insert(t) {
                continue;
            }
            if out.len() == max {
                return (out, true);
            }
            out.push((t.to_owned(), links.get(t).cloned()));
            next.extend(children.get(t).into_iter().flatten().copied());
        }
        next.sort_unstable();
        level = next;
    }
    (out, false)
}

/// The summary's `hierarchy`: `{"nodes":[{"tenant","parent","limits",
/// "usage","budgets","allowed","denied"}],"truncated"}` — empty when no
/// tenant has a parent.
pub(super) async fn summary(state: &AdminState) -> Value {
    let Some(control) = state.control.as_ref() else {
        return json!({ "nodes": [], "truncated": false });
    };
    let plan = control.plan();
    let links: BTreeMap<String, String> = plan.parent_links().into_iter().collect();
    let (nodes, truncated) = nodes(&links, MAX_NODES);
    let stats = read(state, &nodes).await;
    let rows: Vec<Value> = nodes
        .iter()
        .map(|(t, p)| {
            let resource = resources::tenant(t);
            let s = stats.iter().find(|s| s.resource == resource);
            json!({
                "tenant": t,
                "parent": p,
                "limits": s.map(|s| &s.limits),
                "usage": s.map(|s| &s.usage),
                "budgets": s.map(super::budgets::rows).unwrap_or_default(),
                "allowed": s.map_or(0, |s| s.allowed),
                "denied": s.map_or(0, |s| s.denied),
            })
        })
        .collect();
    json!({ "nodes": rows, "truncated": truncated })
}

/// The registered ones of `nodes`, their usage read from the store.
async fn read(state: &AdminState, nodes: &[(String, Option<String>)]) -> Vec<ResourceStats> {
    let wanted: BTreeSet<String> = nodes.iter().map(|(t, _)| resources::tenant(t)).collect();
    let local: Vec<ResourceStats> = state
        .broker
        .local_stats()
        .into_iter()
        .filter(|s| wanted.contains(&s.resource))
        .collect();
    with_usage(state, local).await
}

/// The tenants that are parents (a level above another), for `/metrics`:
/// at most `max`, roots first.
pub(super) fn parents(state: &AdminState, max: usize) -> Vec<String> {
    let Some(control) = state.control.as_ref() else {
        return Vec::new();
    };
    let links: BTreeMap<String, String> = control.plan().parent_links().into_iter().collect();
    let parents: BTreeSet<&String> = links.values().collect();
    nodes(&links, usize::MAX)
        .0
        .into_iter()
        .map(|(t, _)| t)
        .filter(|t| parents.contains(t))
        .take(max)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_first_then_depth_by_depth_and_bounded() {
        let links: BTreeMap<String, String> = [
            ("alice", "team-a"),
            ("bob", "team-b"),
            ("team-a", "org"),
            ("team-b", "org"),
            ("x", "y"),
        ]
        .iter()
        .map(|(c, p)| ((*c).to_owned(), (*p).to_owned()))
        .collect();
        let (all, cut) = nodes(&links, 100);
        let order: Vec<&str> = all.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(order, ["org", "y", "team-a", "team-b", "x", "alice", "bob"]);
        assert!(!cut);
        assert_eq!(all[2].1.as_deref(), Some("org"));
        let (some, cut) = nodes(&links, 3);
        assert_eq!(some.len(), 3);
        assert!(cut);
        // A cycle written by a race has no root: it is not drawn, and
        // nothing loops.
        let cycle: BTreeMap<String, String> = [("a", "b"), ("b", "a")]
            .iter()
            .map(|(c, p)| ((*c).to_owned(), (*p).to_owned()))
            .collect();
        assert_eq!(nodes(&cycle, 10).0.len(), 0);
    }
}
