//! The plugin manifests of `gateway.pressure.manifestsDir`, checked
//! against the config and each other and appended to its routes.

use super::checks::{check_limits, check_route_resource};
use crate::settings::manifest::{read_manifests, LoadedManifest};
use crate::settings::{resolve, ConfigError, GatewayConfig, RouteLimit};
use std::collections::BTreeMap;
use std::path::Path;

/// Loads the manifests of `cfg.pressure.manifestsDir` (relative to
/// `base_dir`), checks their routes against the config and each other, and
/// appends them to `cfg.pressure.perRoute`. Does nothing when no directory
/// is configured; a configured directory that is missing is an error.
/// `cfg` is left unchanged on error.
pub(crate) fn apply_manifests(cfg: &mut GatewayConfig, base_dir: &Path) -> Result<(), ConfigError> {
    let Some(shown) = cfg.pressure.manifests_dir.clone() else {
        return Ok(());
    };
    if shown.is_empty() {
        return Err(ConfigError::new(
            "gateway.pressure.manifestsDir",
            "must not be empty",
        ));
    }
    let manifests = read_manifests(&resolve(base_dir, &shown), &shown)?;
    let routes = check_manifests(cfg, &manifests)?;
    cfg.pressure.per_route.extend(routes);
    Ok(())
}

/// Checks each manifest's routes; returns them in order when all are valid.
fn check_manifests(
    cfg: &GatewayConfig,
    manifests: &[LoadedManifest],
) -> Result<Vec<RouteLimit>, ConfigError> {
    // Where each resource and prefix was first declared.
    let mut resources: BTreeMap<String, String> = BTreeMap::new();
    let mut prefixes: BTreeMap<String, String> = BTreeMap::new();
    for (i, route) in cfg.pressure.per_route.iter().enumerate() {
        let at = format!("gateway.pressure.perRoute[{i}]");
        resources
            .entry(route.resource.clone())
            .or_insert_with(|| at.clone());
        prefixes.entry(route.path_prefix.clone()).or_insert(at);
    }
    let mut plugins: BTreeMap<&str, &str> = BTreeMap::new();
    let mut routes = Vec::new();
    for LoadedManifest { file, manifest } in manifests {
        if manifest.plugin.trim().is_empty() {
            return Err(ConfigError::new(format!("{file}: plugin"), "must not be empty"));
        }
        if let Some(other) = plugins.insert(&manifest.plugin, file) {
            return Err(ConfigError::new(
                format!("{file}: plugin"),
                format!("\"{}\" is also declared by {other}", manifest.plugin),
            ));
        }
        for (j, route) in manifest.routes.iter().enumerate() {
            let at = format!("{file}: routes[{j}]");
            check_route_resource(&route.resource, &format!("{at}.resource"), cfg)?;
            if let Some(first) = resources.get(&route.resource) {
                return Err(ConfigError::new(
                    format!("{at}.resource"),
                    format!("\"{}\" conflicts with {first}", route.resource),
                ));
            }
            if !route.path_prefix.starts_with('/') {
                return Err(ConfigError::new(format!("{at}.pathPrefix"), "must start with /"));
            }
            if let Some(first) = prefixes.get(&route.path_prefix) {
                return Err(ConfigError::new(
                    format!("{at}.pathPrefix"),
                    format!("\"{}\" conflicts with {first}", route.path_prefix),
                ));
            }
            check_limits(&route.limits, &format!("{at}.limits"))?;
            resources.insert(route.resource.clone(), at.clone());
            prefixes.insert(route.path_prefix.clone(), at);
            routes.push(route.clone());
        }
    }
    Ok(routes)
}
