//! The plumbing every layer under the route layer shares: a layer is a
//! [`Step`] over the service under it, [`Stepped`] makes it a
//! `tower::Service`, and [`StepFuture`] answers without a boxed future
//! unless the step awaits something.

use crate::http::server::BodyService;
use crate::rejection::Rejection;
use axum::body::Body;
use futures::future::BoxFuture;
use http::{Request, Response};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

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
