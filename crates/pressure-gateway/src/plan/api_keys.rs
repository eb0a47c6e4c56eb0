//! `gateway.auth.apiKeys`: each entry checked (its hash, tenant, name and
//! limits; a problem names its JSON path, e.g.
//! `gateway.auth.apiKeys[2].sha256`), then built into the plan's
//! [`ApiKeys`] table, the keys' own limits registered on the broker like
//! route limits (so a reload updates them in place and removes those of
//! removed keys).

use super::checks::check_limits;
use crate::auth::api_key::{ApiKey, ApiKeys, KeyDigest};
use crate::auth::MAX_TENANT_LEN;
use crate::backend::AnyBackend;
use crate::resources;
use crate::settings::{ConfigError, GatewayConfig};
use pressure_core::{Limits, ResourceHandle};
use std::collections::HashMap;
use std::sync::Arc;

/// Longest `name` of a key.
const MAX_NAME_LEN: usize = 64;

/// A key's own limit, to register.
#[derive(Debug, Clone)]
pub(super) struct KeyLimit {
    /// `gateway:apikey:<label>`.
    pub(super) id: String,
    /// Its limits (they compile).
    pub(super) limits: Limits,
    /// The JSON path of its limits.
    pub(super) path: String,
}

/// One checked entry.
#[derive(Debug, Clone)]
pub(super) struct CheckedKey {
    digest: KeyDigest,
    tenant: String,
    label: String,
    limit: Option<KeyLimit>,
}

/// The 32 bytes of 64 lowercase hex digits.
pub(super) fn parse_sha256(hex: &str) -> Option<KeyDigest> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    let bytes = hex.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(out)
}

/// A `name`: 1 to [`MAX_NAME_LEN`] of `A-Za-z0-9._:-` (it is logged and
/// ends a resource id).
pub(super) fn check_name(name: &str, path: String) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::new(
            path,
            format!("must be 1 to {MAX_NAME_LEN} of A-Za-z0-9._:-"),
        ))
    }
}

/// Checks every entry of `gateway.auth.apiKeys`: the hash is 64 lowercase
/// hex digits and no other entry's, the tenant 1 to 256 bytes, the name
/// well-formed, the label (name, or first 8 hex digits) no other entry's,
/// the limits compile. The limits are kept only while `pressure.enabled`.
pub(super) fn check(cfg: &GatewayConfig) -> Result<Vec<CheckedKey>, ConfigError> {
    let keys = &cfg.auth.api_keys;
    let mut digests: HashMap<KeyDigest, usize> = HashMap::with_capacity(keys.len());
    let mut labels: HashMap<&str, usize> = HashMap::with_capacity(keys.len());
    let mut out = Vec::with_capacity(keys.len());
    for (i, key) in keys.iter().enumerate() {
        let at = |field: &str| format!("gateway.auth.apiKeys[{i}].{field}");
        let digest = parse_sha256(&key.sha256).ok_or_else(|| {
            ConfigError::new(
                at("sha256"),
                "must be 64 lowercase hex digits, the SHA-256 of the key (printf %s \"$KEY\" | sha256sum)",
            )
        })?;
        if let Some(j) = digests.insert(digest, i) {
            return Err(ConfigError::new(
                at("sha256"),
                format!("the same key as gateway.auth.apiKeys[{j}]"),
            ));
        }
        if key.tenant.is_empty() || key.tenant.len() > MAX_TENANT_LEN {
            return Err(ConfigError::new(
                at("tenant"),
                format!("must be 1 to {MAX_TENANT_LEN} bytes"),
            ));
        }
        if let Some(name) = &key.name {
            check_name(name, at("name"))?;
        }
        let label = key.label();
        if let Some(j) = labels.insert(label, i) {
            let field = if key.name.is_some() { "name" } else { "sha256" };
            return Err(ConfigError::new(
                at(field),
                format!("\"{label}\" already names gateway.auth.apiKeys[{j}] (give one a distinct name)"),
            ));
        }
        let limit = match &key.limits {
            Some(limits) => {
                check_limits(limits, &at("limits"))?;
                cfg.pressure.enabled.then(|| KeyLimit {
                    id: resources::api_key(label),
                    limits: limits.clone(),
                    path: at("limits"),
                })
            }
            None => None,
        };
        out.push(CheckedKey {
            digest,
            tenant: key.tenant.clone(),
            label: label.to_owned(),
            limit,
        });
    }
    Ok(out)
}

/// The table of `checked` (none when there are no keys), each key's own
/// limit registered with `register`.
pub(super) fn build(
    checked: Vec<CheckedKey>,
    mut register: impl FnMut(&KeyLimit) -> Result<ResourceHandle<AnyBackend>, ConfigError>,
) -> Result<Option<Arc<ApiKeys>>, ConfigError> {
    if checked.is_empty() {
        return Ok(None);
    }
    let mut keys = Vec::with_capacity(checked.len());
    for c in checked {
        let limit = c.limit.as_ref().map(&mut register).transpose()?;
        keys.push(ApiKey::new(c.digest, c.tenant, c.label, limit));
    }
    Ok(Some(Arc::new(ApiKeys::new(keys))))
}

/// The ids and limits of the keys' own resources in `cfg` (none while
/// `pressure.enabled` is false), for what a reload reports.
pub(crate) fn limited(cfg: &GatewayConfig) -> impl Iterator<Item = (String, &Limits)> {
    let enabled = cfg.pressure.enabled;
    cfg.auth
        .api_keys
        .iter()
        .filter(move |_| enabled)
        .filter_map(|k| Some((resources::api_key(k.label()), k.limits.as_ref()?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_64_lowercase_hex_digits() {
        let hex = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        let d = parse_sha256(hex).expect("valid");
        assert_eq!(d[0], 0xba);
        assert_eq!(d[31], 0xad);
        assert_eq!(d, crate::auth::api_key::digest(b"abc"));
        assert!(parse_sha256(&hex.to_uppercase()).is_none());
        assert!(parse_sha256(&hex[..63]).is_none());
        assert!(parse_sha256(&format!("{hex}0")).is_none());
        assert!(parse_sha256(&hex.replace('b', "g")).is_none());
        assert!(parse_sha256("").is_none());
    }

    #[test]
    fn names_are_short_and_plain() {
        assert!(check_name("ci-bot.v2:prod_1", "p".into()).is_ok());
        for bad in ["", "has space", "é", &"x".repeat(65), "a/b"] {
            assert!(check_name(bad, "p".into()).is_err(), "{bad:?}");
        }
    }
}
