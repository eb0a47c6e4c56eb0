//! Helpers shared by the contract checks: one acquisition, one granted
//! permit, and the "never fits" refusal, so each check file reads as its
//! assertions.

use crate::{AcquireOptions, Acquisition, Backend, Error, Permit, ResourceBroker};

/// One check+reject acquisition; the backend must answer.
pub(super) async fn take<B: Backend>(
    b: &ResourceBroker<B>,
    id: &str,
    opts: AcquireOptions,
) -> Acquisition<B> {
    b.try_acquire(id, opts).await.expect("backend answers")
}

/// Whether an acquisition of `opts` is granted now (the permit, if any,
/// released at once).
pub(super) async fn admits<B: Backend>(b: &ResourceBroker<B>, id: &str, opts: AcquireOptions) -> bool {
    take(b, id, opts).await.allowed()
}

/// The permit of an acquisition that must be granted.
pub(super) async fn permit<B: Backend>(b: &ResourceBroker<B>, id: &str, opts: AcquireOptions) -> Permit<B> {
    take(b, id, opts).await.into_permit().expect("fits")
}

/// Checks that `opts` is refused at once with the "never fits" error: a
/// demand of `demand` units above a limit of `max`.
pub(super) async fn assert_never_fits<B: Backend>(
    b: &ResourceBroker<B>,
    id: &str,
    opts: AcquireOptions,
    demand: u64,
    max: u64,
) {
    let e = b.try_acquire(id, opts).await.expect_err("never fits");
    assert!(
        matches!(e, Error::DemandTooLarge { demand: d, max: m, .. } if d == demand && m == max),
        "{e}"
    );
}
