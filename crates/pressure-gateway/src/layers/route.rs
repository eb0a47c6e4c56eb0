//! The outermost layer: one look at the request head, one plan, one route.
//!
//! * The head: two `Authorization` headers (the first would be verified,
//!   an upstream might read the last), two `Host` headers, or none on
//!   HTTP/1.1 are `400`.
//! * The path is normalised ([`crate::path`]) and the request continues with
//!   the normalised path, so the limits, the route and the upstream all see
//!   the same one.
//! * The current [`Plan`] is read once and the request routed once; both go
//!   into the request's extensions ([`RequestContext`]).
//! * A [`Rejection`] from any inner layer is counted, logged and rendered
//!   in the route's dialect.
//! * Every request is observed ([`super::observe`]): traffic metrics, and
//!   the access log line when on (the access log can also be forced on by
//!   [`RouteLayer::force_access_log`], for `pressure gateway --access-log`);
//!   successful responses get `RateLimit` headers when the plan asks for
//!   them ([`super::ratelimit_headers`]).

use super::observe::{labels, LastSeries, Observation};
use super::{ratelimit_headers, Outcome, RequestContext};
use crate::access_log::AccessRecord;
use crate::charged::Charged;
use crate::http::server::ConnLink;
use crate::metrics::traffic::NONE;
use crate::metrics::GatewayMetrics;
use crate::path::normalize;
use crate::permits::PermitSlot;
use crate::plan::Endpoint;
use crate::plan::PlanCell;
use crate::rejection::{Dialect, Rejection};
use axum::body::Body;
use futures::future::BoxFuture;
use http::uri::PathAndQuery;
use http::{header, Request, Response, Uri, Version};
use pressure_core::trace::{Span, SpanContext, SpanKind, Tracer, TRACEPARENT, TRACESTATE};
use std::borrow::Cow;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

/// Routes requests with the current plan of `plan`.
#[derive(Debug, Clone)]
pub struct RouteLayer {
    plan: PlanCell,
    metrics: Arc<GatewayMetrics>,
    force_access_log: bool,
    force_rate_limit_headers: bool,
    leases: bool,
    tracer: Option<Tracer>,
}

impl RouteLayer {
    /// Routes with `plan`, counting refusals in `metrics`.
    pub fn new(plan: PlanCell, metrics: Arc<GatewayMetrics>) -> Self {
        Self {
            plan,
            metrics,
            force_access_log: false,
            force_rate_limit_headers: false,
            leases: true,
            tracer: None,
        }
    }

    /// Records a server span per request with `tracer` (`crate::otel`);
    /// `None`: tracing off, and the request path does nothing of it.
    #[must_use]
    pub(crate) fn tracer(mut self, tracer: Option<Tracer>) -> Self {
        self.tracer = tracer;
        self
    }

    /// Charges no concurrency lease for the requests it routes (forward
    /// auth: a subrequest can never give a slot back); rate and token
    /// limits are charged as usual.
    #[must_use]
    pub(crate) fn without_leases(mut self) -> Self {
        self.leases = false;
        self
    }

    /// Writes the access log whatever the plan says when `on`.
    #[must_use]
    pub fn force_access_log(mut self, on: bool) -> Self {
        self.force_access_log = on;
        self
    }

    /// Adds `RateLimit` headers to successful answers whatever
    /// `pressure.rateLimitHeaders` says when `on` (forward auth: the proxy
    /// in front passes them on).
    #[must_use]
    pub fn force_rate_limit_headers(mut self, on: bool) -> Self {
        self.force_rate_limit_headers = on;
        self
    }
}

impl<S> tower::Layer<S> for RouteLayer {
    type Service = RouteService<S>;

    fn layer(&self, inner: S) -> RouteService<S> {
        RouteService {
            inner,
            plan: Arc::clone(&self.plan),
            metrics: Arc::clone(&self.metrics),
            force_access_log: self.force_access_log,
            force_rate_limit_headers: self.force_rate_limit_headers,
            leases: self.leases,
            tracer: self.tracer.clone(),
            conn: None,
            last_slot: None,
            timer: None,
            series: LastSeries::default(),
        }
    }
}

/// See [`RouteLayer`].
#[derive(Debug, Clone)]
pub struct RouteService<S> {
    inner: S,
    plan: PlanCell,
    metrics: Arc<GatewayMetrics>,
    force_access_log: bool,
    force_rate_limit_headers: bool,
    leases: bool,
    tracer: Option<Tracer>,
    /// The client connection this copy serves, when the server attached it
    /// (`crate::http::server::Attach`): the peer goes into the [`RequestContext`], and the
    /// request's in-flight count rides in its observation, so the
    /// connection wraps nothing of its own.
    conn: Option<ConnLink>,
    /// The permit slot of this connection's last request (attached only).
    last_slot: Option<PermitSlot>,
    /// The attached connection's upstream timer.
    timer: Option<crate::http::proxy::ConnTimer>,
    /// The traffic series of the last request.
    series: LastSeries,
}

