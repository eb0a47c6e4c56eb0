//! Why an exchange with an upstream failed, as the pool and the raw
//! exchange report it (`failure.rs` reads its cause).

/// An error of the connector (boxed, as it comes).
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why an exchange with an upstream failed. The source chain carries the
/// cause (an `io::Error`, a `hyper::Error`, a TLS error), which
/// `failure::classify` reads.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExchangeError {
    /// No connection: refused, unreachable, beyond the connect timeout, or
    /// its TLS handshake failed.
    #[error("client error (Connect)")]
    Connect(#[source] BoxError),
    /// A fresh connection closed before the request was sent.
    #[error("client error (Canceled)")]
    Canceled(#[source] hyper::Error),
    /// The exchange on a connection failed.
    #[error("client error (SendRequest)")]
    SendRequest(#[source] hyper::Error),
    /// The exchange on a kept plain-TCP connection failed: reset, or
    /// closed before the response was whole.
    #[error("client error (Io)")]
    Io(#[source] std::io::Error),
    /// The upstream's answer is not an HTTP/1.1 response that can be
    /// framed.
    #[error("{0}")]
    BadResponse(String),
}

impl ExchangeError {
    /// Whether no connection could be made.
    pub(crate) fn is_connect(&self) -> bool {
        matches!(self, Self::Connect(_))
    }
}
