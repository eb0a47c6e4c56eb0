//! Every Redis client of the backend is made here, so the pool, the manual
//! queue and the shared hash agree on how they connect: a plain client for
//! `redis://` URLs; for `rediss://` (single Redis or every cluster seed) a
//! TLS client verified against the bundled public roots (`webpki-roots`)
//! or, for a server with a private or self-signed certificate, the CA of
//! `tls.caFile`. Which TLS settings can work is checked with the config
//! (`config.rs`).

use crate::config::{is_tls, read_ca, RedisConfig};
use redis::cluster::ClusterClientBuilder;
use redis::TlsCertificates;

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
pub(crate) fn single(config: &RedisConfig) -> Result<redis::Client, String> {
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
