//! `/admin/pressure/tenants/{id}/parent`: a tenant's place in the tenant
//! hierarchy, live (nested budgets; `crate::plan::hierarchy`).
//!
//! * `PUT {"parent": "<tenant>"}` → the tenant belongs to that parent on
//!   every gateway of the backend, applied here before the answer: its
//!   next request (and every descendant's) is charged to the parent and
//!   the parent's ancestors too, all or nothing. `{"parent": null}` makes
//!   it a root, also when the config gives it a parent. A cycle, a tenant
//!   its own parent, or a chain of more than `perTenant.maxDepth` tenants
//!   from a root down to any descendant: `400` naming the tenants, nothing
//!   stored.
//! * `DELETE` → the live parent removed fleet-wide: back to the config's
//!   (`perTenant.overrides.<id>.parent`), if any.
//!
//! Both answer the tenant's `GET /admin/pressure/tenants/{id}/limits`
//! document, which shows `parent`, `ancestors` and `children`. The store
//! unreachable: `503`, nothing changed here.

use super::tenants::{checked, describe};
use super::{AdminError, AdminState, Control};
use crate::backend::Broker;
use crate::plan::hierarchy::check_link;
use crate::plan::overrides::check_tenant;
use crate::resources;
use crate::settings::ConfigError;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

/// The body of `PUT`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ParentBody {
    /// The parent; `null` for none (required: `{}` says nothing).
    parent: serde_json::Value,
}

/// `PUT`: a live parent for the fleet.
pub(super) async fn put(
    State(state): State<AdminState>,
    Path(tenant): Path<String>,
    body: Bytes,
) -> Result<Response, AdminError> {
    let gateway = checked(&state, &tenant)?;
    let parent = parse(&body).map_err(AdminError::InvalidConfig)?;
    let plan = gateway.plan();
    check_link(&tenant, parent.as_deref(), &plan.parent_links(), plan.max_depth())
        .map_err(|problem| AdminError::InvalidConfig(ConfigError::new("parent", problem)))?;
    write(&*gateway, &state.broker, tenant, Some(parent.unwrap_or_default())).await
}

/// `DELETE`: back to the config's parent, fleet-wide.
pub(super) async fn delete(
    State(state): State<AdminState>,
    Path(tenant): Path<String>,
) -> Result<Response, AdminError> {
    let gateway = checked(&state, &tenant)?;
    write(&*gateway, &state.broker, tenant, None).await
}

/// The body's parent (`None`: no parent), or the problem at its path.
fn parse(body: &[u8]) -> Result<Option<String>, ConfigError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let b: ParentBody = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." || path == "?" {
            "(body)".to_owned()
        } else {
            path
        };
        ConfigError::new(path, e.into_inner().to_string())
    })?;
    match b.parent {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::String(p) => {
            check_tenant(&p, "parent")?;
            Ok(Some(p))
        }
        other => Err(ConfigError::new(
            "parent",
            format!("must be a tenant id (a string) or null, found {other}"),
        )),
    }
}

async fn write(
    gateway: &dyn Control,
    broker: &Broker,
    tenant: String,
    parent: Option<String>,
) -> Result<Response, AdminError> {
    let action = match parent.as_deref() {
        None => "removed",
        Some("") => "root",
        Some(_) => "set",
    };
    if gateway
        .write_parent(tenant.clone(), parent.clone())
        .await
        .is_err()
    {
        return Err(AdminError::StoreUnavailable {
            resource: resources::tenant(&tenant),
        });
    }
    tracing::info!(
        tenant = tenant.as_str(),
        parent = parent.as_deref().unwrap_or("-"),
        action,
        "live tenant parent"
    );
    Ok(describe(gateway, broker, &tenant).await.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_checked() {
        assert_eq!(parse(br#"{"parent": "acme"}"#).unwrap().as_deref(), Some("acme"));
        assert_eq!(parse(br#"{"parent": null}"#).unwrap(), None);
        assert_eq!(parse(br#"{"parent": 7}"#).unwrap_err().path, "parent");
        assert_eq!(parse(br#"{"parent": ""}"#).unwrap_err().path, "parent");
        let long = format!(r#"{{"parent": "{}"}}"#, "x".repeat(300));
        assert!(parse(long.as_bytes()).unwrap_err().problem.contains("256"));
        assert!(parse(br#"{"parent": "a", "x": 1}"#)
            .unwrap_err()
            .problem
            .contains("unknown field"));
        assert_eq!(parse(b"{").unwrap_err().path, "(body)");
        assert!(parse(b"{}").is_err(), "parent is required (null for none)");
    }
}
