//! API keys issued at runtime (`gateway.auth.runtimeKeys`, the admin API's
//! `/admin/pressure/keys`): the record each is kept as, the rules a new
//! key and a change must follow, and ([`store`]) where the records live
//! and how every instance learns of them.
//!
//! A record is the JSON object
//! `{"id","sha256","tenant","name"?,"limits"?,"useCases"?,"expiresAt"?,
//! "metadata"?,"createdAt"}`: the key's SHA-256 (64 lowercase hex
//! digits), never the key, which is shown once, when it is issued. The
//! rules are the config's (`gateway.auth.apiKeys`): a tenant of 1 to 256
//! bytes, a name of 1 to 64 of `A-Za-z0-9._:-` (unique among live keys and
//! the config's labels, and not shaped like an id), limits that compile
//! (resource `gateway:apikey:<name or id>`); plus use cases named by
//! `gateway.llm.useCases` (at most [`MAX_USE_CASES`]), an `expiresAt` in
//! RFC 3339 in the future, and metadata of at most [`MAX_METADATA_KEYS`]
//! keys and [`MAX_METADATA_BYTES`] bytes as JSON.

mod rfc3339;
pub(crate) mod store;

pub(crate) use rfc3339::{format_ms, parse_ms};

use super::api_keys::{check_name, parse_sha256};
use super::checks::check_limits;
use super::overrides::check_tenant;
use crate::auth::api_key::KeyDigest;
use crate::auth::runtime_keys::RuntimeKey;
use crate::auth::Tenant;
use crate::backend::AnyBackend;
use crate::settings::ConfigError;
use pressure_core::{Limits, ResourceHandle};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// Most keys of a tenant's metadata.
pub(crate) const MAX_METADATA_KEYS: usize = 32;
/// Most bytes of a key's metadata, as JSON.
pub(crate) const MAX_METADATA_BYTES: usize = 4096;
/// Most use cases a key may be limited to.
pub(crate) const MAX_USE_CASES: usize = 64;
/// Most bytes of a use case's name.
const MAX_USE_CASE_BYTES: usize = 128;
/// Most live keys (a fleet's); a create beyond is refused.
pub(crate) const MAX_KEYS: usize = 100_000;
/// The prefix of every key issued here.
pub(crate) const SECRET_PREFIX: &str = "sk-pr-";

/// A key as it is stored (module docs). Fields it does not know are
/// ignored, so that a record a newer gateway wrote still works here.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct KeyRecord {
    pub(crate) id: String,
    pub(crate) sha256: String,
    pub(crate) tenant: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) limits: Option<Limits>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) use_cases: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) expires_at: Option<String>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub(crate) metadata: Map<String, Value>,
    pub(crate) created_at: String,
}

/// The id and the tenant, never the digest.
impl std::fmt::Debug for KeyRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRecord")
            .field("id", &self.id)
            .field("tenant", &self.tenant)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl KeyRecord {
    /// What logs and its resource call it: the name, or the id.
    pub(crate) fn label(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.id)
    }

    /// The key's own resource.
    pub(crate) fn resource(&self) -> String {
        crate::resources::api_key(self.label())
    }

    /// What the admin API shows of it: everything but the digest, with its
    /// resource and whether it has expired at `now_ms`.
    pub(crate) fn shown(&self, now_ms: u64) -> Value {
        let expired = self
            .expires_at
            .as_deref()
            .and_then(|at| parse_ms(at).ok())
            .is_some_and(|at| now_ms >= at);
        json!({
            "id": self.id,
            "tenant": self.tenant,
            "name": self.name,
            "resource": self.resource(),
            "limits": self.limits,
            "useCases": self.use_cases,
            "expiresAt": self.expires_at,
            "expired": expired,
            "metadata": self.metadata,
            "createdAt": self.created_at,
        })
    }

    /// The record stored as `json` under `id`, if it is one a gateway
    /// wrote (its digest, tenant and expiry readable).
    pub(crate) fn read(id: &str, json: &str) -> Result<Self, String> {
        let record: Self = serde_json::from_str(json).map_err(|e| e.to_string())?;
        if record.id != id {
            return Err("the record's id is not its field's".into());
        }
        parse_sha256(&record.sha256).ok_or("sha256 is not 64 lowercase hex digits")?;
        check_tenant(&record.tenant, "tenant").map_err(|e| e.to_string())?;
        if let Some(at) = &record.expires_at {
            parse_ms(at).map_err(|e| e.to_string())?;
        }
        Ok(record)
    }

    /// The key the request path reads, with its registered `limit`; the
    /// record was [`read`](Self::read).
    pub(crate) fn runtime_key(
        &self,
        stored: Arc<str>,
        limit: Option<ResourceHandle<AnyBackend>>,
    ) -> Option<RuntimeKey> {
        let digest: KeyDigest = parse_sha256(&self.sha256)?;
        let expires_at_ms = match &self.expires_at {
            Some(at) => Some(parse_ms(at).ok()?),
            None => None,
        };
        Some(RuntimeKey {
            id: self.id.clone(),
            digest,
            tenant: Tenant(self.tenant.clone()),
            label: self.label().to_owned(),
            limit,
            use_cases: (!self.use_cases.is_empty()).then(|| Arc::from(self.use_cases.clone())),
            expires_at_ms,
            stored,
        })
    }
}

