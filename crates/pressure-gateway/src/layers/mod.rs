//! The tower layers of the request path, outermost first:
//!
//! 1. [`route`]: normalises the path, checks the request head, reads the
//!    current plan and routes the request once; renders every
//!    refusal the inner layers return, in the route's dialect; observes
//!    every request for the traffic metrics and the access log
//!    ([`observe`]) and adds the optional `RateLimit` headers
//!    ([`ratelimit_headers`]).
//! 2. [`body_limit`]: refuses bodies above `limits.maxBodyBytes`.
//! 3. [`release`]: gives every permit of a request back once its response
//!    body has been sent, or the client went away first.
//! 4. [`pre_auth`]: before auth, the route's resource — a cheap floor
//!    against floods.
//! 5. [`tenant`]: verifies the JWT or the API key and applies the
//!    tenant's limit (and the key's own).
//! 6. `crate::answer`, the innermost service, answers with the endpoint
//!    the route names: an LLM endpoint by its handler, a proxied route by
//!    the proxy (its failures mapped to refusals there).
//!
//! Beside them: the request's [`context`] (what the route layer decided,
//! read by every inner layer), the step plumbing (`step.rs`) and charging a
//! resource (`charge.rs`). Every layer under [`route`] is a
//! `tower::Service` whose error is a [`Rejection`]: a refusal is a value,
//! counted, logged and rendered in one place.
//!
//! [`Rejection`]: crate::Rejection

pub(crate) mod body_limit;
mod charge;
pub(crate) mod context;
pub(crate) mod observe;
pub(crate) mod pre_auth;
pub(crate) mod ratelimit_headers;
pub(crate) mod release;
pub(crate) mod route;
mod step;
pub(crate) mod tenant;

pub use crate::http::server::BodyService;
pub(crate) use charge::{acquire, acquire_if_ready, admit_shadow, charge, denied, failed, hold, options_of};
pub(crate) use context::{charged, context, context_mut, RequestContext};
pub(crate) use step::step_layer;
pub(crate) use step::take_ready;
pub use step::{Outcome, RejectingService, Step, StepFuture, Stepped};
