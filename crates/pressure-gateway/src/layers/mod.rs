//! The tower layers of the request path, outermost first:
//!
//! 1. [`route`]: normalises the path, checks the request head, reads the
//!    current [`Plan`] and routes the request once; renders every
//!    [`Rejection`] the inner layers return, in the route's dialect; observes
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
//!
//! Every layer under [`route`] is a `tower::Service` whose error is a
//! [`Rejection`]: a refusal is a value, counted, logged and rendered in one
//! place.

pub(crate) mod body_limit;
pub(crate) mod context;
pub(crate) mod forward;
pub(crate) mod observe;
pub(crate) mod pre_auth;
pub(crate) mod ratelimit_headers;
pub(crate) mod release;
pub(crate) mod route;
pub(crate) mod tenant;

use crate::backend::AnyBackend;
pub use crate::http::server::BodyService;
use crate::metrics::{GatewayMetrics, Layer};
use crate::rejection::{RateLimited, Rejection};
use axum::body::Body;
pub(crate) use context::{charged, context, context_mut, RequestContext};
use futures::future::BoxFuture;
use http::{Request, Response};
use pressure_core::{AcquireOptions, Acquisition, Permit, ResourceHandle};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// What the inner layers answer: a response, or a refusal to render.
pub type Outcome = Result<Response<Body>, Rejection>;

/// A service under the route layer: it answers a response or a
/// [`Rejection`].
pub trait RejectingService: BodyService<Rejection> {}

impl<S: BodyService<Rejection>> RejectingService for S {}

/// What one layer under the route layer does with a request, given the
/// service under it: each layer is a `Step`, and [`Stepped`] makes it a
/// `tower::Service` (the plumbing every layer would otherwise repeat).
pub trait Step: Clone + Send + Sync + 'static {
    /// Handles `req`; `next` is the ready service under this layer (use
    /// `take_ready` to call it after an `.await`).
    fn step<S: RejectingService>(&self, next: &mut S, req: Request<Body>) -> StepFuture<S::Future>;
}

pin_project_lite::pin_project! {
    /// What a [`Step`] answers. A step that only looks at the request (a
    /// route without a limit, a request without credentials) hands on the
    /// inner service's own future, and a refusal decided at once is a
    /// value: neither allocates, so a request pays a boxed future only in
    /// the layers that await something for it.
    pub struct StepFuture<F> {
        #[pin]
        state: StepState<F>,
    }
}

pin_project_lite::pin_project! {
    #[project = StepProj]
    enum StepState<F> {
        // The inner service's future, as it is.
        Next { #[pin] fut: F },
        // An outcome known without waiting (taken when polled).
        Ready { outcome: Option<Outcome> },
        // A step that awaits (a charge, a response to wrap).
        Boxed { fut: BoxFuture<'static, Outcome> },
    }
}

impl<F> StepFuture<F> {
    /// The inner service's future.
    pub fn next(fut: F) -> Self {
        Self {
            state: StepState::Next { fut },
        }
    }

    /// An outcome known now (an answer served in place; a refusal is
    /// [`refuse`](Self::refuse)).
    pub fn ready(outcome: Outcome) -> Self {
        Self {
            state: StepState::Ready {
                outcome: Some(outcome),
            },
        }
    }

    /// `req` refused at once: it goes no further, and its extension map
    /// is kept for the next request (`layers/spare.rs`).
    pub fn refuse(mut req: Request<Body>, rejection: Rejection) -> Self {
        crate::http::spare::give_back(std::mem::take(req.extensions_mut()));
        Self::ready(Err(rejection))
    }

    /// A step that awaits.
    pub fn boxed(fut: impl Future<Output = Outcome> + Send + 'static) -> Self {
        Self {
            state: StepState::Boxed { fut: Box::pin(fut) },
        }
    }
}

impl<F: Future<Output = Outcome>> Future for StepFuture<F> {
    type Output = Outcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        match self.project().state.project() {
            StepProj::Next { fut } => fut.poll(cx),
            StepProj::Ready { outcome } => {
                Poll::Ready(outcome.take().expect("StepFuture polled after it answered"))
            }
            StepProj::Boxed { fut } => fut.as_mut().poll(cx),
        }
    }
}

/// A layer's [`Step`] over the service under it: the service a layer of
/// the request path makes (`tower::Layer::Service`).
#[derive(Debug, Clone)]
pub struct Stepped<L, S> {
    step: L,
    next: S,
}

impl<L: Step, S: RejectingService> tower::Service<Request<Body>> for Stepped<L, S> {
    type Response = Response<Body>;
    type Error = Rejection;
    type Future = StepFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Rejection>> {
        self.next.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        self.step.step(&mut self.next, req)
    }
}

/// `tower::Layer` for a [`Step`]: its service is [`Stepped`].
macro_rules! step_layer {
    ($layer:ty) => {
        impl<S> tower::Layer<S> for $layer {
            type Service = $crate::layers::Stepped<$layer, S>;

            fn layer(&self, next: S) -> Self::Service {
                $crate::layers::Stepped::new(self.clone(), next)
            }
        }
    };
}
pub(crate) use step_layer;

impl<L, S> Stepped<L, S> {
    pub(crate) fn new(step: L, next: S) -> Self {
        Self { step, next }
    }
}

/// The ready inner service, for the call at hand; a fresh clone takes its
/// place and waits for the next `poll_ready` (tower's pattern for services
/// that call their inner one after an `.await`).
pub(crate) fn take_ready<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    std::mem::replace(inner, clone)
}

