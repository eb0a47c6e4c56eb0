//! [`Answer`]: the innermost service of the gateway's stack, which answers
//! a routed request with the endpoint its route names — each of the
//! gateway's own LLM endpoints by its handler (`crate::openai`: chat
//! completions, embeddings, models; `crate::agents`: Messages,
//! `count_tokens`, Responses), a proxied route by its upstream (`404` when
//! the route has none). To the proxy it states what it needs
//! ([`ForwardRequest`]) and maps the proxy's failures to refusals: the one
//! place they are. It sits above both handler modules, so neither imports
//! the other for dispatch; the router decided which endpoint a request is,
//! once ([`crate::plan::Endpoint`]).

use crate::agents;
use crate::http::proxy::{BodyPolicy, ForwardRequest, ProxyClient, ProxyFailure};
use crate::layers::{context, Outcome};
use crate::openai;
use crate::plan::Endpoint;
use crate::rejection::Rejection;
use axum::body::Body;
use axum::extract::ConnectInfo;
use futures::future::BoxFuture;
use http::{Request, Response};
use pressure_core::trace::{SpanKind, TRACEPARENT};
use std::net::SocketAddr;
use std::task::{Context, Poll};

/// Answers each routed request: the LLM endpoints of its plan by their
/// handlers, every other one by its route's upstream. Cheap to clone
/// (clones share the upstream connection pool).
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    proxy: ProxyClient,
}

impl Answer {
    /// Forwards proxied routes with `proxy`.
    pub(crate) fn new(proxy: ProxyClient) -> Self {
        Self { proxy }
    }

    /// `req`, routed to an upstream (or `404`), forwarded by the proxy.
    fn forward(&self, mut req: Request<Body>) -> BoxFuture<'static, Outcome> {
        let Some(routed) = context(&req) else {
            return Box::pin(async {
                Err(Rejection::Internal("a request reached the proxy unrouted".into()))
            });
        };
        let Some(upstream) = routed.route.upstream.clone() else {
            let path = req.uri().path().to_owned();
            return Box::pin(async move { Err(Rejection::NotFound(path)) });
        };
        // Tracing off, or the trace not sampled: no span, no header.
        let traced = routed.trace.is_some();
        let peer = routed
            .peer
            .or_else(|| req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0));
        let total = routed.plan.upstream_timeout();
        let timer = routed.timer.clone();
        let body = BodyPolicy::Whole {
            max_bytes: routed.plan.max_body_bytes(),
            idle: routed.plan.body_read_timeout(),
        };
        let span = if traced { upstream_span(&mut req) } else { None };
        let fwd = ForwardRequest {
            upstream,
            peer,
            total,
            timer,
            body,
            request: req,
        };
        let proxy = self.proxy.clone();
        match span {
            None => Box::pin(async move { proxy.forward(fwd).await.map_err(Rejection::from) }),
            Some(mut span) => Box::pin(async move {
                let answer = proxy.forward(fwd).await;
                match &answer {
                    Ok(resp) => {
                        let status = resp.status().as_u16();
                        span.set("http.response.status_code", status);
                        if status >= 400 {
                            span.fail("upstream answered an error");
                        }
                    }
                    Err(failure) => {
                        span.set("error.type", failure_kind(failure));
                        span.fail("upstream call failed");
                    }
                }
                span.end();
                answer.map_err(Rejection::from)
            }),
        }
    }
}

/// The client span of the upstream call of `req` (tracing on, the request
/// sampled), its `traceparent` (and the client's `tracestate`) set on the
/// request for the upstream. A request whose trace is not recorded keeps
/// the client's headers as they came.
#[cold]
#[inline(never)]
fn upstream_span(req: &mut Request<Body>) -> Option<pressure_core::trace::Span> {
    let routed = context(req)?;
    let trace = routed.trace.as_ref()?;
    let (tracer, parent) = (&trace.tracer, &trace.span);
    let upstream = routed.route.upstream.as_ref()?.name().to_owned();
    let mut span = tracer.start(Some(parent), req.method().as_str().to_owned(), SpanKind::Client)?;
    span.set("http.request.method", req.method().as_str().to_owned());
    span.set("pressure.upstream", upstream);
    span.set("url.path", req.uri().path().to_owned());
    let tp = span.context().traceparent();
    if let Ok(v) = http::HeaderValue::try_from(tp) {
        req.headers_mut().insert(TRACEPARENT, v);
    }
    Some(span)
}

/// `error.type` of a failed upstream call.
fn failure_kind(failure: &ProxyFailure) -> &'static str {
    match failure {
        ProxyFailure::BadTarget => "bad_target",
        ProxyFailure::BodyTooLarge { .. } => "body_too_large",
        ProxyFailure::BodyMalformed => "body_malformed",
        ProxyFailure::BodyTimeout { .. } => "body_timeout",
        ProxyFailure::Unavailable { .. } => "unavailable",
        ProxyFailure::Failed { .. } => "failed",
        ProxyFailure::Timeout { .. } => "timeout",
    }
}

impl tower::Service<Request<Body>> for Answer {
    type Response = Response<Body>;
    type Error = Rejection;
    type Future = BoxFuture<'static, Outcome>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Rejection>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let served = context(&req).and_then(|r| Some((r.route.endpoint, r.plan.llm().cloned()?)));
        match served {
            Some((Endpoint::ChatCompletions, llm)) => {
                Box::pin(async move { openai::chat_completions(&llm, req).await })
            }
            Some((Endpoint::Embeddings, llm)) => Box::pin(async move { openai::embeddings(&llm, req).await }),
            Some((Endpoint::Messages, llm)) => {
                Box::pin(async move { agents::serve::<agents::Messages>(&llm, req).await })
            }
            Some((Endpoint::CountTokens, llm)) => {
                Box::pin(async move { agents::count_tokens(&llm, req).await })
            }
            Some((Endpoint::Responses, llm)) => {
                Box::pin(async move { agents::serve::<agents::Responses>(&llm, req).await })
            }
            Some((Endpoint::Models, llm)) => {
                let answer = openai::list_models(&llm, req.extensions().get());
                Box::pin(async move { answer })
            }
            Some((Endpoint::Model, llm)) => {
                let answer = openai::retrieve_model(&llm, req.uri().path(), req.extensions().get());
                Box::pin(async move { answer })
            }
            _ => self.forward(req),
        }
    }
}

impl From<ProxyFailure> for Rejection {
    fn from(failure: ProxyFailure) -> Self {
        match failure {
            ProxyFailure::BadTarget => Rejection::BadRequest("the request target cannot be forwarded".into()),
            ProxyFailure::BodyTooLarge { max } => Rejection::PayloadTooLarge { max },
            ProxyFailure::BodyMalformed => {
                Rejection::BadRequest("the request body is malformed or was cut short".into())
            }
            ProxyFailure::BodyTimeout { whole_ms } => Rejection::RequestTimeout { whole_ms },
            ProxyFailure::Unavailable {
                upstream,
                reason,
                kind,
            } => Rejection::UpstreamUnavailable {
                upstream,
                reason,
                kind,
            },
            ProxyFailure::Failed {
                upstream,
                reason,
                kind,
            } => Rejection::UpstreamError {
                upstream,
                reason,
                kind,
            },
            ProxyFailure::Timeout { upstream, after_ms } => Rejection::UpstreamTimeout { upstream, after_ms },
        }
    }
}
