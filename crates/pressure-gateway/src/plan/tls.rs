//! The TLS files a config names (`gateway.tls`, `gateway.admin.tls`,
//! `gateway.upstreams.<name>.tls`), loaded when the plan is built, so that
//! what would fail a handshake fails here, naming the JSON path.

use crate::settings::{ConfigError, GatewayConfig, UpstreamTlsConfig};
use std::collections::BTreeMap;
use std::path::Path;

/// Loads every certificate, key and CA file `cfg` names (relative to
/// `base_dir`), so that what would fail a handshake fails here, naming the
/// JSON path.
pub(super) fn check(cfg: &GatewayConfig, base_dir: &Path) -> Result<(), ConfigError> {
    if let Some(tls) = &cfg.tls {
        crate::http::tls::server_config(tls, base_dir, "gateway.tls")?;
    }
    if let Some(tls) = &cfg.admin.tls {
        crate::http::tls::server_config(tls, base_dir, "gateway.admin.tls")?;
    }
    check_upstreams(cfg, base_dir)
}

/// An upstream's `tls` needs an `https://` URL and a CA file that parses;
/// two upstreams on the same `host:port` share connections, so they must
/// agree on how it is verified.
fn check_upstreams(cfg: &GatewayConfig, base_dir: &Path) -> Result<(), ConfigError> {
    let mut by_authority: BTreeMap<String, (&str, Option<&UpstreamTlsConfig>)> = BTreeMap::new();
    for (name, up) in &cfg.upstreams {
        let path = format!("gateway.upstreams.{name}.tls");
        let https = up.url.starts_with("https://");
        if let Some(tls) = &up.tls {
            if !https {
                return Err(ConfigError::new(path, "requires an https:// url"));
            }
            if let Some(ca) = &tls.ca_file {
                crate::http::tls::load_roots(ca, base_dir, &format!("{path}.caFile"))?;
            }
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
