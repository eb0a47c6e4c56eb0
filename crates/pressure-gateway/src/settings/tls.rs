//! The TLS sections of the config: `gateway.tls` and `gateway.admin.tls`
//! (a listener's certificate and key) and `gateway.upstreams.<name>.tls`
//! (the CA an `https://` upstream is verified with). Their files are loaded
//! when the plan is built (`crate::plan`), so a certificate that does not
//! parse stops the process with its JSON path instead of failing a
//! handshake.
//!
//! File names are relative to the config file's directory, like every
//! other file the config names; [`resolve_files`] makes them absolute once,
//! when the file is loaded, so later readers (reload, the Redis backend)
//! need no base directory.

use super::files::resolve;
use super::types::{BackendConfig, GatewayConfig};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// `gateway.tls` / `gateway.admin.tls`: serve the listener over TLS with
/// this certificate chain and key (PEM). Re-read on every reload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListenerTlsConfig {
    /// PEM file with the certificate chain, leaf first.
    pub cert_file: String,
    /// PEM file with the private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: String,
}

/// `gateway.upstreams.<name>.tls`: how an `https://` upstream is verified.
/// Without it (or without `caFile`) the bundled public roots are used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpstreamTlsConfig {
    /// PEM file with the CA certificate(s) the upstream's certificate must
    /// chain to (instead of the public roots), e.g. a private CA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
}

/// Makes every TLS file name of `cfg` absolute (relative to `base_dir`,
/// itself made absolute against the current directory), leaving empty
/// names alone for validation to refuse.
pub(crate) fn resolve_files(cfg: &mut GatewayConfig, base_dir: &Path) {
    let fix = |name: &mut String| {
        if !name.is_empty() {
            let joined = resolve(base_dir, name);
            let absolute = std::path::absolute(&joined).unwrap_or(joined);
            *name = absolute.to_string_lossy().into_owned();
        }
    };
    for tls in [cfg.tls.as_mut(), cfg.admin.tls.as_mut()].into_iter().flatten() {
        fix(&mut tls.cert_file);
        fix(&mut tls.key_file);
    }
    for up in cfg.upstreams.values_mut() {
        if let Some(ca) = up.tls.as_mut().and_then(|t| t.ca_file.as_mut()) {
            fix(ca);
        }
    }
    if let BackendConfig::Redis(rc) = &mut cfg.backend {
        if let Some(ca) = rc.tls.as_mut().and_then(|t| t.ca_file.as_mut()) {
            fix(ca);
        }
    }
}

/// The TLS files a reload re-reads (listener certificates and keys,
/// upstream CA files), for watching them: a rotated certificate is a
/// reason to reload.
pub(crate) fn watched_files(cfg: &super::GatewayConfig) -> Vec<&str> {
    let listeners = [cfg.tls.as_ref(), cfg.admin.tls.as_ref()]
        .into_iter()
        .flatten()
        .flat_map(|t| [t.cert_file.as_str(), t.key_file.as_str()]);
    let upstreams = cfg
        .upstreams
        .values()
        .filter_map(|u| u.tls.as_ref().and_then(|t| t.ca_file.as_deref()));
    listeners.chain(upstreams).collect()
}

#[cfg(test)]
mod tests {
    use super::resolve_files;
    use crate::settings::parse_shape;
    use std::path::Path;

    #[test]
    fn tls_file_names_become_absolute_against_the_config_directory() {
        let mut cfg = parse_shape(
            r#"{"gateway": {"listen": "127.0.0.1:1",
                "tls": {"certFile": "certs/a.crt", "keyFile": "/abs/a.key"},
                "admin": {"tls": {"certFile": "", "keyFile": "b.key"}},
                "upstreams": {"u": {"url": "https://h:1", "pathPrefix": "/",
                                    "tls": {"caFile": "ca.pem"}}},
                "backend": {"type": "redis", "url": "rediss://h:6380",
                            "tls": {"caFile": "../redis-ca.pem"}}}}"#,
        )
        .expect("shape");
        resolve_files(&mut cfg, Path::new("/etc/pressure"));
        let tls = cfg.tls.as_ref().expect("tls");
        assert_eq!(tls.cert_file, "/etc/pressure/certs/a.crt");
        assert_eq!(tls.key_file, "/abs/a.key");
        let admin = cfg.admin.tls.as_ref().expect("admin tls");
        assert_eq!(
            admin.cert_file, "",
            "empty names are left for validation to refuse"
        );
        assert_eq!(admin.key_file, "/etc/pressure/b.key");
        let ca = cfg.upstreams["u"].tls.as_ref().and_then(|t| t.ca_file.clone());
        assert_eq!(ca.as_deref(), Some("/etc/pressure/ca.pem"));
        let crate::settings::BackendConfig::Redis(rc) = &cfg.backend else {
            panic!("redis backend");
        };
        let ca = rc.tls.as_ref().and_then(|t| t.ca_file.clone());
        assert_eq!(ca.as_deref(), Some("/etc/pressure/../redis-ca.pem"));
        assert_eq!(
            crate::settings::watched_files(&cfg),
            [
                "/etc/pressure/certs/a.crt",
                "/abs/a.key",
                "",
                "/etc/pressure/b.key",
                "/etc/pressure/ca.pem"
            ]
        );
    }
}