/// How long a client is told to wait when the limiter failed outright.
const LIMITER_RETRY: Duration = Duration::from_secs(1);

/// Charges one request to `handle` for `layer`: on a grant the permit joins
/// the request's slot; a denial is a 429, an outage (or a limiter failure)
/// a 503 `limiter_unavailable`.
pub(crate) async fn charge(
    handle: &ResourceHandle<AnyBackend>,
    req: &mut Request<Body>,
    layer: Layer,
    namespace_id: Option<&str>,
    metrics: &GatewayMetrics,
) -> Result<(), Rejection> {
    let permit = acquire(handle, req, layer, namespace_id, metrics).await?;
    hold(req, handle, permit);
    Ok(())
}

/// [`charge`] without holding the permit yet: for a caller that charges
/// several resources all or nothing, and gives this grant back (refund,
/// then drop) when a later one refuses.
pub(crate) async fn acquire(
    handle: &ResourceHandle<AnyBackend>,
    req: &mut Request<Body>,
    layer: Layer,
    namespace_id: Option<&str>,
    metrics: &GatewayMetrics,
) -> Result<Permit<AnyBackend>, Rejection> {
    let answer = handle.try_acquire(options_of(req)).await;
    settle(handle, req, layer, namespace_id, metrics, answer)
}

/// [`acquire`] when the backend answers at once (in-process state), `None`
/// when it must be awaited: a layer that gets its answer here needs no
/// future of its own for the request.
pub(crate) fn acquire_if_ready(
    handle: &ResourceHandle<AnyBackend>,
    req: &Request<Body>,
    layer: Layer,
    metrics: &GatewayMetrics,
) -> Option<Result<Permit<AnyBackend>, Rejection>> {
    let answer = handle.try_acquire_now_if_local(&options_of(req))?;
    Some(settle(handle, req, layer, None, metrics, answer))
}

/// The acquisition options of a request: no concurrency lease when its
/// context says so.
fn options_of(req: &Request<Body>) -> AcquireOptions {
    match context(req) {
        Some(c) if !c.leases => AcquireOptions::default().without_lease(),
        _ => AcquireOptions::default(),
    }
}

/// A grant counted, or the refusal an answer of `handle` makes.
fn settle(
    handle: &ResourceHandle<AnyBackend>,
    req: &Request<Body>,
    layer: Layer,
    namespace_id: Option<&str>,
    metrics: &GatewayMetrics,
    answer: Result<Acquisition<AnyBackend>, pressure_core::Error>,
) -> Result<Permit<AnyBackend>, Rejection> {
    match answer {
        Ok(Acquisition::Granted(permit)) => {
            metrics.allowed(layer);
            Ok(permit)
        }
        Ok(Acquisition::Denied(d)) if d.is_unavailable() => Err(Rejection::LimiterUnavailable {
            resource: handle.id().to_owned(),
            layer,
            retry_after: d.wait.max(LIMITER_RETRY),
            reason: "the limiter store is unavailable".into(),
        }),
        Ok(Acquisition::Denied(d)) => {
            // A spent calendar budget says so; the request's deadline is
            // the gateway's upstream timeout.
            let deadline = context(req).map_or(Duration::ZERO, |r| r.plan.upstream_timeout());
            let limits = handle.limits();
            let r =
                RateLimited::new(handle.id(), limits, &d, layer, namespace_id).with_budget(limits, deadline);
            Err(Rejection::RateLimited(Box::new(r)))
        }
        Err(e) => Err(Rejection::LimiterUnavailable {
            resource: handle.id().to_owned(),
            layer,
            retry_after: LIMITER_RETRY,
            reason: e.to_string(),
        }),
    }
}

/// Holds `permit` (granted on `handle`) until the request ends: in its
/// slot, and recorded as charged.
pub(crate) fn hold(req: &mut Request<Body>, handle: &ResourceHandle<AnyBackend>, permit: Permit<AnyBackend>) {
    let Some(ctx) = context(req) else {
        // No route layer: nothing holds permits past this call.
        return;
    };
    ctx.slot.push(permit);
    if let Some(c) = &ctx.charged {
        c.charged(handle);
    }
}
