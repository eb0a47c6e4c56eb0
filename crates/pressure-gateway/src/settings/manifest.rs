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

use super::shape::deserialize_with_path;
use super::types::RouteLimit;
use serde::{Deserialize, Serialize};

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
/// is checked here; the plan checks the routes (`crate::plan::apply_manifests`).
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
