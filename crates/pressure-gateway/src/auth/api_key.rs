//! The API key table of a plan (`gateway.auth.apiKeys`): the second way to
//! name a tenant, for callers without a JWT (what LLM gateways call virtual
//! keys).
//!
//! The config holds the SHA-256 of each key, never the key. A presented key
//! is hashed and looked up: first by the first 8 bytes of its digest (a
//! `HashMap`, not constant time), then compared on all 32 bytes in constant
//! time (`subtle`). The lookup's timing can at most tell an attacker how a
//! digest *of a guess* relates to a stored one — which guess hashes near a
//! stored digest — and that is worth nothing: SHA-256's preimage resistance
//! means knowing (part of) a stored digest does not help find a key that
//! hashes to it, so guessing stays a blind search of the key space.
//!
//! Nothing here holds or logs a key: an entry is known by its label (its
//! `name`, or the first 8 hex digits of its hash).

use super::tenant::Tenant;
use crate::backend::AnyBackend;
use pressure_core::ResourceHandle;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use subtle::ConstantTimeEq;

/// The SHA-256 digest of a key.
pub(crate) type KeyDigest = [u8; 32];

/// The digest of `key`'s bytes.
pub(crate) fn digest(key: &[u8]) -> KeyDigest {
    Sha256::digest(key).into()
}

/// One known key: the tenant it names, its label, and its own limit.
pub(crate) struct ApiKey {
    digest: KeyDigest,
    tenant: Tenant,
    label: String,
    limit: Option<ResourceHandle<AnyBackend>>,
}

/// Shows the label, never the digest: a printed plan carries no more of a
/// key's hash than a log line does.
impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKey")
            .field("label", &self.label)
            .field("tenant", &self.tenant)
            .field("limit", &self.limit.as_ref().map(ResourceHandle::id))
            .finish_non_exhaustive()
    }
}

impl ApiKey {
    /// The key whose SHA-256 is `digest`, naming `tenant`, known in logs as
    /// `label`, with its own registered `limit` if it has one.
    pub(crate) fn new(
        digest: KeyDigest,
        tenant: String,
        label: String,
        limit: Option<ResourceHandle<AnyBackend>>,
    ) -> Self {
        Self {
            digest,
            tenant: Tenant(tenant),
            label,
            limit,
        }
    }

    /// The tenant the key names.
    pub(crate) fn tenant(&self) -> &Tenant {
        &self.tenant
    }

    /// Its label: the `name`, or the first 8 hex digits of its hash.
    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    /// The resource of its own limits (`gateway:apikey:<label>`), if any.
    pub(crate) fn limit(&self) -> Option<&ResourceHandle<AnyBackend>> {
        self.limit.as_ref()
    }
}

/// The keys of one plan, found by the hash of a presented key. A reload
/// builds a new table with the new plan, so a removed key is unknown to
/// every request that starts after the swap.
#[derive(Default)]
pub struct ApiKeys {
    /// By the first 8 bytes of the digest; a bucket holds more than one key
    /// only if two digests share 64 bits.
    by_prefix: HashMap<[u8; 8], Vec<ApiKey>>,
}

/// The keys by their labels (the digests and their prefixes stay out).
impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.by_prefix.values().flatten()).finish()
    }
}

/// The first 8 bytes of `d`.
pub(crate) fn prefix(d: &KeyDigest) -> [u8; 8] {
    let mut p = [0u8; 8];
    p.copy_from_slice(&d[..8]);
    p
}

impl ApiKeys {
    /// The table of `keys` (their digests are distinct: the plan checked).
    pub(crate) fn new(keys: impl IntoIterator<Item = ApiKey>) -> Self {
        let mut by_prefix: HashMap<[u8; 8], Vec<ApiKey>> = HashMap::new();
        for key in keys {
            by_prefix.entry(prefix(&key.digest)).or_default().push(key);
        }
        Self { by_prefix }
    }

    /// The entry of the presented `key`, if the config holds its hash.
    #[cfg(test)]
    pub(crate) fn find(&self, key: &[u8]) -> Option<&ApiKey> {
        self.find_digest(&digest(key))
    }

    /// The entry whose digest is `d`, if the config holds it.
    pub(crate) fn find_digest(&self, d: &KeyDigest) -> Option<&ApiKey> {
        self.by_prefix
            .get(&prefix(d))?
            .iter()
            .find(|k| bool::from(k.digest.ct_eq(d)))
    }

    /// How many keys the table holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_prefix.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(secret: &str, tenant: &str, label: &str) -> ApiKey {
        ApiKey::new(digest(secret.as_bytes()), tenant.into(), label.into(), None)
    }

    #[test]
    fn digest_is_sha256() {
        // `printf %s abc | sha256sum`
        let hex: String = digest(b"abc").iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn finds_only_the_keys_it_holds() {
        let table = ApiKeys::new([key("sk-one", "acme", "one"), key("sk-two", "acme", "two")]);
        assert_eq!(table.len(), 2);
        let one = table.find(b"sk-one").expect("known key");
        assert_eq!((one.tenant().0.as_str(), one.label()), ("acme", "one"));
        assert_eq!(table.find(b"sk-two").map(ApiKey::label), Some("two"));
        assert!(table.find(b"sk-three").is_none());
        assert!(table.find(b"sk-one ").is_none());
        assert!(table.find(b"").is_none());
    }

    #[test]
    fn debug_shows_the_label_not_the_hash() {
        let table = ApiKeys::new([key("sk-one", "acme", "one")]);
        let printed = format!("{table:?}");
        assert!(printed.contains("\"one\""), "{printed}");
        let hex: String = digest(b"sk-one").iter().map(|b| format!("{b:02x}")).collect();
        let d = digest(b"sk-one");
        let bytes = format!("{}, {}, {}", d[0], d[1], d[2]);
        assert!(
            !printed.contains(&hex[..8]) && !printed.contains(&bytes),
            "{printed}"
        );
    }

    #[test]
    fn keys_sharing_a_bucket_are_told_apart_on_all_32_bytes() {
        let real = digest(b"sk-real");
        let mut twin = real;
        twin[31] ^= 1;
        let table = ApiKeys::new([
            ApiKey::new(twin, "other".into(), "twin".into(), None),
            ApiKey::new(real, "acme".into(), "real".into(), None),
        ]);
        assert_eq!(table.find(b"sk-real").map(ApiKey::label), Some("real"));
    }
}
