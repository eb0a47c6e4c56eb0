//! The three tower layers of the request path, outermost first:
//!
//! 1. [`release`]: gives every permit of a request back once its response
//!    body has been sent, or the client went away first.
//! 2. [`pre_auth`]: before auth, the route's (or service's) limit — a cheap
//!    floor against floods.
//! 3. [`tenant`]: verifies the JWT and applies the tenant's limit.
//!
//! A denial is a `429` with `Retry-After` and IETF `RateLimit` /
//! `RateLimit-Policy` headers ([`deny`]), logged as structured fields.

pub mod deny;
pub mod pre_auth;
pub mod release;
pub mod tenant;

use crate::permits::PermitSlot;

/// The permit slot of a request: the one the release layer put in its
/// extensions, or a new one (then the permits live as long as the request).
pub(crate) fn slot_of<B>(req: &mut http::Request<B>) -> PermitSlot {
    match req.extensions().get::<PermitSlot>() {
        Some(s) => s.clone(),
        None => {
            let s = PermitSlot::default();
            req.extensions_mut().insert(s.clone());
            s
        }
    }
}