impl<S> RouteService<S> {
    /// Serves the one connection `link` from now on.
    pub(crate) fn attach(&mut self, link: ConnLink) {
        self.conn = Some(link);
        self.timer = Some(crate::http::proxy::ConnTimer::default());
    }

    /// A permit slot for the next request: on an attached connection the
    /// last request's, once nothing else holds it (its response is done:
    /// the usual case on a keep-alive connection), else a new one.
    fn next_slot(&mut self) -> PermitSlot {
        if self.conn.is_none() {
            return PermitSlot::default();
        }
        if let Some(slot) = self.last_slot.as_mut().and_then(PermitSlot::reclaim) {
            return slot;
        }
        let slot = PermitSlot::default();
        self.last_slot = Some(slot.clone());
        slot
    }
}

/// Refuses request heads that would let a client smuggle a second value
/// past a check.
fn check_head<B>(req: &Request<B>) -> Result<(), Rejection> {
    let h = req.headers();
    // A second value is possible only when some name comes twice (rare).
    if h.len() != h.keys_len() {
        if h.get_all(header::AUTHORIZATION).iter().nth(1).is_some() {
            return Err(Rejection::BadRequest("more than one Authorization header".into()));
        }
        if h.get_all(header::HOST).iter().nth(1).is_some() {
            return Err(Rejection::BadRequest("more than one Host header".into()));
        }
    }
    if req.version() == Version::HTTP_11 && !h.contains_key(header::HOST) {
        return Err(Rejection::BadRequest(
            "HTTP/1.1 requests must carry a Host header".into(),
        ));
    }
    Ok(())
}

/// The server span of `req` (HTTP semantic conventions), under the
/// client's `traceparent` when it sent a valid one; `None` when the trace
/// is not sampled. `route` is the route's resource (`pressure.route`).
#[cold]
#[inline(never)]
pub(crate) fn server_span(
    tracer: &Tracer,
    req: &Request<Body>,
    route: &str,
    peer: Option<std::net::SocketAddr>,
) -> Option<Box<Span>> {
    let h = req.headers();
    let parent = h.get(TRACEPARENT).and_then(|v| v.to_str().ok()).and_then(|tp| {
        let state = h.get(TRACESTATE).and_then(|v| v.to_str().ok());
        SpanContext::parse(tp, state)
    });
    let method = req.method().as_str().to_owned();
    let mut span = tracer.start(parent.as_ref(), method.clone(), SpanKind::Server)?;
    if route != NONE {
        span.rename(format!("{method} {route}"));
        span.set("pressure.route", route.to_owned());
    }
    span.set("http.request.method", method);
    span.set("url.path", req.uri().path().to_owned());
    if let Some(q) = req.uri().query() {
        span.set("url.query", q.to_owned());
    }
    let scheme = req.uri().scheme_str().unwrap_or("http").to_owned();
    span.set("url.scheme", scheme);
    let version = match req.version() {
        Version::HTTP_10 => "1.0",
        Version::HTTP_2 => "2",
        Version::HTTP_3 => "3",
        _ => "1.1",
    };
    span.set("network.protocol.version", version);
    if let Some(host) = h.get(header::HOST).and_then(|v| v.to_str().ok()) {
        span.set("server.address", host.to_owned());
    }
    if let Some(ua) = h.get(header::USER_AGENT).and_then(|v| v.to_str().ok()) {
        span.set("user_agent.original", ua.to_owned());
    }
    if let Some(peer) = peer {
        span.set("client.address", peer.ip().to_string());
    }
    Some(Box::new(span))
}

/// Replaces the path of `uri` (keeping its query).
fn with_path(uri: &Uri, path: &str) -> Option<Uri> {
    let pq = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(PathAndQuery::try_from(pq).ok()?);
    Uri::from_parts(parts).ok()
}

/// Normalises the request's path in place.
fn normalize_path<B>(req: &mut Request<B>) -> Result<(), Rejection> {
    let normal = match normalize(req.uri().path()) {
        Ok(Cow::Borrowed(_)) => return Ok(()),
        Ok(Cow::Owned(p)) => p,
        Err(e) => return Err(Rejection::BadRequest(e.to_string().into())),
    };
    let uri =
        with_path(req.uri(), &normal).ok_or(Rejection::BadRequest("the request target is invalid".into()))?;
    *req.uri_mut() = uri;
    Ok(())
}

