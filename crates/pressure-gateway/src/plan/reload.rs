//! What a reload may change, and what it did.
//!
//! A reload re-reads the config file, validates it and swaps the whole plan
//! (routes, limits, auth — the API key table too, so a removed key is
//! refused from the swap on —, tenant template and overrides, body and
//! upstream bounds). What the running process bound or built at start can
//! only change with a restart: the listeners (`listen`, `admin`, `decisions`, turning `tls` on or off —
//! the certificate files themselves are re-read on every reload), the
//! `backend`, the LLM section, `limits.maxHeaderBytes`, the client-side and
//! connect timeouts, `shutdownGraceMs` and `perTenant.maxTenants`. A reload that changes one
//! of them is refused, naming it, and changes nothing.

use crate::backend::Broker;
use crate::plan::Plan;
use crate::resources;
use crate::settings::{ConfigError, GatewayConfig};
use pressure_core::Limits;
use serde::Serialize;
use std::collections::BTreeMap;

/// What a successful reload did to the route and service resources.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReloadOutcome {
    /// Resources that are new.
    pub added: Vec<String>,
    /// Resources whose limits changed (usage kept).
    pub changed: Vec<String>,
    /// Resources whose limits are the same (counters kept).
    pub unchanged: Vec<String>,
    /// Resources that are gone.
    pub removed: Vec<String>,
}

/// The route, service, API key and `pressure.resources` resources of
/// `cfg` with their limits.
fn limited(cfg: &GatewayConfig) -> BTreeMap<String, &Limits> {
    let p = &cfg.pressure;
    if !p.enabled {
        return BTreeMap::new();
    }
    p.per_service
        .iter()
        .map(|(name, l)| (resources::service(name), l))
        .chain(p.per_route.iter().map(|r| (r.resource.clone(), &r.limits)))
        .chain(p.resources.iter().map(|(id, l)| (id.clone(), l)))
        .chain(crate::plan::api_keys::limited(cfg))
        .collect()
}

impl ReloadOutcome {
    /// The difference between the resources of `old` and `new`.
    pub fn between(old: &GatewayConfig, new: &GatewayConfig) -> Self {
        let (old, new) = (limited(old), limited(new));
        let mut out = Self::default();
        for (id, limits) in &new {
            match old.get(id) {
                None => out.added.push(id.clone()),
                Some(before) if before != limits => out.changed.push(id.clone()),
                Some(_) => out.unchanged.push(id.clone()),
            }
        }
        out.removed = old.keys().filter(|id| !new.contains_key(*id)).cloned().collect();
        out
    }
}

/// Refuses a change that needs a restart, naming the first one.
pub(crate) fn check_restart_only(old: &GatewayConfig, new: &GatewayConfig) -> Result<(), ConfigError> {
    let restart = |path: &str| {
        Err(ConfigError::new(
            path,
            "cannot change on reload (restart the gateway)",
        ))
    };
    if old.listen != new.listen {
        return restart("gateway.listen");
    }
    if old.admin.listen != new.admin.listen {
        return restart("gateway.admin.listen");
    }
    // Certificates reload; switching a listener between TLS and plain
    // does not.
    if old.tls.is_some() != new.tls.is_some() {
        return restart("gateway.tls");
    }
    if old.admin.tls.is_some() != new.admin.tls.is_some() {
        return restart("gateway.admin.tls");
    }
    if old.admin.token_env != new.admin.token_env {
        return restart("gateway.admin.tokenEnv");
    }
    if old.backend != new.backend {
        return restart("gateway.backend");
    }
    if old.llm != new.llm {
        return restart("gateway.llm");
    }
    if old.limits.max_header_bytes != new.limits.max_header_bytes {
        return restart("gateway.limits.maxHeaderBytes");
    }
    let (a, b) = (&old.timeouts, &new.timeouts);
    for (same, name) in [
        (a.connect_ms == b.connect_ms, "connectMs"),
        (a.header_read_ms == b.header_read_ms, "headerReadMs"),
        (a.idle_ms == b.idle_ms, "idleMs"),
        (a.send_ms == b.send_ms, "sendMs"),
    ] {
        if !same {
            return restart(&format!("gateway.timeouts.{name}"));
        }
    }
    if old.shutdown_grace_ms != new.shutdown_grace_ms {
        return restart("gateway.shutdownGraceMs");
    }
    if old.decisions != new.decisions {
        return restart("gateway.decisions");
    }
    if old.pressure.per_tenant.max_tenants != new.pressure.per_tenant.max_tenants {
        return restart("gateway.pressure.perTenant.maxTenants");
    }
    Ok(())
}

/// The tenants registered in this process now.
fn tenant_ids(broker: &Broker) -> Vec<String> {
    broker
        .local_stats()
        .into_iter()
        .map(|s| s.resource)
        .filter(|id| resources::is_tenant(id))
        .collect()
}

/// Applies a changed tenant template or config override to the tenants
/// registered now (new tenants get theirs from the plan), keeping their
/// usage; unregisters them when tenants are no longer limited. Live
/// overrides are shared by both plans and still win.
pub(crate) fn retemplate_tenants(broker: &Broker, old: &Plan, new: &Plan) {
    let limits = |p: &Plan| p.tenant().template.as_ref().map(|t| t.limits().clone());
    let overrides = |p: &Plan| -> BTreeMap<String, Limits> {
        p.tenant_overrides()
            .iter()
            .map(|(id, t)| (id.clone(), t.limits().clone()))
            .collect()
    };
    if limits(old) == limits(new) && overrides(old) == overrides(new) {
        return;
    }
    for id in tenant_ids(broker) {
        new.refresh_tenant(broker, &id[resources::TENANT_PREFIX.len()..]);
    }
}
