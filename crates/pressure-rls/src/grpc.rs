//! The gRPC surface: [`RateLimitServiceServer`], a tonic service for
//! `envoy.service.ratelimit.v3.RateLimitService`, and [`RateLimitClient`],
//! a small tonic client (tests, benches, `grpcurl`-less checks). Written
//! by hand in the shape `tonic-build` generates, so no `protoc` is needed.

use crate::proto::{Code, RateLimitRequest, RateLimitResponse, SERVICE_NAME, SHOULD_RATE_LIMIT_PATH};
use crate::service::RateLimiter;
use pressure_core::trace::{Span, SpanContext, SpanKind, Tracer, TRACEPARENT, TRACESTATE};
use pressure_core::Backend;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use tonic::codegen::{http, BoxFuture, Service, StdError};

/// The tonic service answering `ShouldRateLimit` with a [`RateLimiter`].
#[derive(Debug)]
pub struct RateLimitServiceServer<B: Backend> {
    inner: Arc<RateLimiter<B>>,
    tracer: Option<Tracer>,
}

impl<B: Backend> Clone for RateLimitServiceServer<B> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            tracer: self.tracer.clone(),
        }
    }
}

impl<B: Backend> RateLimitServiceServer<B> {
    /// Serves `limiter`.
    pub fn new(limiter: Arc<RateLimiter<B>>) -> Self {
        Self {
            inner: limiter,
            tracer: None,
        }
    }

    /// Records a server span per call with `tracer` (W3C `traceparent`
    /// from the call's metadata); `None`: no tracing.
    #[must_use]
    pub fn traced(mut self, tracer: Option<Tracer>) -> Self {
        self.tracer = tracer;
        self
    }
}

impl<B: Backend> tonic::server::NamedService for RateLimitServiceServer<B> {
    const NAME: &'static str = SERVICE_NAME;
}

struct ShouldRateLimit<B: Backend>(Arc<RateLimiter<B>>, Option<Tracer>);

/// The server span of one `ShouldRateLimit` call (RPC semantic
/// conventions), under the caller's `traceparent`.
fn call_span(tracer: &Tracer, request: &tonic::Request<RateLimitRequest>) -> Option<Span> {
    let md = request.metadata();
    let parent = md
        .get(TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|tp| SpanContext::parse(tp, md.get(TRACESTATE).and_then(|v| v.to_str().ok())));
    let mut span = tracer.start(
        parent.as_ref(),
        SHOULD_RATE_LIMIT_PATH.trim_start_matches('/'),
        SpanKind::Server,
    )?;
    span.set("rpc.system", "grpc");
    span.set("rpc.service", SERVICE_NAME);
    span.set("rpc.method", "ShouldRateLimit");
    span.set("pressure.domain", request.get_ref().domain.clone());
    span.set(
        "pressure.descriptors",
        u64::try_from(request.get_ref().descriptors.len()).unwrap_or(u64::MAX),
    );
    Some(span)
}

impl<B: Backend> tonic::server::UnaryService<RateLimitRequest> for ShouldRateLimit<B> {
    type Response = RateLimitResponse;
    type Future = BoxFuture<tonic::Response<RateLimitResponse>, tonic::Status>;

    fn call(&mut self, request: tonic::Request<RateLimitRequest>) -> Self::Future {
        let limiter = Arc::clone(&self.0);
        let span = self.1.as_ref().and_then(|t| call_span(t, &request));
        Box::pin(async move {
            let answer = limiter.should_rate_limit(request.get_ref()).await;
            if let Some(mut span) = span {
                let result = match &answer {
                    Ok(a) if a.overall_code() == Code::OverLimit => "refused",
                    Ok(_) => "admitted",
                    Err(_) => "error",
                };
                span.event(
                    "pressure.admission",
                    vec![("pressure.result".into(), result.into())],
                );
                if let Err(e) = &answer {
                    span.fail(e.to_string());
                }
            }
            Ok(tonic::Response::new(answer?))
        })
    }
}

impl<B, Body> Service<http::Request<Body>> for RateLimitServiceServer<B>
where
    B: Backend,
    Body: tonic::codegen::Body + Send + 'static,
    Body::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        if req.uri().path() == SHOULD_RATE_LIMIT_PATH {
            let method = ShouldRateLimit(Arc::clone(&self.inner), self.tracer.clone());
            return Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
                Ok(grpc.unary(method, req).await)
            });
        }
        Box::pin(async move {
            let mut response = http::Response::new(tonic::body::Body::default());
            let headers = response.headers_mut();
            headers.insert(
                tonic::Status::GRPC_STATUS,
                http::HeaderValue::from(tonic::Code::Unimplemented as i32),
            );
            headers.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/grpc"),
            );
            Ok(response)
        })
    }
}

/// A client of any Envoy rate limit service (this one or upstream's).
#[derive(Debug, Clone)]
pub struct RateLimitClient {
    inner: tonic::client::Grpc<tonic::transport::Channel>,
}

impl RateLimitClient {
    /// Connects to `url` (`http://127.0.0.1:8089`).
    pub async fn connect(url: impl Into<String>) -> Result<Self, tonic::transport::Error> {
        let channel = tonic::transport::Endpoint::from_shared(url.into())?
            .connect()
            .await?;
        Ok(Self::new(channel))
    }

    /// A client on an open channel.
    pub fn new(channel: tonic::transport::Channel) -> Self {
        Self {
            inner: tonic::client::Grpc::new(channel),
        }
    }

    /// Calls `ShouldRateLimit`.
    pub async fn should_rate_limit(
        &mut self,
        request: RateLimitRequest,
    ) -> Result<RateLimitResponse, tonic::Status> {
        self.should_rate_limit_with(request, tonic::metadata::MetadataMap::new())
            .await
    }

    /// Calls `ShouldRateLimit` with `metadata` (a `traceparent`, say).
    pub async fn should_rate_limit_with(
        &mut self,
        request: RateLimitRequest,
        metadata: tonic::metadata::MetadataMap,
    ) -> Result<RateLimitResponse, tonic::Status> {
        self.inner
            .ready()
            .await
            .map_err(|e| tonic::Status::unavailable(format!("service was not ready: {e}")))?;
        let path = http::uri::PathAndQuery::from_static(SHOULD_RATE_LIMIT_PATH);
        let mut req = tonic::Request::new(request);
        *req.metadata_mut() = metadata;
        req.extensions_mut()
            .insert(tonic::codegen::GrpcMethod::new(SERVICE_NAME, "ShouldRateLimit"));
        let codec = tonic_prost::ProstCodec::default();
        self.inner
            .unary(req, path, codec)
            .await
            .map(tonic::Response::into_inner)
    }
}
