//! Counters per domain and descriptor, as envoyproxy/ratelimit keeps them
//! (`total_hits`, `over_limit`, `near_limit`, `within_limit`,
//! `shadow_mode`), written as Prometheus text for `/metrics`.
//!
//! A descriptor is named as upstream names its stat: the config path
//! `key_value.key` (a key-only node by its key), or with `detailed_metric`
//! the request's own values (`key_value` per distinct value). Detailed
//! series are bounded ([`MAX_SERIES`]); past the bound new values roll up
//! into the node's own name, so a flood of distinct values cannot grow the
//! metrics without end.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Most distinct series kept; beyond it detailed names roll up.
pub(crate) const MAX_SERIES: usize = 10_000;

/// The counters of one descriptor.
#[derive(Debug, Default)]
pub(crate) struct Series {
    /// Units asked (the hits of every request, as upstream counts them).
    pub(crate) total_hits: AtomicU64,
    /// Units refused (over the limit; shadow refusals included).
    pub(crate) over_limit: AtomicU64,
    /// Units admitted with at least 80 % of the limit used after them.
    pub(crate) near_limit: AtomicU64,
    /// Units admitted.
    pub(crate) within_limit: AtomicU64,
    /// Units a shadow-mode rule would have refused but answered OK.
    pub(crate) shadow_mode: AtomicU64,
}

/// Every series, plus the service's own counters.
#[derive(Debug, Default)]
pub struct Metrics {
    series: parking_lot::RwLock<HashMap<(String, String), Arc<Series>>>,
    /// Requests answered.
    pub requests: AtomicU64,
    /// Requests answered with a gRPC error because the backend could not
    /// decide (failure mode `closed`, or a backend error).
    pub unavailable: AtomicU64,
    /// Refunds that failed (a grant of a request refused by another
    /// descriptor could not be given back).
    pub refund_errors: AtomicU64,
    /// Configuration reloads applied, and refused.
    pub reloads: AtomicU64,
    /// Reloads refused because a file was invalid.
    pub reload_errors: AtomicU64,
}

impl Metrics {
    /// The series of `descriptor` in `domain`, made on first use; `base`
    /// is the name to roll up into past [`MAX_SERIES`].
    pub(crate) fn series(&self, domain: &str, descriptor: &str, base: &str) -> Arc<Series> {
        if let Some(s) = self
            .series
            .read()
            .get(&(domain.to_owned(), descriptor.to_owned()))
        {
            return Arc::clone(s);
        }
        let mut map = self.series.write();
        let name = if map.len() >= MAX_SERIES { base } else { descriptor };
        Arc::clone(map.entry((domain.to_owned(), name.to_owned())).or_default())
    }

    /// The Prometheus text of every counter.
    pub fn encode(&self, out: &mut String) {
        let map = self.series.read();
        let mut keys: Vec<_> = map.keys().collect();
        keys.sort();
        type Pick = fn(&Series) -> &AtomicU64;
        let families: [(&str, &str, Pick); 5] = [
            ("total_hits", "Units asked per descriptor.", |s| &s.total_hits),
            (
                "over_limit",
                "Units refused per descriptor (shadow refusals included).",
                |s| &s.over_limit,
            ),
            (
                "near_limit",
                "Units admitted at 80 % or more of the limit.",
                |s| &s.near_limit,
            ),
            ("within_limit", "Units admitted.", |s| &s.within_limit),
            (
                "shadow_mode",
                "Units a shadow-mode rule would have refused.",
                |s| &s.shadow_mode,
            ),
        ];
        for (name, help, pick) in families {
            let _ = writeln!(out, "# HELP pressure_rls_{name} {help}");
            let _ = writeln!(out, "# TYPE pressure_rls_{name} counter");
            for k in &keys {
                if let Some(s) = map.get(*k) {
                    let _ = writeln!(
                        out,
                        "pressure_rls_{name}{{domain=\"{}\",descriptor=\"{}\"}} {}",
                        label(&k.0),
                        label(&k.1),
                        pick(s).load(Ordering::Relaxed)
                    );
                }
            }
        }
        let own: [(&str, &str, &AtomicU64); 5] = [
            ("requests", "ShouldRateLimit calls answered.", &self.requests),
            (
                "unavailable",
                "Calls answered UNAVAILABLE: the backend could not decide.",
                &self.unavailable,
            ),
            (
                "refund_errors",
                "Grants of refused requests that could not be given back.",
                &self.refund_errors,
            ),
            ("reloads", "Configuration reloads applied.", &self.reloads),
            (
                "reload_errors",
                "Configuration reloads refused (invalid file).",
                &self.reload_errors,
            ),
        ];
        for (name, help, v) in own {
            let _ = writeln!(out, "# HELP pressure_rls_{name}_total {help}");
            let _ = writeln!(out, "# TYPE pressure_rls_{name}_total counter");
            let _ = writeln!(out, "pressure_rls_{name}_total {}", v.load(Ordering::Relaxed));
        }
    }
}

/// A Prometheus label value, escaped.
fn label(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_are_encoded_and_escaped() {
        let m = Metrics::default();
        m.series("d", "k_\"v\"", "k")
            .total_hits
            .fetch_add(3, Ordering::Relaxed);
        let mut out = String::new();
        m.encode(&mut out);
        assert!(
            out.contains("pressure_rls_total_hits{domain=\"d\",descriptor=\"k_\\\"v\\\"\"} 3"),
            "{out}"
        );
        assert!(out.contains("pressure_rls_requests_total 0"));
    }
}
