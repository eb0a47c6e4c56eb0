//! Resource ids of descriptors: `rls:<domain>:<key>=<value>/<key>=<value>`,
//! one per distinct request descriptor (a config key without a value counts
//! each request value apart, as upstream's cache keys do).
//!
//! Every part is percent-escaped (`%`, `:`, `=`, `/`, `~` and control
//! bytes), so no domain, key or value can forge another descriptor's id:
//! the separators only ever appear as separators.
//!
//! **Bounded length.** An id (and so a Redis key, a log field, an error
//! message) is at most [`MAX_ID_BYTES`] bytes whatever the request's
//! strings: a longer one keeps its first [`ID_PREFIX_BYTES`] bytes, readable,
//! followed by `~` and 32 hex digits of the SHA-256 of the whole id
//! ([`Bounded`]). `~` is escaped inside every part, so a shortened id can
//! equal no id of a shorter descriptor, and two long descriptors share an
//! id only if their 128-bit hashes collide. The same bound, smaller
//! ([`MAX_LABEL_BYTES`]), applies to metric label values.

use crate::proto::Entry;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;

/// Most bytes of a resource id.
pub const MAX_ID_BYTES: usize = 256;
/// Bytes of a too-long id kept as they are, before its hash.
pub(crate) const ID_PREFIX_BYTES: usize = 200;
/// Most bytes of a metric label value (escaped for Prometheus).
pub const MAX_LABEL_BYTES: usize = 128;
/// Bytes of a too-long label value kept as they are, before its hash.
pub(crate) const LABEL_PREFIX_BYTES: usize = 64;
/// Hex digits of the hash ending a shortened string (128 bits).
const HASH_HEX: usize = 32;
/// Bytes a shortened string ends with: `~` and the hash.
pub(crate) const HASH_SUFFIX_BYTES: usize = HASH_HEX + 1;

/// A string written piece by piece and kept within `max` bytes: kept whole
/// while it fits, else its first `prefix` bytes (on a character boundary),
/// `~` and [`HASH_HEX`] hex digits of the SHA-256 of all of it. Memory is
/// O(`max`) whatever is written (nothing longer is ever held).
pub(crate) struct Bounded {
    out: String,
    max: usize,
    prefix: usize,
    hasher: Sha256,
    /// Bytes written so far.
    len: usize,
}

impl Bounded {
    pub(crate) fn new(max: usize, prefix: usize) -> Self {
        debug_assert!(prefix + 1 + HASH_HEX <= max);
        Self {
            out: String::with_capacity(64),
            max,
            prefix,
            hasher: Sha256::new(),
            len: 0,
        }
    }

    pub(crate) fn push_str(&mut self, s: &str) {
        self.hasher.update(s.as_bytes());
        // `out` holds all written so far until a piece does not fit whole;
        // from then on it stops growing, so it stays a prefix.
        if self.out.len() == self.len {
            let room = self.max.saturating_sub(self.out.len());
            let mut end = s.len().min(room);
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            self.out.push_str(&s[..end]);
        }
        self.len = self.len.saturating_add(s.len());
    }

    pub(crate) fn push(&mut self, c: char) {
        let mut buf = [0u8; 4];
        self.push_str(c.encode_utf8(&mut buf));
    }

    /// Whether more than `max` bytes were written (`finish` shortens).
    pub(crate) fn shortened(&self) -> bool {
        self.len > self.max
    }

    pub(crate) fn finish(self) -> String {
        if !self.shortened() {
            return self.out;
        }
        let mut out = self.out;
        let mut end = self.prefix.min(out.len());
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out.push('~');
        for b in &self.hasher.finalize()[..HASH_HEX / 2] {
            let _ = write!(out, "{b:02x}");
        }
        out
    }
}

impl std::fmt::Write for Bounded {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.push_str(s);
        Ok(())
    }
}

/// The id of the counter of `entries` in `domain`; `limit_override` marks
/// the counter of a limit Envoy sent with the descriptor (kept apart from
/// the configured one, so the two never change each other's limits). At
/// most [`MAX_ID_BYTES`] bytes (module docs).
pub fn resource_id(domain: &str, entries: &[Entry], limit_override: bool) -> String {
    let mut id = Bounded::new(MAX_ID_BYTES, ID_PREFIX_BYTES);
    id.push_str("rls:");
    escape(&mut id, domain);
    id.push(':');
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            id.push('/');
        }
        escape(&mut id, &e.key);
        id.push('=');
        escape(&mut id, &e.value);
    }
    if limit_override {
        id.push_str("~override");
    }
    id.finish()
}