impl<S> tower::Service<Request<Body>> for RouteService<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Rejection> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = RouteFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        match self.inner.poll_ready(cx) {
            Poll::Ready(_) => Poll::Ready(Ok(())),
            Poll::Pending => Poll::Pending,
        }
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        let arrived = crate::http::stamp::Stamp::now();
        let in_flight = self.conn.as_ref().map(ConnLink::in_flight);
        let metrics = Arc::clone(&self.metrics);
        let plan = self.plan.load_full();
        let access_log = self.force_access_log || plan.access_log();
        let mut access = access_log.then(|| {
            let id = crate::access_log::request_id(req.headers());
            if let Ok(v) = http::HeaderValue::from_str(&id) {
                // The upstream sees the id the log line carries.
                req.headers_mut().insert(crate::access_log::REQUEST_ID, v);
            }
            Box::new(AccessRecord::new(id, req.method().clone(), req.uri().path()))
        });
        if let Err(rejection) = check_head(&req).and_then(|()| normalize_path(&mut req)) {
            rejection.record(&metrics, plan.denial_lines());
            let series = self.series.get(&metrics, NONE, NONE);
            let obs = Observation::start(&metrics, arrived, series, access).holding(None, in_flight);
            return RouteFuture {
                state: RouteState::Refused {
                    rejection: Some(rejection),
                },
                obs: Some(obs),
                metrics,
                headers: None,
                concurrency: false,
                denial_lines: 0,
                dialect: Dialect::Gateway,
            };
        }
        let route = plan.router().route(req.method(), req.uri().path());
        let dialect = dialect_of(route.endpoint);
        let (name, upstream) = labels(&route);
        let rate_limit_headers = self.force_rate_limit_headers || plan.rate_limit_headers();
        let charged = (access_log || rate_limit_headers).then(Charged::default);
        if let (Some(a), Some(c)) = (access.as_mut(), &charged) {
            a.set_path(req.uri().path());
            a.routed(name, upstream, c.clone());
        }
        let proxied = match route.endpoint {
            Endpoint::Proxy => route.upstream.clone(),
            _ => None,
        };
        // The observation settles with the response body: it then gives
        // the request's permits back (the release layer leaves them to it)
        // and ends its in-flight count.
        let slot = self.next_slot();
        let series = self.series.get(&metrics, name, upstream);
        let span = self
            .tracer
            .as_ref()
            .and_then(|t| server_span(t, &req, name, self.conn.as_ref().map(|c| c.peer)));
        let mut obs = Observation::start(&metrics, arrived, series, access)
            .proxied(proxied)
            .holding(Some(slot.clone()), in_flight);
        // Tracing off (or not sampled): nothing more than this branch.
        let trace = match (span, &self.tracer) {
            (Some(span), Some(tracer)) => {
                let trace = Box::new(super::context::RequestTrace {
                    tracer: tracer.clone(),
                    span: span.context().clone(),
                });
                obs.traced(span);
                Some(trace)
            }
            _ => None,
        };
        let headers = charged.clone().filter(|_| rate_limit_headers);
        let concurrency = self.leases;
        let denial_lines = plan.denial_lines();
        crate::http::spare::lend(req.extensions_mut());
        req.extensions_mut().insert(RequestContext {
            plan,
            route,
            slot,
            peer: self.conn.as_ref().map(|c| c.peer),
            timer: self.timer.clone(),
            charged,
            leases: self.leases,
            payer: None,
            payer_grants: Vec::new(),
            trace,
        });
        let fut = self.inner.call(req);
        RouteFuture {
            state: RouteState::Inner { fut },
            obs: Some(obs),
            metrics,
            headers,
            concurrency,
            denial_lines,
            dialect,
        }
    }
}

pin_project_lite::pin_project! {
    /// The answer of [`RouteService`]: the inner layers' outcome, refusals
    /// rendered in the route's dialect, observed. A plain value around the
    /// inner future (boxed only while `RateLimit` headers are looked up).
    pub struct RouteFuture<F> {
        #[pin]
        state: RouteState<F>,
        obs: Option<Observation>,
        metrics: Arc<GatewayMetrics>,
        // The request's charges, when `RateLimit` headers are on.
        headers: Option<Charged>,
        concurrency: bool,
        denial_lines: u32,
        dialect: Dialect,
    }
}

