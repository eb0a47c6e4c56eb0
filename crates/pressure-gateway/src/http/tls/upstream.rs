//! The client side: how the proxy verifies `https://` upstreams. One rustls
//! `ClientConfig` per distinct trust (the public roots, or one upstream's
//! `tls.caFile`), looked up by the upstream's `host:port` when a new
//! connection is made; pooled connections are reused as they are.

use super::pem::load_roots;
use crate::settings::{ConfigError, UpstreamConfig};
use rustls::{ClientConfig, RootCertStore};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

/// The ALPN the proxy offers upstreams: it speaks HTTP/1.1 to them.
const ALPN: &[u8] = b"http/1.1";

/// Trust for `https://` upstreams: a config per `host:port` that has a
/// `tls.caFile`, the public roots (`webpki-roots`) for the others.
#[derive(Clone)]
pub struct UpstreamTls {
    public: Option<Arc<ClientConfig>>,
    by_authority: HashMap<String, Arc<ClientConfig>>,
}

impl std::fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamTls")
            .field("private_ca", &self.by_authority.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// A client config trusting `roots`, offering HTTP/1.1.
fn client_config(roots: RootCertStore) -> Result<Arc<ClientConfig>, rustls::Error> {
    let mut config = ClientConfig::builder_with_provider(super::provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(Arc::new(config))
}

impl UpstreamTls {
    /// Every `https://` upstream verified against the public roots.
    pub fn public_roots() -> Self {
        let roots = RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        let public = client_config(roots)
            .inspect_err(
                |e| tracing::error!(error = %e, "no TLS client config; https:// upstreams will fail"),
            )
            .ok();
        Self {
            public,
            by_authority: HashMap::new(),
        }
    }

    /// The trust of `gateway.upstreams` (validated; CA files relative to
    /// `base_dir`): each upstream with a `tls.caFile` is verified against
    /// that CA only.
    pub fn from_config(
        upstreams: &BTreeMap<String, UpstreamConfig>,
        base_dir: &Path,
    ) -> Result<Self, ConfigError> {
        let mut out = Self::public_roots();
        for (name, up) in upstreams {
            let Some(ca) = up.tls.as_ref().and_then(|t| t.ca_file.as_deref()) else {
                continue;
            };
            let path = format!("gateway.upstreams.{name}.tls.caFile");
            let roots = load_roots(ca, base_dir, &path)?;
            let config = client_config(roots).map_err(|e| ConfigError::new(&path, e.to_string()))?;
            let authority = up
                .url
                .parse::<http::Uri>()
                .ok()
                .and_then(|u| u.authority().map(|a| a.as_str().to_owned()))
                .ok_or_else(|| ConfigError::new(format!("gateway.upstreams.{name}.url"), "has no host"))?;
            out.by_authority.insert(authority, config);
        }
        Ok(out)
    }

    /// The config a new connection to `authority` (`host[:port]` as in the
    /// upstream's URL) is made with; `None` only if rustls could not build
    /// one at all.
    pub fn for_authority(&self, authority: &str) -> Option<Arc<ClientConfig>> {
        self.by_authority.get(authority).or(self.public.as_ref()).cloned()
    }
}
