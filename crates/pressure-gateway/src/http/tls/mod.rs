//! TLS with rustls (on the `ring` provider): the listeners' certificates,
//! swapped on reload ([`ServerTls`]), and the trust of `https://` upstreams
//! ([`UpstreamTls`]). Opt-in: without `gateway.tls` the listener serves
//! plain HTTP/1.1 and h2c on the same code path as before.
//!
//! * **Listener** (`gateway.tls`, `gateway.admin.tls`): a PEM chain and
//!   key; ALPN offers `h2` then `http/1.1`. The handshake must finish
//!   within `timeouts.headerReadMs` — a client that connects and never
//!   sends a ClientHello is closed then. A failed handshake is a closed
//!   connection and a log line at most once a second, never a panic.
//! * **Reload**: every reload reads the files again; new connections use
//!   the new certificate, open ones keep theirs. A file that does not load
//!   refuses the whole reload (naming the JSON path) and the old
//!   certificate serves on.
//! * **Upstreams**: an `https://` upstream is verified against the bundled
//!   public roots (`webpki-roots`), or against its `tls.caFile`; the SNI
//!   and the name checked are the URL's host.

mod pem;
mod server;
mod upstream;

pub use server::ServerTls;
pub(crate) use server::{server_config, ClientTls};
pub(crate) use upstream::UpstreamTls;

use std::sync::Arc;

/// The crypto provider of every TLS config the gateway builds: `ring`,
/// named explicitly so no process-wide default is needed.
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
