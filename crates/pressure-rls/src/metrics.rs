//! Counters per domain and descriptor, as envoyproxy/ratelimit keeps them
//! (`total_hits`, `over_limit`, `near_limit`, `within_limit`,
//! `shadow_mode`), written as Prometheus text for `/metrics`.
//!
//! A descriptor is named as upstream names its stat: the config path
//! `key_value.key` (a key-only node by its key), or with `detailed_metric`
//! the request's own values (`key_value` per distinct value). Detailed
//! series are bounded ([`MAX_SERIES`]); past the bound new values roll up
//! into the node's own name, so a flood of distinct values cannot grow the
//! metrics without end. Every label value is also bounded in length
//! ([`MAX_LABEL_BYTES`] bytes once escaped: a longer one keeps a readable
//! prefix and a hash of the whole, see `id.rs`), so neither the number nor
//! the size of the values can grow `/metrics` or memory past a fixed bound.
//!
//! Counters only go up: every addition saturates at 2⁶⁴−1 ([`add`]), so
//! no `hits_addend` can wrap one.

use crate::id::{LABEL_PREFIX_BYTES, MAX_LABEL_BYTES};
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

/// Adds `n` to `counter`, saturating at `u64::MAX` (a Prometheus counter
/// never goes down).
pub(crate) fn add(counter: &AtomicU64, n: u64) {
    // A plain add while it cannot wrap (every realistic case); the
    // compare-and-swap loop only near the top.
    let before = counter.fetch_add(n, Ordering::Relaxed);
    if before.checked_add(n).is_none() {
        // Wrapped: put the saturated value back. Concurrent adds that
        // landed in between are lost only because the counter is full.
        counter.store(u64::MAX, Ordering::Relaxed);
    }
}

/// Every series, plus the service's own counters.
#[derive(Debug, Default)]
pub struct Metrics {
    /// By (domain, descriptor), both escaped and bounded (module docs).
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
    /// Descriptors counted on their rule's shared overflow counter because
    /// every counter slot (`--max-counters`) held live state.
    pub overflow: AtomicU64,
}

impl Metrics {
    /// The series of `descriptor` in `domain`, made on first use; `base`
    /// is the name to roll up into past [`MAX_SERIES`].
    pub(crate) fn series(&self, domain: &str, descriptor: &str, base: &str) -> Arc<Series> {
        let key = (label(domain), label(descriptor));
        if let Some(s) = self.series.read().get(&key) {
            return Arc::clone(s);
        }
        let mut map = self.series.write();
        let key = if map.len() >= MAX_SERIES && !map.contains_key(&key) {
            (key.0, label(base))
        } else {
            key
        };
        Arc::clone(map.entry(key).or_default())
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
                        k.0,
                        k.1,
                        pick(s).load(Ordering::Relaxed)
                    );
                }
            }
        }
        let own: [(&str, &str, &AtomicU64); 6] = [
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
            (
                "overflow",
                "Descriptors counted on their rule's shared overflow counter (every counter slot live).",
                &self.overflow,
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

/// A Prometheus label value, escaped and bounded to [`MAX_LABEL_BYTES`]
/// (a prefix and a hash of the escaped whole beyond it).
fn label(s: &str) -> String {
    let mut out = crate::id::Bounded::new(MAX_LABEL_BYTES, LABEL_PREFIX_BYTES);
    let mut start = 0;
    for (i, c) in s.char_indices() {
        let escaped = match c {
            '\\' => "\\\\",
            '"' => "\\\"",
            '\n' => "\\n",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        out.push_str(escaped);
        start = i + 1;
    }
    out.push_str(&s[start..]);
    let shortened = out.shortened();
    let mut out = out.finish();
    if shortened {
        // The prefix may end half-way through an escape (`\` cut after its
        // backslash): drop the lone backslash, else `\~` would not parse.
        let (head, hash) = out.split_at(out.len() - crate::id::HASH_SUFFIX_BYTES);
        let lone = head.bytes().rev().take_while(|b| *b == b'\\').count() % 2 == 1;
        if lone {
            out = format!("{}{hash}", &head[..head.len() - 1]);
        }
    }
    out
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

    #[test]
    fn counters_saturate_instead_of_wrapping() {
        let c = AtomicU64::new(0);
        for n in [u64::MAX, 1 << 63, 0, u64::from(u32::MAX), 1] {
            let before = c.load(Ordering::Relaxed);
            add(&c, n);
            assert!(c.load(Ordering::Relaxed) >= before);
        }
        assert_eq!(c.load(Ordering::Relaxed), u64::MAX);
        let c = AtomicU64::new(5);
        add(&c, u64::from(u32::MAX) + 1);
        assert_eq!(c.load(Ordering::Relaxed), (1 << 32) + 5);
    }

    #[test]
    fn labels_are_bounded_and_stay_valid_escapes() {
        // Every cut point through a run of escapes: never a lone backslash
        // before the hash, never longer than the bound.
        for pad in 0..4 {
            for body in ["\\", "\"", "\n", "ab"] {
                let s = format!("{}{}", "x".repeat(pad), body.repeat(5_000));
                let l = label(&s);
                assert!(l.len() <= MAX_LABEL_BYTES, "{}", l.len());
                let head = &l[..l.len() - crate::id::HASH_SUFFIX_BYTES];
                let lone = head.bytes().rev().take_while(|b| *b == b'\\').count() % 2 == 1;
                assert!(!lone, "{l}");
            }
        }
        let m = Metrics::default();
        let long = "v".repeat(1 << 20);
        m.series("d", &long, "k")
            .total_hits
            .fetch_add(1, Ordering::Relaxed);
        let mut out = String::new();
        m.encode(&mut out);
        assert!(out.len() < 8 * 1024, "{}", out.len());
    }
}
