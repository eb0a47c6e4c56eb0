//! Plugin manifests: a plugin declares the routes it serves and their
//! pressure budget in its own JSON file, so that installing a plugin does not
//! mean editing the gateway config. Every `*.json` file of
//! `gateway.pressure.manifestsDir` (sorted by name) is read at start:
//!
//! ```json
//! { "plugin": "github",
//!   "routes": [{ "resource": "gateway:route:github", "pathPrefix": "/webhooks/github",
//!                "limits": { "requestsPerSecond": 5 } }] }
//! ```
//!
//! Each route is appended to `gateway.pressure.perRoute`. Errors name the
//! manifest file, then the path inside it
//! (`manifests/github.json: routes[0].limits.requestsPerSecond: must be > 0`);
//! a route whose `resource` or `pathPrefix` is already taken (by the main
//! config or another manifest) is an error naming both places.

use super::error::ConfigError;
use super::files::resolve;
use super::shape::deserialize_with_path;
use super::types::{GatewayConfig, RouteLimit};
use crate::plan::checks::{check_limits, check_route_resource};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// One plugin's manifest file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginManifest {
    /// The plugin's name (unique among manifests).
    pub plugin: String,
    /// Routes the plugin serves, each with its own limits.
    #[serde(default)]
    pub routes: Vec<RouteLimit>,
}

/// A manifest as read from disk, with the name it is shown under.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedManifest {
    /// The file as named in errors: `manifestsDir` joined with the file name,
    /// e.g. `manifests/github.json`.
    pub file: String,
    /// Its content.
    pub manifest: PluginManifest,
}

/// Reads every `*.json` file of `dir` (sorted by name); `shown` is how the
/// directory is named in errors (as written in the config). Only the shape
/// is checked here; [`apply_manifests`] checks the routes.
pub fn read_manifests(dir: &Path, shown: &str) -> Result<Vec<LoadedManifest>, ConfigError> {
    let dir_error = |e: std::io::Error| {
        ConfigError::new(
            "gateway.pressure.manifestsDir",
            format!("cannot read directory {}: {e}", dir.display()),
        )
        .with_file(dir)
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(dir_error)? {
        let entry = entry.map_err(dir_error)?;
        let path = entry.path();
        if path.extension().is_some_and(|ext| ext == "json") && path.is_file() {
            files.push((entry.file_name(), path));
        }
    }
    files.sort();
    let mut out = Vec::with_capacity(files.len());
    for (name, path) in files {
        let file = Path::new(shown).join(&name).display().to_string();
        let text = std::fs::read_to_string(&path)
            .map_err(|e| ConfigError::new(file.clone(), format!("cannot read: {e}")).with_file(&path))?;
        let manifest: PluginManifest = deserialize_with_path(&text, &format!("{file}: "))?;
        out.push(LoadedManifest { file, manifest });
    }
    Ok(out)
}

/// Loads the manifests of `cfg.pressure.manifestsDir` (relative to
/// `base_dir`), checks their routes against the config and each other, and
/// appends them to `cfg.pressure.perRoute`. Does nothing when no directory
/// is configured; a configured directory that is missing is an error.
/// `cfg` is left unchanged on error.
pub fn apply_manifests(cfg: &mut GatewayConfig, base_dir: &Path) -> Result<(), ConfigError> {
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
