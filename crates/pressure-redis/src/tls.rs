//! TLS to Redis: `rediss://` URLs (single Redis or every cluster seed),
//! verified against the bundled public roots (`webpki-roots`) or, for a
//! server with a private or self-signed certificate, the CA of
//! `tls.caFile`. Every Redis client of the backend is made here, so the
//! manual queue and the pool agree on how they connect.
//!
//! Refused by [`check`] (at `check-config` time) because they cannot work:
//! `tls` with a `redis://` URL, a cluster mixing `redis://` and
//! `rediss://` seeds, a `#insecure` URL (certificate checks cannot be
//! turned off in this build), and a CA file that does not parse.

use crate::RedisConfig;
use pressure_core::FieldError;
use redis::cluster::ClusterClientBuilder;
use redis::TlsCertificates;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use serde::{Deserialize, Serialize};

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

fn is_tls(url: &str) -> bool {
    url.starts_with("rediss://")
}

/// Refuses TLS settings that cannot work (module docs); the error names
/// the field (`url`, `clusterNodes[1]`, `tls`, `tls.caFile`).
pub(crate) fn check(config: &RedisConfig) -> Result<(), FieldError> {
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

fn read_ca(file: &str) -> Result<Vec<u8>, String> {
    if file.is_empty() {
        return Err("must not be empty".into());
    }
    std::fs::read(file).map_err(|e| format!("cannot read {file}: {e}"))
}

/// The certificates of `config.tls`, when it names a CA file.
fn certificates(config: &RedisConfig) -> Result<Option<TlsCertificates>, String> {
    let Some(file) = config.tls.as_ref().and_then(|t| t.ca_file.as_deref()) else {
        return Ok(None);
    };
    Ok(Some(TlsCertificates {
        client_tls: None,
        root_cert: Some(read_ca(file)?),
    }))
}

/// The redis crate's rustls calls use the process's default provider:
/// make it `ring` (the only one built) before the first TLS connection.
fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A client for the single Redis of `config`.
pub(crate) fn client(config: &RedisConfig) -> Result<redis::Client, String> {
    if !is_tls(&config.url) {
        return redis::Client::open(config.url.as_str()).map_err(|e| format!("invalid url: {e}"));
    }
    install_provider();
    match certificates(config)? {
        None => redis::Client::open(config.url.as_str()),
        Some(certs) => redis::Client::build_with_tls(config.url.as_str(), certs),
    }
    .map_err(|e| format!("invalid url: {e}"))
}

/// A cluster client builder for the seeds of `config`.
pub(crate) fn cluster_builder(config: &RedisConfig) -> Result<ClusterClientBuilder, String> {
    let builder = ClusterClientBuilder::new(config.cluster_nodes.clone());
    if !config.cluster_nodes.iter().any(|u| is_tls(u)) {
        return Ok(builder);
    }
    install_provider();
    Ok(match certificates(config)? {
        None => builder,
        Some(certs) => builder.certs(certs),
    })
}
