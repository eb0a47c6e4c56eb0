//! [`PreAuth`]: resolve, acquire, refuse or pass on.

use super::layer::PreAuthLayer;
use crate::layers::charge;
use crate::metrics::Layer;
use axum::body::Body;
use futures::future::BoxFuture;
use http::{Request, Response};
use std::convert::Infallible;
use std::task::{Context, Poll};

/// See [`super::PreAuthLayer`].
#[derive(Clone)]
pub struct PreAuth<S> {
    pub(crate) inner: S,
    pub(crate) layer: PreAuthLayer,
}

impl<S> tower::Service<Request<Body>> for PreAuth<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        // The ready inner service serves this call; a fresh clone waits for
        // the next poll_ready.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let layer = self.layer.clone();
        Box::pin(async move {
            let Some(handle) = layer.routes.resolve(req.uri().path()).cloned() else {
                return inner.call(req).await;
            };
            match charge(&handle, &mut req, Layer::PreAuth, None, &layer.metrics).await {
                Ok(()) => inner.call(req).await,
                Err(refusal) => Ok(refusal),
            }
        })
    }
}
