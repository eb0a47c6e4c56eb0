//! [`RequestContext`]: what the layers of one request know about it, in one
//! typed value in its extensions. The route layer writes it when it routes
//! the request; the tenant layer adds who pays; every inner layer, the
//! endpoints and the forward service read it. A request that did not go
//! through the route layer has none, and the inner layers then pass it on
//! untouched.

use crate::backend::AnyBackend;
use crate::charged::Charged;
use crate::http::proxy::ConnTimer;
use crate::permits::PermitSlot;
use crate::plan::{Plan, Route};
use http::Request;
use std::net::SocketAddr;
use std::sync::Arc;

/// The context of one routed request.
#[derive(Debug, Clone)]
pub(crate) struct RequestContext {
    /// The plan current when the request arrived.
    pub(crate) plan: Arc<Plan>,
    /// The decision for the request.
    pub(crate) route: Route,
    /// The permits the request holds. The route layer's observation gives
    /// them back with the response body; the release layer when it is
    /// refused, dropped or long-lived.
    pub(crate) slot: PermitSlot,
    /// The client's address, when the connection attached itself to the
    /// route layer (otherwise it is in `ConnectInfo`).
    pub(crate) peer: Option<SocketAddr>,
    /// The connection's upstream timer, when the connection attached
    /// itself to the route layer (the proxy then keeps the request's
    /// `totalMs` on it).
    pub(crate) timer: Option<ConnTimer>,
    /// What the inner layers charged, for the access log and the
    /// `RateLimit` headers: only when the plan asks for either.
    pub(crate) charged: Option<Charged>,
    /// Whether concurrency leases are charged: not for a forward-auth
    /// subrequest, which can never give a slot back (`crate::decisions`).
    /// Rate and token limits are charged either way.
    pub(crate) leases: bool,
    /// The tenant's resource, charged the tokens and money of the
    /// request's LLM calls beside its request (set by the tenant layer on
    /// the LLM endpoints only).
    pub(crate) payer: Option<pressure_core::Nest<AnyBackend>>,
    /// What the tenant layer charged each level of `payer` for the request
    /// itself, level by level: given back when a level refuses the call's
    /// money (a refusal consumes nothing).
    pub(crate) payer_grants: Vec<pressure_core::Grant>,
    /// The tracer and the request's server span, when tracing is on and
    /// the trace is sampled: the parent of its upstream call's span and of
    /// its LLM events' (`crate::otel`). One pointer wide: tracing off
    /// costs the context nothing but a `None`.
    pub(crate) trace: Option<Box<RequestTrace>>,
}

/// A traced request's tracer and server span.
#[derive(Debug, Clone)]
pub(crate) struct RequestTrace {
    /// Records the request's spans.
    pub(crate) tracer: pressure_core::trace::Tracer,
    /// The server span: the parent of the request's other spans.
    pub(crate) span: pressure_core::trace::SpanContext,
}

/// The context of `req`, when the route layer routed it.
pub(crate) fn context<B>(req: &Request<B>) -> Option<&RequestContext> {
    req.extensions().get::<RequestContext>()
}

/// [`context`], to complete it.
pub(crate) fn context_mut<B>(req: &mut Request<B>) -> Option<&mut RequestContext> {
    req.extensions_mut().get_mut::<RequestContext>()
}

/// What the inner layers charged `req` so far, when its plan records it.
pub(crate) fn charged<B>(req: &Request<B>) -> Option<&Charged> {
    context(req).and_then(|c| c.charged.as_ref())
}
