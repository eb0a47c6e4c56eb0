//! The listeners a config opens: `gateway.listen`, `gateway.admin` and
//! `gateway.decisions` — addresses that parse, tokens that are set, no two
//! listeners on one address, and a token wherever a listener is reachable
//! from outside the host.

use super::checks::parse_addr;
use crate::settings::env_value;
use crate::settings::{AdminConfig, ConfigError, GatewayConfig};
use std::net::SocketAddr;

/// `gateway.listen`.
pub(super) fn check_listen(cfg: &GatewayConfig) -> Result<(), ConfigError> {
    parse_addr(&cfg.listen, "gateway.listen").map(|_| ())
}

/// `gateway.admin`: loopback unless it has a token, not on the proxy's
/// address.
pub(super) fn check_admin(admin: &AdminConfig, listen: &str) -> Result<(), ConfigError> {
    let addr = parse_addr(&admin.listen, "gateway.admin.listen")?;
    if let Some(var) = &admin.token_env {
        env_value(var, "gateway.admin.tokenEnv")?;
    } else if !addr.ip().is_loopback() {
        return Err(ConfigError::new(
            "gateway.admin.listen",
            "must be a loopback address unless tokenEnv is set",
        ));
    }
    if let Ok(proxy) = listen.parse::<SocketAddr>() {
        if proxy == addr && addr.port() != 0 {
            return Err(ConfigError::new(
                "gateway.admin.listen",
                format!("same address as gateway.listen ({proxy})"),
            ));
        }
    }
    Ok(())
}

/// `gateway.decisions`: loopback unless it has a token, a positive permit
/// bound, not on the proxy's or the admin listener's address.
pub(super) fn check_decisions(cfg: &GatewayConfig) -> Result<(), ConfigError> {
    let Some(d) = &cfg.decisions else {
        return Ok(());
    };
    let addr = parse_addr(&d.listen, "gateway.decisions.listen")?;
    match &d.token_env {
        Some(var) => {
            env_value(var, "gateway.decisions.tokenEnv")?;
        }
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
        if other.parse::<SocketAddr>().ok() == Some(addr) && addr.port() != 0 {
            return Err(ConfigError::new(
                "gateway.decisions.listen",
                format!("same address as {path} ({addr})"),
            ));
        }
    }
    Ok(())
}
