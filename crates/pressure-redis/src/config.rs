//! Configuration of the Redis backend (JSON names in camelCase, as under the
//! gateway's `backend` key) and its checks.
//!
//! TLS to Redis (`rediss://` URLs, `tls.caFile`) is refused here, at
//! `check-config` time, when it cannot work: `tls` with a `redis://` URL, a
//! cluster mixing `redis://` and `rediss://` seeds, a `#insecure` URL
//! (certificate checks cannot be turned off in this build), and a CA file
//! that does not parse. The clients are made from it in `client.rs`.

use pressure_core::FieldError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What an acquisition does when Redis is unreachable or too slow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FailureMode {
    /// Deny (fail closed): protects downstream at the cost of availability.
    #[default]
    Closed,
    /// Allow (fail open): availability first, no limit while Redis is out.
    Open,
    /// Count in this process with `localShare` of each limit.
    Local,
}

/// Settings of a [`crate::RedisBackend`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct RedisConfig {
    /// `redis://host:port/db` of a single Redis (ignored when
    /// `clusterNodes` is set).
    pub url: String,
    /// Seed nodes of a Redis Cluster; when non-empty, cluster mode is used.
    pub cluster_nodes: Vec<String>,
    /// Prefix of every key.
    pub key_prefix: String,
    /// Timeout of every Redis call, in milliseconds.
    pub timeout_ms: u64,
    /// Timeout of a connection attempt, in milliseconds.
    pub connect_timeout_ms: u64,
    /// Behaviour while Redis is unavailable.
    pub failure_mode: FailureMode,
    /// `local` mode: share of each limit this process may use on its own
    /// (e.g. 1 / number of instances).
    pub local_share: f64,
    /// Multiplexed connections shared by all callers (round robin).
    pub connections: usize,
    /// Refuse locally what the store already denied until a known time.
    pub deny_cache: bool,
    /// TLS for `rediss://` URLs (a private CA); absent: the public roots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<RedisTlsConfig>,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".into(),
            cluster_nodes: Vec::new(),
            key_prefix: "pressure".into(),
            timeout_ms: 50,
            connect_timeout_ms: 500,
            failure_mode: FailureMode::Closed,
            local_share: 0.25,
            connections: 2,
            deny_cache: true,
            tls: None,
        }
    }
}

impl RedisConfig {
    /// The default settings for `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            ..Self::default()
        }
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// Checks the values; the error names the JSON field.
    pub fn validate(&self) -> Result<(), pressure_core::FieldError> {
        if self.timeout_ms == 0 || self.timeout_ms > 10_000 {
            return Err(pressure_core::FieldError::new(
                "timeoutMs",
                "must be between 1 and 10000",
            ));
        }
        if self.connect_timeout_ms == 0 {
            return Err(pressure_core::FieldError::new("connectTimeoutMs", "must be > 0"));
        }
        if !(self.local_share > 0.0 && self.local_share <= 1.0) {
            return Err(pressure_core::FieldError::new(
                "localShare",
                "must be > 0 and at most 1",
            ));
        }
        if self.connections == 0 || self.connections > 64 {
            return Err(pressure_core::FieldError::new(
                "connections",
                "must be between 1 and 64",
            ));
        }
        if self.key_prefix.is_empty() || self.key_prefix.contains(['{', '}']) {
            return Err(pressure_core::FieldError::new(
                "keyPrefix",
                "must be non-empty and contain no braces",
            ));
        }
        check_tls(self)
    }
}

/// `backend.tls`: how a `rediss://` server is verified.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RedisTlsConfig {
    /// PEM file with the CA certificate(s) the server's certificate must
    /// chain to, instead of the public roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
}

/// The URLs of `config` with their JSON field names.
fn urls(config: &RedisConfig) -> Vec<(&str, String)> {
    if config.cluster_nodes.is_empty() {
        vec![(config.url.as_str(), "url".to_owned())]
    } else {
        config
            .cluster_nodes
            .iter()
            .enumerate()
            .map(|(i, u)| (u.as_str(), format!("clusterNodes[{i}]")))
            .collect()
    }
}

/// Whether `url` asks for TLS (`rediss://`).
pub(crate) fn is_tls(url: &str) -> bool {
    url.starts_with("rediss://")
}

/// Refuses TLS settings that cannot work (module docs); the error names
/// the field (`url`, `clusterNodes[1]`, `tls`, `tls.caFile`).
fn check_tls(config: &RedisConfig) -> Result<(), FieldError> {
    let urls = urls(config);
    for (url, field) in &urls {
        if is_tls(url) && url.contains("#insecure") {
            return Err(FieldError::new(
                field.as_str(),
                "#insecure (no certificate check) is not supported; give the server's CA in tls.caFile",
            ));
        }
    }
    if let Some((_, field)) = urls.iter().find(|(u, _)| is_tls(u) != is_tls(urls[0].0)) {
        return Err(FieldError::new(
            field.as_str(),
            "every cluster seed must use the same scheme (all redis:// or all rediss://)",
        ));
    }
    let Some(tls) = &config.tls else {
        return Ok(());
    };
    if !urls.iter().all(|(u, _)| is_tls(u)) {
        return Err(FieldError::new("tls", "requires rediss:// URLs"));
    }
    if let Some(file) = &tls.ca_file {
        let pem = read_ca(file).map_err(|e| FieldError::new("tls.caFile", e))?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert =
                cert.map_err(|e| FieldError::new("tls.caFile", format!("{file} is not a PEM CA file: {e}")))?;
            roots.add(cert).map_err(|e| {
                FieldError::new("tls.caFile", format!("{file}: not a usable CA certificate: {e}"))
            })?;
        }
        if roots.is_empty() {
            return Err(FieldError::new(
                "tls.caFile",
                format!("{file} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"),
            ));
        }
    }
    Ok(())
}

/// The bytes of the CA file `file`; the error says why it cannot be read.
pub(crate) fn read_ca(file: &str) -> Result<Vec<u8>, String> {
    if file.is_empty() {
        return Err("must not be empty".into());
    }
    std::fs::read(file).map_err(|e| format!("cannot read {file}: {e}"))
}
