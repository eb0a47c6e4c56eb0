//! [`PreAuth`]: resolve, acquire, refuse or pass on.

use super::layer::PreAuthLayer;
use crate::layers::{deny, slot_of};
use crate::metrics::Layer;
use axum::body::Body;
use futures::future::BoxFuture;
use http::{Request, Response, StatusCode};
use pressure_core::{AcquireOptions, Acquisition};
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
            match handle.try_acquire(AcquireOptions::default()).await {
                Ok(Acquisition::Granted(permit)) => {
                    layer.metrics.allowed(Layer::PreAuth);
                    slot_of(&mut req).push(permit);
                    inner.call(req).await
                }
                Ok(Acquisition::Denied(d)) => Ok(deny::too_many_requests(
                    handle.id(),
                    handle.limits(),
                    &d,
                    Layer::PreAuth,
                    None,
                    &layer.metrics,
                )),
                Err(e) => {
                    tracing::warn!(resource = handle.id(), error = %e, "limiter failed");
                    Ok(deny::json_error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "limiter_unavailable",
                        "the limiter could not decide; try again",
                    ))
                }
            }
        })
    }
}