/// The body of `POST /admin/pressure/keys`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct NewKey {
    pub(crate) tenant: String,
    #[serde(default)]
    pub(crate) name: Option<String>,
    #[serde(default)]
    pub(crate) limits: Option<Limits>,
    #[serde(default)]
    pub(crate) use_cases: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) expires_at: Option<String>,
    #[serde(default)]
    pub(crate) metadata: Option<Map<String, Value>>,
}

/// The body of `PATCH /admin/pressure/keys/{id}`: a field left out keeps
/// its value, `null` clears it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct KeyPatch {
    #[serde(default, deserialize_with = "present")]
    pub(crate) limits: Option<Option<Limits>>,
    #[serde(default, deserialize_with = "present")]
    pub(crate) use_cases: Option<Option<Vec<String>>>,
    #[serde(default, deserialize_with = "present")]
    pub(crate) expires_at: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub(crate) metadata: Option<Option<Map<String, Value>>>,
}

/// A field that is present (`null` included).
fn present<'de, T: Deserialize<'de>, D: Deserializer<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// `body` as `T`, or the problem at its JSON path (`(body)` for the whole).
pub(crate) fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ConfigError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { "(body)".to_owned() } else { path };
        ConfigError::new(path, e.into_inner().to_string())
    })
}

/// What a key's fields are checked against.
pub(crate) struct Rules<'a> {
    /// Now, Unix milliseconds.
    pub(crate) now_ms: u64,
    /// Whether a name is a use case of `gateway.llm.useCases`; `None`:
    /// the gateway has no LLM stack.
    pub(crate) use_case: Option<&'a dyn Fn(&str) -> bool>,
}

