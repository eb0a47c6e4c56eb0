//! `gateway.upstreams`: named, with URLs the proxy can dial and path
//! prefixes no two share — checked and built into the proxy's
//! [`Upstreams`] in one step.

use crate::http::proxy::Upstreams;
use crate::settings::{ConfigError, GatewayConfig};
use std::collections::BTreeMap;

/// The upstreams of `cfg`, or the first problem with them.
pub(super) fn build(cfg: &GatewayConfig) -> Result<Upstreams, ConfigError> {
    if cfg.upstreams.is_empty() {
        return Err(ConfigError::new(
            "gateway.upstreams",
            "at least one upstream is required",
        ));
    }
    let mut prefixes: BTreeMap<&str, &str> = BTreeMap::new();
    for (name, up) in &cfg.upstreams {
        let base = format!("gateway.upstreams.{name}");
        if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ConfigError::new(
                base,
                "upstream names must be non-empty and contain no whitespace",
            ));
        }
        check_url(&up.url, &format!("{base}.url"))?;
        let prefix_path = format!("{base}.pathPrefix");
        if !up.path_prefix.starts_with('/') {
            return Err(ConfigError::new(prefix_path, "must start with /"));
        }
        if let Some(other) = prefixes.insert(&up.path_prefix, name) {
            return Err(ConfigError::new(
                prefix_path,
                format!(
                    "\"{}\" is also the pathPrefix of gateway.upstreams.{other}",
                    up.path_prefix
                ),
            ));
        }
    }
    Upstreams::new(&cfg.upstreams).map_err(|e| ConfigError::new("gateway.upstreams", e.to_string()))
}

/// `http://host[:port][/path]` or `https://…`, nothing else.
fn check_url(url: &str, path: &str) -> Result<(), ConfigError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| ConfigError::new(path, format!("\"{url}\" is not a valid URL: {e}")))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(_) => {
            return Err(ConfigError::new(
                path,
                "only http:// and https:// upstreams are supported",
            ))
        }
        None => {
            return Err(ConfigError::new(
                path,
                format!("\"{url}\" is not an absolute URL (expected http://host:port)"),
            ))
        }
    }
    let Some(authority) = uri.authority() else {
        return Err(ConfigError::new(path, "has no host (expected http://host:port)"));
    };
    if authority.host().is_empty() {
        return Err(ConfigError::new(path, "has no host (expected http://host:port)"));
    }
    if authority.as_str().contains('@') {
        return Err(ConfigError::new(path, "must not contain credentials"));
    }
    if uri.query().is_some() {
        return Err(ConfigError::new(path, "must not have a query string"));
    }
    Ok(())
}
