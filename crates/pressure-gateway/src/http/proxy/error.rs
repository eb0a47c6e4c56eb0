//! Errors of building a [`Proxy`](super::Proxy) or its upstream table.

/// Why the proxy could not be built from its configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    /// An upstream's `url` is not a usable `http://host[:port][/base]` URL.
    #[error("gateway.upstreams.{upstream}.url: {reason} (got {url:?})")]
    InvalidUrl {
        /// The upstream's name.
        upstream: String,
        /// The configured URL.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An upstream's `pathPrefix` is not an absolute path.
    #[error("gateway.upstreams.{upstream}.pathPrefix: {reason} (got {prefix:?})")]
    InvalidPathPrefix {
        /// The upstream's name.
        upstream: String,
        /// The configured prefix.
        prefix: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Two upstreams claim the same `pathPrefix`, so routing would be ambiguous.
    #[error("gateway.upstreams.{second}.pathPrefix: {prefix:?} is already the prefix of upstream {first}")]
    DuplicatePathPrefix {
        /// The shared prefix.
        prefix: String,
        /// The upstream that claimed it first (by name order).
        first: String,
        /// The upstream that claimed it again.
        second: String,
    },
    /// A timeout is zero, which would fail every request.
    #[error("gateway.timeouts.{field}: must be > 0")]
    InvalidTimeout {
        /// The JSON name of the field (`connectMs`, `totalMs`).
        field: &'static str,
    },
    /// An upstream's `tls.caFile` cannot be loaded (names the JSON path).
    #[error(transparent)]
    Tls(#[from] crate::settings::ConfigError),
}