/// Whether `s` is shaped like a key id (`key_` and 16 hex digits).
pub(crate) fn is_id(s: &str) -> bool {
    s.strip_prefix("key_")
        .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

impl Rules<'_> {
    /// The tenant.
    pub(crate) fn tenant(&self, tenant: &str) -> Result<(), ConfigError> {
        check_tenant(tenant, "tenant")
    }

    /// The name (its uniqueness is the store's to check).
    pub(crate) fn name(&self, name: &str) -> Result<(), ConfigError> {
        check_name(name, "name".into())?;
        if is_id(name) {
            return Err(ConfigError::new(
                "name",
                "must not look like a key id (key_ and 16 hex digits)",
            ));
        }
        Ok(())
    }

    /// The limits compile.
    pub(crate) fn limits(&self, limits: &Limits) -> Result<(), ConfigError> {
        check_limits(limits, "limits")
    }

    /// The use cases: known ones, each once, at most [`MAX_USE_CASES`].
    pub(crate) fn use_cases(&self, list: &[String]) -> Result<(), ConfigError> {
        if list.len() > MAX_USE_CASES {
            return Err(ConfigError::new(
                "useCases",
                format!("at most {MAX_USE_CASES} use cases"),
            ));
        }
        let Some(known) = self.use_case else {
            if list.is_empty() {
                return Ok(());
            }
            return Err(ConfigError::new(
                "useCases",
                "this gateway has no gateway.llm, so no use cases to limit a key to",
            ));
        };
        for (i, name) in list.iter().enumerate() {
            let at = format!("useCases[{i}]");
            if name.is_empty() || name.len() > MAX_USE_CASE_BYTES {
                return Err(ConfigError::new(
                    at,
                    format!("must be 1 to {MAX_USE_CASE_BYTES} bytes"),
                ));
            }
            if !known(name) {
                return Err(ConfigError::new(at, "names no use case of gateway.llm.useCases"));
            }
            if list[..i].contains(name) {
                return Err(ConfigError::new(at, "is listed twice"));
            }
        }
        Ok(())
    }

    /// An `expiresAt` in RFC 3339, in the future; in canonical form
    /// (UTC, milliseconds).
    pub(crate) fn expires_at(&self, at: &str) -> Result<String, ConfigError> {
        let ms = parse_ms(at)?;
        if ms <= self.now_ms {
            return Err(ConfigError::new("expiresAt", "must be in the future"));
        }
        Ok(format_ms(ms))
    }

    /// Metadata of at most [`MAX_METADATA_KEYS`] keys and
    /// [`MAX_METADATA_BYTES`] bytes.
    pub(crate) fn metadata(&self, metadata: &Map<String, Value>) -> Result<(), ConfigError> {
        if metadata.len() > MAX_METADATA_KEYS {
            return Err(ConfigError::new(
                "metadata",
                format!("at most {MAX_METADATA_KEYS} keys"),
            ));
        }
        let bytes = serde_json::to_string(metadata).map_or(usize::MAX, |s| s.len());
        if bytes > MAX_METADATA_BYTES {
            return Err(ConfigError::new(
                "metadata",
                format!("at most {MAX_METADATA_BYTES} bytes as JSON"),
            ));
        }
        Ok(())
    }

    /// The record of `new` under `id` with the key's digest `sha256`,
    /// every field checked.
    pub(crate) fn new_record(
        &self,
        new: NewKey,
        id: String,
        sha256: String,
    ) -> Result<KeyRecord, ConfigError> {
        self.tenant(&new.tenant)?;
        if let Some(name) = &new.name {
            self.name(name)?;
        }
        if let Some(limits) = &new.limits {
            self.limits(limits)?;
        }
        let use_cases = new.use_cases.unwrap_or_default();
        self.use_cases(&use_cases)?;
        let expires_at = new.expires_at.map(|at| self.expires_at(&at)).transpose()?;
        let metadata = new.metadata.unwrap_or_default();
        self.metadata(&metadata)?;
        Ok(KeyRecord {
            id,
            sha256,
            tenant: new.tenant,
            name: new.name,
            limits: new.limits,
            use_cases,
            expires_at,
            metadata,
            created_at: format_ms(self.now_ms),
        })
    }

    /// `record` with `patch` applied, every changed field checked.
    pub(crate) fn patched(&self, mut record: KeyRecord, patch: KeyPatch) -> Result<KeyRecord, ConfigError> {
        if let Some(limits) = patch.limits {
            if let Some(l) = &limits {
                self.limits(l)?;
            }
            record.limits = limits;
        }
        if let Some(use_cases) = patch.use_cases {
            let list = use_cases.unwrap_or_default();
            self.use_cases(&list)?;
            record.use_cases = list;
        }
        if let Some(at) = patch.expires_at {
            record.expires_at = at.map(|at| self.expires_at(&at)).transpose()?;
        }
        if let Some(metadata) = patch.metadata {
            let metadata = metadata.unwrap_or_default();
            self.metadata(&metadata)?;
            record.metadata = metadata;
        }
        Ok(record)
    }
}

/// A new key from the CSPRNG (`rand`'s thread generator, ChaCha seeded by
/// the OS): `sk-pr-` and 64 hex digits (256 bits, no `.`).
pub(crate) fn new_secret() -> String {
    format!(
        "{SECRET_PREFIX}{:032x}{:032x}",
        rand::random::<u128>(),
        rand::random::<u128>()
    )
}

/// A new id: `key_` and 16 hex digits.
pub(crate) fn new_id() -> String {
    format!("key_{:016x}", rand::random::<u64>())
}