pin_project_lite::pin_project! {
    #[project = RouteProj]
    enum RouteState<F> {
        // Refused by the route layer itself (rendered when polled).
        Refused { rejection: Option<Rejection> },
        // The inner layers at work.
        Inner { #[pin] fut: F },
        // The response, its `RateLimit` headers being added.
        Annotating { fut: BoxFuture<'static, Response<Body>> },
        // Answered.
        Done { done: () },
    }
}

impl<F: Future<Output = Outcome>> Future for RouteFuture<F> {
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        // The response, and whether its body is whole at its head (a
        // refusal, rendered here).
        let (resp, whole) = loop {
            match this.state.as_mut().project() {
                RouteProj::Refused { rejection } => {
                    let rejection = rejection.take().expect("RouteFuture polled after it answered");
                    break (rejection.render(*this.dialect), true);
                }
                RouteProj::Inner { fut } => {
                    let reply: Outcome = ready!(fut.poll(cx));
                    if reply.is_ok() {
                        if let Some(span) = this.obs.as_mut().and_then(Observation::span_mut) {
                            span.event(
                                "pressure.admission",
                                vec![("pressure.result".into(), "admitted".into())],
                            );
                        }
                    }
                    match reply {
                        Ok(resp) => match this.headers.take() {
                            Some(c) => {
                                let concurrency = *this.concurrency;
                                let annotating = Box::pin(async move {
                                    let mut resp = resp;
                                    ratelimit_headers::annotate(&mut resp, &c, concurrency).await;
                                    resp
                                });
                                this.state.set(RouteState::Annotating { fut: annotating });
                            }
                            None => break (resp, false),
                        },
                        Err(rejection) => {
                            rejection.record(this.metrics, *this.denial_lines);
                            if let Some(span) = this.obs.as_mut().and_then(Observation::span_mut) {
                                rejection.trace(span);
                            }
                            break (rejection.render(*this.dialect), true);
                        }
                    }
                }
                RouteProj::Annotating { fut } => break (ready!(fut.as_mut().poll(cx)), false),
                RouteProj::Done { .. } => panic!("RouteFuture polled after it answered"),
            }
        };
        // The inner future goes now, as it would at the end of an `.await`.
        this.state.set(RouteState::Done { done: () });
        let obs = this.obs.take().expect("RouteFuture polled after it answered");
        Poll::Ready(Ok(if whole {
            obs.respond_whole(resp)
        } else {
            obs.respond(resp)
        }))
    }
}

/// The error shape of a route's endpoint: Anthropic's on the Messages
/// endpoints, Responses' on `/v1/responses`, OpenAI's on the gateway's
/// other LLM endpoints, the gateway's elsewhere.
pub(crate) fn dialect_of(endpoint: Endpoint) -> Dialect {
    match endpoint {
        Endpoint::Proxy => Dialect::Gateway,
        Endpoint::ChatCompletions | Endpoint::Embeddings | Endpoint::Models | Endpoint::Model => {
            Dialect::OpenAi
        }
        Endpoint::Responses => Dialect::Responses,
        Endpoint::Messages | Endpoint::CountTokens => Dialect::Anthropic,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(version: Version, headers: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::builder().uri("/x").version(version);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).expect("request")
    }

    #[test]
    fn hostile_heads_are_refused() {
        assert!(check_head(&req(Version::HTTP_11, &[("host", "a")])).is_ok());
        assert!(check_head(&req(Version::HTTP_11, &[])).is_err());
        assert!(check_head(&req(Version::HTTP_10, &[])).is_ok());
        assert!(check_head(&req(Version::HTTP_2, &[])).is_ok());
        assert!(check_head(&req(Version::HTTP_11, &[("host", "a"), ("host", "b")])).is_err());
        assert!(check_head(&req(
            Version::HTTP_11,
            &[
                ("host", "a"),
                ("authorization", "Bearer x"),
                ("authorization", "Bearer y")
            ]
        ))
        .is_err());
        // A name twice that is neither takes the long way, to the same
        // answers.
        let twice = [("accept", "a"), ("accept", "b")];
        assert!(check_head(&req(Version::HTTP_11, &[twice[0], twice[1], ("host", "a")])).is_ok());
        assert!(check_head(&req(Version::HTTP_11, &twice)).is_err());
        assert!(check_head(&req(Version::HTTP_10, &twice)).is_ok());
    }

    #[test]
    fn the_query_survives_normalisation() {
        let mut r = Request::builder()
            .uri("/a//b/../c?x=1&y=%2F")
            .body(())
            .expect("request");
        normalize_path(&mut r).expect("normal");
        assert_eq!(r.uri().path(), "/a/c");
        assert_eq!(r.uri().query(), Some("x=1&y=%2F"));
    }
}
