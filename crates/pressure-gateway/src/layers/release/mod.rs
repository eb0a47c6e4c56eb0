//! Layer 3, outermost: every permit a request took is given back exactly
//! once — when its response body has been fully sent, when the client goes
//! away first (the body or the response future is dropped), or at the
//! response head for WebSocket upgrades (`101`) and `text/event-stream`
//! answers, whose long-lived connections must not hold a slot.

mod layer;
mod service;

pub use layer::ReleaseLayer;
pub use service::Release;