/// The id of the overflow counter of a rule in `domain`: the counter that
/// descriptors of that rule share when every counter slot is live (see
/// `counters.rs`). `rule` names the rule: its config path, or for a limit
/// Envoy sent, `override` with its unit and `requests_per_unit`. Starts
/// with `~`, which no escaped entry does, so no descriptor can address it.
pub(crate) fn overflow_id(domain: &str, rule: &str) -> String {
    let mut id = Bounded::new(MAX_ID_BYTES, ID_PREFIX_BYTES);
    id.push_str("rls:");
    escape(&mut id, domain);
    id.push_str(":~overflow/");
    escape(&mut id, rule);
    id.finish()
}

fn escape(out: &mut Bounded, s: &str) {
    let mut start = 0;
    for (i, c) in s.char_indices() {
        let special = matches!(c, '%' | ':' | '=' | '/' | '~') || c.is_control();
        if !special {
            continue;
        }
        out.push_str(&s[start..i]);
        start = i + c.len_utf8();
        let mut buf = [0u8; 4];
        for b in c.encode_utf8(&mut buf).bytes() {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out.push_str(&s[start..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(k: &str, v: &str) -> Entry {
        Entry::new(k, v)
    }

    #[test]
    fn ids_name_domain_and_entries() {
        assert_eq!(
            resource_id("edge", &[e("remote_address", "10.0.0.1")], false),
            "rls:edge:remote_address=10.0.0.1"
        );
        assert_eq!(
            resource_id("d", &[e("a", "1"), e("b", "2")], true),
            "rls:d:a=1/b=2~override"
        );
    }

    #[test]
    fn no_value_forges_another_id() {
        // One entry whose value holds a separator and a second entry.
        let forged = resource_id("d", &[e("a", "1/b=2")], false);
        let real = resource_id("d", &[e("a", "1"), e("b", "2")], false);
        assert_ne!(forged, real);
        assert_eq!(forged, "rls:d:a=1%2Fb%3D2");
        // A domain with a colon cannot become a domain plus entries.
        assert_ne!(
            resource_id("d:a=1", &[], false),
            resource_id("d", &[e("a", "1")], false)
        );
        // An override marker in a value is escaped too.
        assert_ne!(
            resource_id("d", &[e("a", "1~override")], false),
            resource_id("d", &[e("a", "1")], true)
        );
        assert_eq!(resource_id("d", &[e("k", "%2F")], false), "rls:d:k=%252F");
        assert_eq!(resource_id("d", &[e("k", "a\nb")], false), "rls:d:k=a%0Ab");
        assert_eq!(resource_id("d", &[e("k", "é~")], false), "rls:d:k=é%7E");
        // No entry can name an overflow counter.
        assert_ne!(
            overflow_id("d", "k"),
            resource_id("d", &[e("~overflow/k", "")], false)
        );
    }

    #[test]
    fn long_ids_keep_a_prefix_and_a_hash_of_the_whole() {
        let long = "x".repeat(1 << 20);
        let a = resource_id("d", &[e("k", &long)], false);
        assert!(a.len() <= MAX_ID_BYTES, "{}", a.len());
        assert!(a.starts_with("rls:d:k=xxxx"), "{a}");
        // The whole value counts: one byte apart at the end, another id.
        let mut other = long.clone();
        other.push('y');
        let b = resource_id("d", &[e("k", &other)], false);
        assert_ne!(a, b);
        assert_eq!(a.len(), b.len());
        // Deterministic (the same key on every instance sharing Redis).
        assert_eq!(a, resource_id("d", &[e("k", &long)], false));
        // Just at the bound: kept whole; one past: shortened.
        let fits = "v".repeat(MAX_ID_BYTES - "rls:d:k=".len());
        assert_eq!(
            resource_id("d", &[e("k", &fits)], false),
            format!("rls:d:k={fits}")
        );
        let over = format!("{fits}v");
        let short = resource_id("d", &[e("k", &over)], false);
        assert!(short.len() <= MAX_ID_BYTES && short.contains('~'), "{short}");
        // Multi-byte characters are cut on a boundary.
        let wide = resource_id("d", &[e("k", &"é".repeat(500))], false);
        assert!(wide.len() <= MAX_ID_BYTES);
        // Override ids of long values stay apart from configured ones.
        assert_ne!(resource_id("d", &[e("k", &long)], true), a);
    }
}
