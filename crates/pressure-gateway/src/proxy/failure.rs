//! What kind of failure an upstream exchange met, from the client's error
//! chain: connect refused / timed out / other, a reset or early close, or
//! a response that is not HTTP. Counted per upstream in
//! `pressure_gateway_upstream_failures_total` so an operator can tell a
//! dead upstream from a slow or a broken one.

use super::pool::ExchangeError;
use crate::rejection::UpstreamFailure;
use std::error::Error as StdError;
use std::io;

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
