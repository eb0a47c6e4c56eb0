//! `gateway.decisions`: the decision listener (`POST /v1/acquire`, permits,
//! `/v1/forward-auth`) that lets services and proxies in front of them ask
//! the gateway's broker, and the checks of it and of the
//! `gateway.pressure.resources` it serves beside the routes.

use super::error::ConfigError;
use super::types::GatewayConfig;
use super::validate::{check_env, check_limits, check_route_resource, parse_addr};
use serde::{Deserialize, Serialize};

/// Most permits the decision listener holds for its clients by default.
pub const DEFAULT_MAX_PERMITS: usize = 100_000;

/// `gateway.decisions`: the decision API and forward auth, on a listener of
/// their own (off when absent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecisionsConfig {
    /// Address of the decision listener, e.g. `127.0.0.1:8082`.
    pub listen: String,
    /// Environment variable holding the bearer token every call must carry
    /// (`Authorization: Bearer <token>`; forward auth: `X-Pressure-Token`).
    /// Required when `listen` is not a loopback address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
    /// Most permits held at once for clients of `POST /v1/acquire`; beyond,
    /// an acquisition that would hold one is refused with `503`.
    #[serde(default = "default_max_permits")]
    pub max_permits: usize,
}

fn default_max_permits() -> usize {
    DEFAULT_MAX_PERMITS
}

/// Checks `gateway.decisions` and `gateway.pressure.resources`.
pub(super) fn check(cfg: &GatewayConfig) -> Result<(), ConfigError> {
    check_resources(cfg)?;
    let Some(d) = &cfg.decisions else {
        return Ok(());
    };
    let addr = parse_addr(&d.listen, "gateway.decisions.listen")?;
    match &d.token_env {
        Some(var) => check_env(var, "gateway.decisions.tokenEnv")?,
        None if !addr.ip().is_loopback() => {
            return Err(ConfigError::new(
                "gateway.decisions.tokenEnv",
                format!(
                    "is required when gateway.decisions.listen ({}) is not a loopback address",
                    d.listen
                ),
            ))
        }
        None => {}
    }
    if d.max_permits == 0 {
        return Err(ConfigError::new("gateway.decisions.maxPermits", "must be > 0"));
    }
    for (other, path) in [
        (&cfg.listen, "gateway.listen"),
        (&cfg.admin.listen, "gateway.admin.listen"),
    ] {
        if other.parse::<std::net::SocketAddr>().ok() == Some(addr) && addr.port() != 0 {
            return Err(ConfigError::new(
                "gateway.decisions.listen",
                format!("same address as {path} ({addr})"),
            ));
        }
    }
    Ok(())
}

/// `gateway.pressure.resources`: ids that name no route, service or tenant
/// resource, with limits that compile.
fn check_resources(cfg: &GatewayConfig) -> Result<(), ConfigError> {
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
    }
    Ok(())
}
