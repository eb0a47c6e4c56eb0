//! The TLS state of one gateway: what [`LoadedTls::load`] reads from a
//! config (listener certificates, upstream trust), loaded but not in use
//! yet so that a reload can fail before it changes anything, and the
//! [`Listeners`] it is installed into — shared with every server thread
//! and every upstream connector, so an install reaches them all.

use crate::http::tls::{server_config, ServerTls, UpstreamTls};
use crate::settings::{ConfigError, GatewayConfig, ListenerTlsConfig};
use arc_swap::ArcSwap;
use std::path::Path;
use std::sync::Arc;

/// The TLS state built from the config and refreshed on reload: each TLS
/// listener's certificate, and the trust of `https://` upstreams.
pub(crate) struct Listeners {
    pub(crate) proxy: Option<ServerTls>,
    pub(crate) admin: Option<ServerTls>,
    pub(crate) upstreams: Arc<ArcSwap<UpstreamTls>>,
}

/// The TLS configs of `config` (files relative to `base_dir`), loaded but
/// not yet in use, so a reload can fail before it changes anything.
#[derive(Debug)]
pub(crate) struct LoadedTls {
    proxy: Option<Arc<rustls::ServerConfig>>,
    admin: Option<Arc<rustls::ServerConfig>>,
    upstreams: UpstreamTls,
}

impl LoadedTls {
    /// Reads the listeners' certificates and the upstreams' CA files of
    /// `config` (relative to `base_dir`).
    pub(crate) fn load(config: &GatewayConfig, base_dir: &Path) -> Result<Self, ConfigError> {
        let server = |tls: &Option<ListenerTlsConfig>, path: &str| {
            tls.as_ref().map(|t| server_config(t, base_dir, path)).transpose()
        };
        Ok(Self {
            proxy: server(&config.tls, "gateway.tls")?,
            admin: server(&config.admin.tls, "gateway.admin.tls")?,
            upstreams: UpstreamTls::from_config(&config.upstreams, base_dir)?,
        })
    }

    /// The state to serve with, from these configs.
    pub(crate) fn into_listeners(self) -> Listeners {
        Listeners {
            proxy: self.proxy.map(ServerTls::new),
            admin: self.admin.map(ServerTls::new),
            upstreams: Arc::new(ArcSwap::from_pointee(self.upstreams)),
        }
    }

    /// Puts these configs in use: new connections (both ways) use them.
    /// Turning TLS on or off is refused before (restart only).
    pub(crate) fn install(self, into: &Listeners) {
        for (cell, config) in [(&into.proxy, self.proxy), (&into.admin, self.admin)] {
            if let (Some(cell), Some(config)) = (cell, config) {
                cell.replace(config);
            }
        }
        into.upstreams.store(Arc::new(self.upstreams));
    }
}
