//! Loading the gateway config: read the file, parse its shape
//! (`crate::settings::parse_shape`, every error naming its JSON path), build
//! its plan ([`Plan::check`]: the semantic checks), then merge the plugin
//! manifests (`manifests.rs`).
//!
//! Paths use the dotted, indexed form `gateway.pressure.perRoute[1].limits`;
//! relative file names in the config (`pressure.manifestsDir`,
//! `auth.jwt.publicKeyFile`, the TLS files) are relative to the config
//! file's directory; the TLS ones, a local LLM provider's `modelDir` and a
//! `knn` level's `examples` are made absolute here, at load.

use super::manifests::apply_manifests;
use super::{CheckedConfig, Plan};
use crate::settings::{
    base_dir_of, parse_shape, resolve_files, resolve_llm_files, ConfigError, ConfigErrors, GatewayConfig,
};
use std::path::Path;

/// Parses, validates and completes (plugin manifests) a config given as
/// text. Relative file names in it are resolved against the current
/// directory; use [`load`] to resolve them against the file's directory.
pub fn parse(json: &str) -> Result<GatewayConfig, ConfigError> {
    parse_in(json, Path::new("."))
}

/// Like [`parse`], with relative file names resolved against `base_dir`.
pub fn parse_in(json: &str, base_dir: &Path) -> Result<GatewayConfig, ConfigError> {
    let mut cfg = parse_shape(json)?;
    resolve_files(&mut cfg, base_dir);
    resolve_llm_files(&mut cfg, base_dir);
    validate(&cfg, base_dir)?;
    apply_manifests(&mut cfg, base_dir)?;
    Ok(cfg)
}

/// Checks everything the shape cannot express by building the plan of
/// `cfg` (`crate::plan::Plan::check`, on a broker of its own): addresses
/// that bind, upstream URLs the proxy can dial, limits that compile, names
/// that refer to something, a JWT key that verifies, TLS files that load.
/// `base_dir` is the directory relative file names are resolved against.
///
/// Environment variables named by the config (`auth.jwt.secretEnv`,
/// `admin.tokenEnv`) must be set and non-empty now: a gateway that would
/// start without its secret is refused at startup rather than at the first
/// request.
pub fn validate(cfg: &GatewayConfig, base_dir: &Path) -> Result<Plan, ConfigErrors> {
    Plan::check(cfg.clone(), base_dir)
}

/// Reads the config file at `path`: its shape parsed, its relative file
/// names resolved against the file's directory, its plugin manifests
/// merged, and nothing else checked — what the gateway checks once when it
/// builds its plan from it ([`Plan::checked`]) and `pressure check-config`
/// with [`validate`].
pub fn read(path: &Path) -> Result<GatewayConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError::new(path.display().to_string(), format!("cannot read: {e}")).with_file(path)
    })?;
    let base_dir = base_dir_of(path);
    let mut cfg = parse_shape(&text)?;
    resolve_files(&mut cfg, base_dir);
    resolve_llm_files(&mut cfg, base_dir);
    apply_manifests(&mut cfg, base_dir)?;
    Ok(cfg)
}

/// Checks `cfg` once, loading what its checks read (TLS files, the JWT
/// key, secrets from the environment), for the gateway to build its plan
/// from ([`crate::Gateway::from_checked`], [`crate::run`]) without checking
/// again. `base_dir` resolves relative file names.
pub fn check(cfg: GatewayConfig, base_dir: &Path) -> Result<CheckedConfig, ConfigErrors> {
    Plan::checked(cfg, base_dir)
}

/// Reads the config file at `path`, then does what [`parse_in`] does with
/// the file's directory as the base of relative file names.
pub fn load(path: &Path) -> Result<GatewayConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError::new(path.display().to_string(), format!("cannot read: {e}")).with_file(path)
    })?;
    parse_in(&text, base_dir_of(path))
}
