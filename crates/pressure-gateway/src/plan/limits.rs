//! `gateway.pressure`: the limits of services, routes, tenants and of the
//! resources served to the decision API only — checked and compiled in one
//! step into what the plan registers on the broker.

use super::checks::{check_limits, check_route_resource};
use crate::resources;
use crate::settings::{ConfigError, GatewayConfig, PressureConfig};
use pressure_core::{LimitTemplate, Limits};
use std::collections::BTreeMap;

/// What a limited resource is charged by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ChargedBy {
    /// Every request to the upstream of this name (`perService`).
    Service(String),
    /// Every request under this path prefix (`perRoute`).
    Route(String),
    /// No route: the decision API only (`pressure.resources`).
    Decisions,
}

/// A resource the plan registers.
#[derive(Debug, Clone)]
pub(super) struct Limited {
    /// Its id.
    pub(super) id: String,
    /// Its limits (they compile).
    pub(super) limits: Limits,
    /// The JSON path of its limits, for the broker's errors.
    pub(super) path: String,
    /// What charges it.
    pub(super) by: ChargedBy,
}

/// The service and route limits of `cfg` (none while `pressure.enabled`
/// is false, though they are checked), and each tenant's template.
pub(super) fn build(cfg: &GatewayConfig) -> Result<(Vec<Limited>, Option<LimitTemplate>), ConfigError> {
    let p = &cfg.pressure;
    let mut limited = Vec::new();
    for (name, limits) in &p.per_service {
        let path = format!("gateway.pressure.perService.{name}");
        if !cfg.upstreams.contains_key(name) {
            return Err(ConfigError::new(path, format!("no upstream named {name}")));
        }
        check_limits(limits, &path)?;
        limited.push(Limited {
            id: resources::service(name),
            limits: limits.clone(),
            path,
            by: ChargedBy::Service(name.clone()),
        });
    }
    let mut ids: BTreeMap<&str, usize> = BTreeMap::new();
    let mut prefixes: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, route) in p.per_route.iter().enumerate() {
        let base = format!("gateway.pressure.perRoute[{i}]");
        check_route_resource(&route.resource, &format!("{base}.resource"), cfg)?;
        if let Some(j) = ids.insert(&route.resource, i) {
            return Err(conflict(&base, "resource", &route.resource, j));
        }
        if !route.path_prefix.starts_with('/') {
            return Err(ConfigError::new(
                format!("{base}.pathPrefix"),
                "must start with /",
            ));
        }
        if let Some(j) = prefixes.insert(&route.path_prefix, i) {
            return Err(conflict(&base, "pathPrefix", &route.path_prefix, j));
        }
        check_limits(&route.limits, &format!("{base}.limits"))?;
        limited.push(Limited {
            id: route.resource.clone(),
            limits: route.limits.clone(),
            path: base,
            by: ChargedBy::Route(route.path_prefix.clone()),
        });
    }
    let template = tenant_template(p, cfg)?;
    if !p.enabled {
        limited.clear();
    }
    Ok((limited, template))
}

/// `<route>.<field>` has the `value` of route `j` already.
fn conflict(route: &str, field: &str, value: &str, j: usize) -> ConfigError {
    ConfigError::new(
        format!("{route}.{field}"),
        format!("\"{value}\" conflicts with gateway.pressure.perRoute[{j}]"),
    )
}

/// `perTenant`: the template each tenant's limits are made from, when
/// tenants are limited.
fn tenant_template(p: &PressureConfig, cfg: &GatewayConfig) -> Result<Option<LimitTemplate>, ConfigError> {
    let tenant = &p.per_tenant;
    if let Some(limits) = &tenant.limits {
        check_limits(limits, "gateway.pressure.perTenant.limits")?;
    }
    if !tenant.enabled {
        return Ok(None);
    }
    let Some(limits) = &tenant.limits else {
        return Err(ConfigError::new(
            "gateway.pressure.perTenant.limits",
            "is required when perTenant.enabled is true",
        ));
    };
    if cfg.auth.jwt.is_none() && cfg.auth.api_keys.is_empty() && !cfg.auth.runtime_keys {
        return Err(ConfigError::new(
            "gateway.pressure.perTenant.enabled",
            "requires gateway.auth.jwt, gateway.auth.apiKeys or gateway.auth.runtimeKeys (the tenant comes from a JWT claim or an API key)",
        ));
    }
    // Checked only when enabled: a derived `TenantLimits::default()`
    // (used when `perTenant` is absent) has 0 here, which is harmless
    // while no tenant is limited.
    if tenant.max_tenants == 0 {
        return Err(ConfigError::new(
            "gateway.pressure.perTenant.maxTenants",
            "must be > 0",
        ));
    }
    if !p.enabled {
        return Ok(None);
    }
    LimitTemplate::new(limits).map(Some).map_err(|e| {
        ConfigError::new(
            format!("gateway.pressure.perTenant.limits.{}", e.field),
            e.problem,
        )
    })
}

/// `gateway.pressure.resources`: ids that name no route, service or tenant
/// resource, with limits that compile; served to the decision API only.
pub(super) fn decision_resources(cfg: &GatewayConfig) -> Result<Vec<Limited>, ConfigError> {
    let mut out = Vec::new();
    for (id, limits) in &cfg.pressure.resources {
        let path = format!("gateway.pressure.resources.{id}");
        check_route_resource(id, &path, cfg)?;
        if let Some(i) = cfg.pressure.per_route.iter().position(|r| &r.resource == id) {
            return Err(ConfigError::new(
                path,
                format!("\"{id}\" is the resource of gateway.pressure.perRoute[{i}]"),
            ));
        }
        check_limits(limits, &path)?;
        out.push(Limited {
            id: id.clone(),
            limits: limits.clone(),
            path,
            by: ChargedBy::Decisions,
        });
    }
    if !cfg.pressure.enabled {
        out.clear();
    }
    Ok(out)
}
