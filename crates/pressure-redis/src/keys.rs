//! Key names. All keys of one resource share a hash tag built from the
//! escaped resource id, so they live in one Redis Cluster slot and no id —
//! whatever braces, colons, spaces or unicode it holds — can address the
//! keys of another.

/// Escapes a resource id for use inside a hash tag: bytes outside
/// `[A-Za-z0-9._:-]` become `%XX`. The mapping is injective, and the result
/// never contains `{` or `}`.
pub fn escape(resource: &str) -> String {
    let mut out = String::with_capacity(resource.len() + 1);
    // A leading letter keeps the tag non-empty for an empty id.
    out.push('r');
    for b in resource.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-') {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
    out
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// The keys of a resource: today one state hash (rates, windows and leases
/// together, so an acquisition touches one key); every key of the resource
/// carries the same hash tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceKeys {
    /// Hash with GCRA TATs, window sub-windows and concurrency leases.
    pub state: String,
    prefix_tag: String,
}

impl ResourceKeys {
    /// Keys of `resource` under `prefix`.
    pub fn new(prefix: &str, resource: &str) -> Self {
        let prefix_tag = format!("{prefix}:{{{}}}", escape(resource));
        Self {
            state: format!("{prefix_tag}:s"),
            prefix_tag,
        }
    }

    /// Keys of `resource` as a member of `group` under `prefix` (a
    /// hierarchy of budgets charged together, see
    /// `pressure_core::Backend::attach_grouped`):
    /// `<prefix>:{<escape(group)>}:<escape(resource)>:s`. The hash tag is
    /// the group's — the very tag of the resource whose id is `group`
    /// ([`ResourceKeys::new`]), so a hierarchy's root registered without a
    /// group and its members registered in the root's group share one Redis
    /// Cluster slot, and a nested acquisition over them is one script call.
    /// No grouped key is an ungrouped one (those have one part after the
    /// tag, a suffix without `:`; these have the escaped resource id, which
    /// starts with `r`, then the suffix), another group's (the tag differs)
    /// or another member's (the escaped id has no `{` `}` and the suffixes
    /// no `:`).
    pub fn grouped(prefix: &str, group: &str, resource: &str) -> Self {
        let prefix_tag = format!("{prefix}:{{{}}}:{}", escape(group), escape(resource));
        Self {
            state: format!("{prefix_tag}:s"),
            prefix_tag,
        }
    }

    /// Another key of the same resource (same slot), named by `suffix`.
    pub fn sibling(&self, suffix: &str) -> String {
        format!("{}:{suffix}", self.prefix_tag)
    }
}

/// A lease's name in its resource's state hash (its field, and its member
/// in the concurrency set): the lease id as 16 hex digits, so every id has
/// one spelling in the scripts and in the releases queued for later.
pub(crate) fn member(lease: u64) -> String {
    format!("{lease:016x}")
}

/// The keys of the shared circuit breaker `name` (`lua/breaker.lua`),
/// under the hash tag of its escaped name, with suffixes no resource uses
/// (`:b`, `:bw`), so no breaker name can address a resource's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakerKeys {
    /// Hash with state, epoch, open-until and probe counts.
    pub state: String,
    /// Hash with the shared window's buckets.
    pub window: String,
}

impl BreakerKeys {
    /// Keys of breaker `name` under `prefix`.
    pub fn new(prefix: &str, name: &str) -> Self {
        let k = ResourceKeys::new(prefix, name);
        Self {
            state: k.sibling("b"),
            window: k.sibling("bw"),
        }
    }
}

/// The pub/sub channel on which `lua/breaker.lua` announces every shared
/// breaker transition as `"<name> <open|closed|half_open> <epoch>"`.
pub fn breaker_channel(prefix: &str) -> String {
    format!("{prefix}:breaker")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn tag(key: &str) -> &str {
        let open = key.find('{').expect("has a tag");
        let close = key[open..].find('}').expect("closed") + open;
        &key[open + 1..close]
    }

    #[test]
    fn hostile_ids_never_collide_or_escape_their_tag() {
        let ids = [
            "",
            "a",
            "a}",
            "{a}",
            "a:s",
            "a}:s",
            "}{",
            "tenant 1",
            "tenant%201",
            "tenant%25201",
            "日本",
            "a\u{0}b",
            "a{b}c",
            "gateway:tenant:x}:c",
            "r",
            "%",
            "%25",
        ];
        let mut seen = HashSet::new();
        for id in ids {
            let k = ResourceKeys::new("pressure", id);
            assert!(seen.insert(k.state.clone()), "collision for {id:?}");
            assert_eq!(tag(&k.state), escape(id), "the tag is exactly the escaped id");
            assert_eq!(tag(&k.state), tag(&k.sibling("q")), "one slot per resource");
            assert!(!escape(id).contains(['{', '}']));
        }
        // Grouped keys: every (group, resource) pair its own key, the tag
        // exactly the group's, never an ungrouped key nor a breaker's. The
        // ungrouped keys and their siblings are in `seen` first.
        for id in ids {
            assert!(
                seen.insert(ResourceKeys::new("pressure", id).sibling("q")),
                "{id:?}"
            );
        }
        for group in ids {
            for id in ids {
                let k = ResourceKeys::grouped("pressure", group, id);
                assert!(seen.insert(k.state.clone()), "collision for {group:?}/{id:?}");
                assert_eq!(tag(&k.state), escape(group));
                assert_eq!(
                    tag(&k.state),
                    tag(&ResourceKeys::new("pressure", group).state),
                    "a group's members share the slot of the resource named by the group"
                );
                assert_eq!(tag(&k.state), tag(&k.sibling("q")), "one slot per group");
                assert_eq!(
                    tag(&k.state),
                    tag(&ResourceKeys::grouped("pressure", group, "other").state),
                    "one slot per group"
                );
                assert!(seen.insert(k.sibling("q")), "{group:?}/{id:?}");
            }
        }
        for id in ids {
            let b = BreakerKeys::new("pressure", id);
            assert!(
                seen.insert(b.state.clone()) && seen.insert(b.window.clone()),
                "{id:?}"
            );
        }
    }
}
