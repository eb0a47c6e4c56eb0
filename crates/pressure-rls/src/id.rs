//! Resource ids of descriptors: `rls:<domain>:<key>=<value>/<key>=<value>`,
//! one per distinct request descriptor (a config key without a value counts
//! each request value apart, as upstream's cache keys do).
//!
//! Every part is percent-escaped (`%`, `:`, `=`, `/`, `~` and control
//! bytes), so no domain, key or value can forge another descriptor's id:
//! the separators only ever appear as separators.

use crate::proto::Entry;
use std::fmt::Write as _;

/// The id of the counter of `entries` in `domain`; `limit_override` marks
/// the counter of a limit Envoy sent with the descriptor (kept apart from
/// the configured one, so the two never change each other's limits).
pub fn resource_id(domain: &str, entries: &[Entry], limit_override: bool) -> String {
    let mut id = String::with_capacity(
        8 + domain.len()
            + entries
                .iter()
                .map(|e| e.key.len() + e.value.len() + 2)
                .sum::<usize>(),
    );
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
    id
}

fn escape(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '%' | ':' | '=' | '/' | '~' => {
                let _ = write!(out, "%{:02X}", c as u32);
            }
            c if c.is_control() => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    let _ = write!(out, "%{b:02X}");
                }
            }
            c => out.push(c),
        }
    }
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
    }
}
