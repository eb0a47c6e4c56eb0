//! The TLS files a config names (`gateway.tls`, `gateway.admin.tls`,
//! `gateway.upstreams.<name>.tls`), loaded once, when the plan is built:
//! what would fail a handshake fails here, naming the JSON path, and what
//! loaded is what the gateway installs (`LoadedTls`, kept by the plan).

use super::LoadedTls;
use crate::settings::{ConfigError, GatewayConfig, UpstreamTlsConfig};
use std::collections::BTreeMap;
use std::path::Path;

/// Checks the upstreams' TLS settings, then loads every certificate, key
/// and CA file `cfg` names (relative to `base_dir`), once.
pub(super) fn load(cfg: &GatewayConfig, base_dir: &Path) -> Result<LoadedTls, ConfigError> {
    check_upstreams(cfg)?;
    LoadedTls::load(cfg, base_dir)
}

/// An upstream's `tls` needs an `https://` URL; two upstreams on the same
/// `host:port` share connections, so they must agree on how it is
/// verified. (Its CA file is loaded with the rest.)
fn check_upstreams(cfg: &GatewayConfig) -> Result<(), ConfigError> {
    let mut by_authority: BTreeMap<String, (&str, Option<&UpstreamTlsConfig>)> = BTreeMap::new();
    for (name, up) in &cfg.upstreams {
        let path = format!("gateway.upstreams.{name}.tls");
        let https = up.url.starts_with("https://");
        if up.tls.is_some() && !https {
            return Err(ConfigError::new(path, "requires an https:// url"));
        }
        if !https {
            continue;
        }
        let Some(authority) = up
            .url
            .parse::<http::Uri>()
            .ok()
            .and_then(|u| u.authority().cloned())
        else {
            continue;
        };
        let ca = up.tls.as_ref().filter(|t| t.ca_file.is_some());
        match by_authority.get(authority.as_str()) {
            Some((other, theirs)) if *theirs != ca => {
                return Err(ConfigError::new(
                    path,
                    format!(
                        "differs from gateway.upstreams.{other}.tls, which has the same host:port ({authority}); upstreams on one address share their connections"
                    ),
                ));
            }
            Some(_) => {}
            None => {
                by_authority.insert(authority.as_str().to_owned(), (name, ca));
            }
        }
    }
    Ok(())
}
