//! The timed body that plays an answer out.
//!
//! A [`TimedBody`] is byte pieces each due at an instant. It sends each
//! piece when it is due, bills the output when the piece that ends
//! generation goes out, and marks the request complete after its last
//! piece. A stalling body sends its pieces and then nothing until shutdown.
//! Dropping the body early (the client went away) leaves the billing to
//! [`OutputBill`]'s detached task and marks the arrival `client_gone`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use futures::Stream;
use tokio::time::Instant;

use crate::state::{OutputBill, Shared, Tracker};

/// One piece of a body.
#[derive(Debug)]
pub(crate) struct Piece {
    /// When it is sent.
    pub(crate) at: Instant,
    /// The bytes.
    pub(crate) bytes: Bytes,
    /// Bill the output once this piece is sent (the end of generation).
    pub(crate) bill: bool,
}

/// A timed body; see the module docs.
#[derive(Debug)]
pub(crate) struct TimedBody {
    pieces: VecDeque<Piece>,
    /// Send nothing after the pieces until shutdown.
    stall: bool,
    tracker: Tracker,
    bill: Option<OutputBill>,
    shared: Arc<Shared>,
}

impl TimedBody {
    /// `pieces` of the request `tracker` follows, stalling after them or
    /// not, billing `bill` at the piece marked for it.
    pub(crate) fn new(
        shared: &Arc<Shared>,
        pieces: VecDeque<Piece>,
        stall: bool,
        tracker: Tracker,
        bill: Option<OutputBill>,
    ) -> Self {
        Self {
            pieces,
            stall,
            tracker,
            bill,
            shared: shared.clone(),
        }
    }

    /// The body as a stream of byte chunks.
    pub(crate) fn into_stream(self) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
        futures::stream::unfold(self, |mut body| async move {
            let Some(piece) = body.pieces.pop_front() else {
                if body.stall {
                    body.shared.shutdown_signal().await;
                }
                return None;
            };
            if piece.at > Instant::now() {
                tokio::select! {
                    _ = tokio::time::sleep_until(piece.at) => {}
                    _ = body.shared.shutdown_signal() => return None,
                }
            }
            if piece.bill {
                if let Some(bill) = body.bill.as_mut() {
                    bill.bill_now();
                }
            }
            if body.pieces.is_empty() && !body.stall {
                body.tracker.finish();
            }
            Some((Ok(piece.bytes), body))
        })
    }
}
