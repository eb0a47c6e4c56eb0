//! `gateway.pressure.perTenant.overrides.<id>`: a named tenant's own limits
//! and its place in the tenant hierarchy (`parent`), in one JSON object —
//! the limit keys of `perTenant.limits` beside an optional `"parent"`.
//!
//! Written by hand because serde cannot flatten a struct that refuses
//! unknown keys (`Limits`) beside a key of its own: `parent` is taken out
//! first, the rest must be a `Limits` object (every unknown key still an
//! error naming it). An object with `parent` alone keeps the template's
//! limits for that tenant.

use pressure_core::Limits;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One named tenant's override.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TenantOverride {
    /// Its limits instead of the template's; `None`: the template's.
    pub limits: Option<Limits>,
    /// The tenant it belongs to (its budgets charged with this one's), if
    /// any.
    pub parent: Option<String>,
}

impl From<Limits> for TenantOverride {
    fn from(limits: Limits) -> Self {
        Self {
            limits: Some(limits),
            parent: None,
        }
    }
}

impl<'de> Deserialize<'de> for TenantOverride {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut map = serde_json::Map::<String, serde_json::Value>::deserialize(d)?;
        let parent = match map.remove("parent") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(p)) => Some(p),
            Some(other) => {
                return Err(D::Error::custom(format!(
                    "`parent` must be a tenant id (a string), found {other}"
                )))
            }
        };
        let limits = if map.is_empty() && parent.is_some() {
            None
        } else {
            Some(serde_json::from_value::<Limits>(serde_json::Value::Object(map)).map_err(D::Error::custom)?)
        };
        Ok(Self { limits, parent })
    }
}

impl Serialize for TenantOverride {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = match &self.limits {
            Some(l) => match serde_json::to_value(l).map_err(serde::ser::Error::custom)? {
                serde_json::Value::Object(m) => m,
                _ => serde_json::Map::new(),
            },
            None => serde_json::Map::new(),
        };
        if let Some(p) = &self.parent {
            map.insert("parent".into(), serde_json::Value::String(p.clone()));
        }
        map.serialize(s)
    }
}

/// The schema: the limit keys of `Limits` and `parent`.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct TenantOverrideSchema {
    #[serde(flatten)]
    limits: Limits,
    /// The tenant this one belongs to: a request of this tenant is charged
    /// to it (and its own parent, up to `perTenant.maxDepth` tenants) too,
    /// all or nothing.
    parent: Option<String>,
}

impl schemars::JsonSchema for TenantOverride {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "TenantOverride".into()
    }

    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        TenantOverrideSchema::json_schema(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_beside_limits_or_alone() {
        let o: TenantOverride =
            serde_json::from_str(r#"{"requestsPerMinute": 5, "parent": "acme"}"#).unwrap();
        assert_eq!(o.parent.as_deref(), Some("acme"));
        assert_eq!(o.limits.as_ref().and_then(|l| l.requests_per_minute), Some(5));
        let o: TenantOverride = serde_json::from_str(r#"{"parent": "acme"}"#).unwrap();
        assert_eq!((o.limits, o.parent.as_deref()), (None, Some("acme")));
        let o: TenantOverride = serde_json::from_str(r#"{"requestsPerMinute": 5}"#).unwrap();
        assert_eq!(o.parent, None);
        let back = serde_json::to_value(TenantOverride {
            limits: None,
            parent: Some("a".into()),
        })
        .unwrap();
        assert_eq!(back, serde_json::json!({"parent": "a"}));
    }

    #[test]
    fn unknown_keys_and_wrong_parents_are_errors() {
        let e =
            serde_json::from_str::<TenantOverride>(r#"{"parent": "a", "requestsPerMinuet": 5}"#).unwrap_err();
        assert!(e.to_string().contains("requestsPerMinuet"), "{e}");
        let e = serde_json::from_str::<TenantOverride>(r#"{"parent": 7}"#).unwrap_err();
        assert!(e.to_string().contains("parent"), "{e}");
    }
}