/// The 64 lowercase hex digits of `digest`.
pub(crate) fn hex(digest: &KeyDigest) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(64);
    for b in digest {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(now_ms: u64) -> Rules<'static> {
        static KNOWN: fn(&str) -> bool = |n| n == "chat" || n == "embed";
        Rules {
            now_ms,
            use_case: Some(&KNOWN),
        }
    }

    fn new_key(body: Value) -> NewKey {
        parse_body(body.to_string().as_bytes()).expect("a body")
    }

    #[test]
    fn secrets_and_ids_are_fresh_and_plain() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert!(
            a.starts_with(SECRET_PREFIX) && a.len() == SECRET_PREFIX.len() + 64,
            "{a}"
        );
        assert!(!a.contains('.'));
        let id = new_id();
        assert!(is_id(&id), "{id}");
        assert!(!is_id("key_0123") && !is_id("key_0123456789ABCDEF") && !is_id("../etc"));
    }

    #[test]
    fn a_new_key_is_checked_field_by_field() {
        let r = rules(1_000);
        let sha = hex(&crate::auth::api_key::digest(b"sk"));
        let ok = r
            .new_record(
                new_key(json!({"tenant": "acme", "name": "ci", "useCases": ["chat"],
                    "expiresAt": "2030-01-01T00:00:00Z", "metadata": {"team": "x"}})),
                "key_0123456789abcdef".into(),
                sha.clone(),
            )
            .expect("valid");
        assert_eq!(ok.expires_at.as_deref(), Some("2030-01-01T00:00:00.000Z"));
        assert_eq!(ok.label(), "ci");
        let shown = ok.shown(1_000);
        assert!(shown.get("sha256").is_none() && !shown.to_string().contains(&sha));
        let bad = |body: Value| {
            r.new_record(new_key(body), "key_0123456789abcdef".into(), sha.clone())
                .unwrap_err()
                .path
        };
        assert_eq!(bad(json!({"tenant": ""})), "tenant");
        assert_eq!(bad(json!({"tenant": "a".repeat(257)})), "tenant");
        assert_eq!(bad(json!({"tenant": "a", "name": "a b"})), "name");
        assert_eq!(
            bad(json!({"tenant": "a", "name": "key_0123456789abcdef"})),
            "name"
        );
        assert_eq!(
            bad(json!({"tenant": "a", "limits": {"requestsPerMinute": 0}})),
            "limits.requestsPerMinute"
        );
        assert_eq!(bad(json!({"tenant": "a", "useCases": ["nope"]})), "useCases[0]");
        assert_eq!(
            bad(json!({"tenant": "a", "useCases": ["chat", "chat"]})),
            "useCases[1]"
        );
        assert_eq!(
            bad(json!({"tenant": "a", "expiresAt": "1970-01-01T00:00:00Z"})),
            "expiresAt"
        );
        assert_eq!(bad(json!({"tenant": "a", "expiresAt": "tomorrow"})), "expiresAt");
        let many: Map<String, Value> = (0..33).map(|i| (format!("k{i}"), json!(i))).collect();
        assert_eq!(bad(json!({"tenant": "a", "metadata": many})), "metadata");
        assert_eq!(
            bad(json!({"tenant": "a", "metadata": {"k": "x".repeat(5000)}})),
            "metadata"
        );
    }

    #[test]
    fn bodies_refuse_unknown_fields_and_wrong_types() {
        let e = parse_body::<NewKey>(br#"{"tenant":"a","secret":"x"}"#).unwrap_err();
        assert!(e.problem.contains("unknown field"), "{e}");
        assert_eq!(
            parse_body::<NewKey>(br#"{"tenant":5}"#).unwrap_err().path,
            "tenant"
        );
        assert_eq!(parse_body::<NewKey>(b"[").unwrap_err().path, "(body)");
        assert_eq!(parse_body::<NewKey>(b"{}").unwrap_err().path, "(body)");
        let p: KeyPatch = parse_body(br#"{"limits":null}"#).expect("a patch");
        assert_eq!(p.limits, Some(None));
        assert!(p.use_cases.is_none());
    }

    #[test]
    fn a_stored_record_is_read_back_only_when_whole() {
        let sha = hex(&crate::auth::api_key::digest(b"sk"));
        let rec = json!({"id": "key_0123456789abcdef", "sha256": sha, "tenant": "acme",
            "createdAt": "2026-01-01T00:00:00.000Z"});
        let text = rec.to_string();
        let r = KeyRecord::read("key_0123456789abcdef", &text).expect("readable");
        assert!(r.runtime_key(Arc::from(text.as_str()), None).is_some());
        assert!(KeyRecord::read("key_ffffffffffffffff", &text).is_err());
        assert!(KeyRecord::read("key_0123456789abcdef", "{").is_err());
        assert!(!format!("{r:?}").contains(&sha[..8]));
    }
}
