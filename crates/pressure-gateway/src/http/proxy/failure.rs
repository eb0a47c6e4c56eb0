//! What kind of failure an upstream exchange met, from the client's error
//! chain: connect refused / timed out / other, a reset or early close, or
//! a response that is not HTTP. Counted per upstream in
//! `pressure_gateway_upstream_failures_total` so an operator can tell a
//! dead upstream from a slow or a broken one.

use super::exchange_error::ExchangeError;
use std::error::Error as StdError;
use std::io;

/// Why an upstream exchange failed, as counted in
/// `pressure_gateway_upstream_failures_total{upstream,kind}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UpstreamFailure {
    /// Nothing listens there (`ECONNREFUSED`).
    ConnectRefused,
    /// Connecting took longer than `timeouts.connectMs`.
    ConnectTimeout,
    /// Any other connect failure (unreachable, DNS, …).
    ConnectError,
    /// No response head within `timeouts.totalMs` (a `504`).
    Timeout,
    /// The upstream closed or reset the connection before its response
    /// head was complete.
    Reset,
    /// The upstream answered something that is not a valid HTTP/1.1
    /// response (or an unasked-for `101`).
    BadResponse,
    /// Anything else.
    Error,
}

impl UpstreamFailure {
    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ConnectRefused => "connect_refused",
            Self::ConnectTimeout => "connect_timeout",
            Self::ConnectError => "connect_error",
            Self::Timeout => "timeout",
            Self::Reset => "reset",
            Self::BadResponse => "bad_response",
            Self::Error => "error",
        }
    }
}

/// Why the proxy could not answer a request with the upstream's response:
/// the client's own fault with its body (first, when both failed), the
/// request target, or the upstream. The gateway maps each to its refusal
/// in one place (`crate::answer`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyFailure {
    /// The request target cannot be forwarded (`400`).
    BadTarget,
    /// The request body outgrew the body limit (`413`).
    BodyTooLarge {
        /// The limit, in bytes.
        max: u64,
    },
    /// The request body is malformed or was cut short (`400`).
    BodyMalformed,
    /// The request body was not complete in time (`408`): within the
    /// whole bound (`whole_ms`), or between two of its reads (`None`).
    BodyTimeout {
        /// The bound on the whole body, when it was that one.
        whole_ms: Option<u64>,
    },
    /// No connection to the upstream (`502 upstream_unavailable`).
    Unavailable {
        /// The upstream's name.
        upstream: String,
        /// The innermost cause.
        reason: String,
        /// How it failed.
        kind: UpstreamFailure,
    },
    /// The exchange with the upstream failed (`502 upstream_error`).
    Failed {
        /// The upstream's name.
        upstream: String,
        /// The cause.
        reason: String,
        /// How it failed.
        kind: UpstreamFailure,
    },
    /// No response head within the bound (`504 upstream_timeout`).
    Timeout {
        /// The upstream's name.
        upstream: String,
        /// The bound, in milliseconds.
        after_ms: u64,
    },
}

/// The cause of a failed exchange (`error` from the pool).
pub(crate) fn classify(error: &ExchangeError) -> UpstreamFailure {
    if matches!(error, ExchangeError::BadResponse(_)) {
        return UpstreamFailure::BadResponse;
    }
    let io_kind = chain(error).find_map(|e| e.downcast_ref::<io::Error>().map(io::Error::kind));
    if error.is_connect() {
        return match io_kind {
            Some(io::ErrorKind::ConnectionRefused) => UpstreamFailure::ConnectRefused,
            Some(io::ErrorKind::TimedOut) => UpstreamFailure::ConnectTimeout,
            _ => UpstreamFailure::ConnectError,
        };
    }
    if matches!(
        io_kind,
        Some(
            io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::UnexpectedEof
        )
    ) {
        return UpstreamFailure::Reset;
    }
    match chain(error).find_map(|e| e.downcast_ref::<hyper::Error>()) {
        Some(h) if h.is_parse() || h.is_parse_status() || h.is_parse_too_large() => {
            UpstreamFailure::BadResponse
        }
        Some(h) if h.is_incomplete_message() || h.is_canceled() || h.is_closed() => UpstreamFailure::Reset,
        _ => UpstreamFailure::Error,
    }
}

/// `error` and its sources, outermost first.
fn chain<'a>(error: &'a (dyn StdError + 'static)) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(error), |e: &&'a (dyn StdError + 'static)| (*e).source())
}
