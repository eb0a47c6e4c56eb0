//! The small checks the plan's builders share with the plugin manifests
//! (`crate::settings::manifest`): limits that compile, route resource ids
//! that name no other resource, socket addresses, environment variables.
//! Each failure names the JSON path of the offending value.

use crate::resources::{API_KEY_PREFIX, TENANT_PREFIX};
use crate::settings::{ConfigError, GatewayConfig};
use pressure_core::Limits;

use std::net::SocketAddr;

/// Checks `limits` with `pressure_core`'s compiler; the error's path is
/// `<path>.<field>`, or `path` itself for problems of the whole object.
pub(crate) fn check_limits(limits: &Limits, path: &str) -> Result<(), ConfigError> {
    limits.compile().map(|_| ()).map_err(|e| {
        let at = if e.field == "limits" {
            path.to_string()
        } else {
            format!("{path}.{}", e.field)
        };
        ConfigError::new(at, e.problem)
    })
}

/// `value` as a socket address (`ip:port`).
pub(crate) fn parse_addr(value: &str, path: &str) -> Result<SocketAddr, ConfigError> {
    value.parse::<SocketAddr>().map_err(|_| {
        ConfigError::new(
            path,
            format!("\"{value}\" is not a socket address (expected ip:port, e.g. 127.0.0.1:8080)"),
        )
    })
}

/// A route's resource id: non-empty, not a tenant's, not an API key's, not
/// a service's.
/// Shared with manifest routes, whose `path` is inside their file.
pub(crate) fn check_route_resource(
    resource: &str,
    path: &str,
    cfg: &GatewayConfig,
) -> Result<(), ConfigError> {
    if resource.trim().is_empty() {
        return Err(ConfigError::new(path, "must not be empty"));
    }
    if resource.starts_with(TENANT_PREFIX) {
        return Err(ConfigError::new(
            path,
            format!("the prefix {TENANT_PREFIX} is reserved for perTenant resources"),
        ));
    }
    if resource.starts_with(API_KEY_PREFIX) {
        return Err(ConfigError::new(
            path,
            format!("the prefix {API_KEY_PREFIX} is reserved for the limits of gateway.auth.apiKeys"),
        ));
    }
    if let Some(name) = resource.strip_prefix("gateway:service:") {
        if cfg.pressure.per_service.contains_key(name) {
            return Err(ConfigError::new(
                path,
                format!("\"{resource}\" is the resource of gateway.pressure.perService.{name}"),
            ));
        }
    }
    Ok(())
}
