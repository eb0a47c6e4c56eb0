//! Layer 1, before auth: the request's route (longest `perRoute.pathPrefix`)
//! or, failing that, its upstream's `perService` limit. A cheap floor
//! against floods: refused requests never reach token verification. The
//! permit goes into the request's [`crate::permits::PermitSlot`].

mod layer;
mod service;

pub use layer::PreAuthLayer;
pub use service::PreAuth;
