//! [`TenantService`]: authenticate, then charge the tenant.

use super::jwt::{bearer, AuthError};
use super::layer::TenantLayer;
use crate::layers::{charge, deny, limiter_unavailable};
use crate::metrics::Layer;
use crate::routes::tenant_resource;
use axum::body::Body;
use futures::future::BoxFuture;
use http::{HeaderValue, Request, Response, StatusCode};
use std::convert::Infallible;
use std::task::{Context, Poll};

/// See [`super::TenantLayer`].
#[derive(Clone)]
pub struct TenantService<S> {
    pub(crate) inner: S,
    pub(crate) layer: TenantLayer,
}

fn unauthorized(e: &AuthError) -> Response<Body> {
    let mut r = deny::json_error(StatusCode::UNAUTHORIZED, "unauthorized", &e.to_string());
    r.headers_mut()
        .insert(http::header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

impl<S> tower::Service<Request<Body>> for TenantService<S>
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
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let layer = self.layer.clone();
        Box::pin(async move {
            let Some(auth) = layer.auth.as_deref() else {
                return inner.call(req).await;
            };
            let tenant = match bearer(&req) {
                None if layer.required => {
                    layer.metrics.unauthorized(AuthError::Missing.reason());
                    return Ok(unauthorized(&AuthError::Missing));
                }
                None => return inner.call(req).await,
                Some(Err(e)) => {
                    layer.metrics.unauthorized(e.reason());
                    return Ok(unauthorized(&e));
                }
                Some(Ok(token)) => match auth.verify(token) {
                    Ok(t) => t,
                    Err(e) => {
                        layer.metrics.unauthorized(e.reason());
                        return Ok(unauthorized(&e));
                    }
                },
            };
            let resource = tenant_resource(&tenant.0);
            req.extensions_mut().insert(tenant.clone());
            let Some(template) = layer.template.as_ref() else {
                return inner.call(req).await;
            };
            let handle = match layer.broker.lazy_limit(&resource, template) {
                Ok(h) => h,
                Err(e) => {
                    tracing::warn!(resource, error = %e, "tenant registration failed");
                    return Ok(limiter_unavailable());
                }
            };
            match charge(&handle, &mut req, Layer::Tenant, Some(&tenant.0), &layer.metrics).await {
                Ok(()) => inner.call(req).await,
                Err(refusal) => Ok(refusal),
            }
        })
    }
}
