//! The life of one request as the traffic metrics and the access log see
//! it: an [`Observation`] starts when the route layer receives the request
//! (the in-flight gauge goes up), learns the status at the response head,
//! counts the response body's bytes as they stream, and is settled exactly
//! once when the body ends, fails or is dropped — or when the response
//! future is dropped before a head existed (status `499`).
//!
//! Settling counts the request in its (route, upstream) series and the
//! latency histogram, lowers the gauge and, when on, writes the access log
//! line. A proxied response body that fails (the upstream died after its
//! head) also counts as an upstream failure of kind `reset`. The series was looked up once, at routing; nothing here allocates
//! unless the access log is on.

use crate::access_log::{AccessRecord, REQUEST_ID};
use crate::http::proxy::Upstream;
use crate::http::server::InFlight;
use crate::http::stamp::Stamp;
use crate::http::watched_body::{FrameWatch, Seen, WatchedBody};
use crate::metrics::traffic::{Series, NONE};
use crate::metrics::GatewayMetrics;
use crate::permits::PermitSlot;
use crate::plan::{Endpoint, Route};
use crate::rejection::UpstreamFailure;
use axum::body::Body;
use http::Response;
use pressure_core::trace::Span;
use std::sync::Arc;

/// The status recorded for a request whose client went away before the
/// response head (nginx's convention).
pub(crate) const CLIENT_CLOSED: u16 = 499;

/// The `route` and `upstream` labels of a routed request (see
/// [`crate::metrics::traffic`]).
pub(crate) fn labels(route: &Route) -> (&str, &str) {
    let name = route.resource.as_ref().map_or(NONE, |r| r.id());
    let upstream = match route.endpoint {
        Endpoint::Proxy => route.upstream.as_ref().map_or(NONE, |u| u.name()),
        _ => "llm",
    };
    (name, upstream)
}

/// The series of a connection's last request, by its labels: the next
/// request of the same route (most, on a keep-alive connection) finds its
/// series without the table's two hashed lookups. Keyed by the labels'
/// text, so a reloaded plan (new label strings) cannot be mistaken for the
/// old one; a series, once made, is never replaced in the table.
#[derive(Clone, Default)]
pub(crate) struct LastSeries(Option<(Box<str>, Box<str>, Arc<Series>)>);

impl LastSeries {
    /// The series of (`route`, `upstream`).
    pub(crate) fn get(&mut self, metrics: &GatewayMetrics, route: &str, upstream: &str) -> Arc<Series> {
        if let Some((r, u, series)) = &self.0 {
            if **r == *route && **u == *upstream {
                return Arc::clone(series);
            }
        }
        let series = metrics.traffic().series(route, upstream);
        self.0 = Some((route.into(), upstream.into(), Arc::clone(&series)));
        series
    }
}

impl std::fmt::Debug for LastSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let labels = self.0.as_ref().map(|(r, u, _)| (r, u));
        f.debug_tuple("LastSeries").field(&labels).finish()
    }
}

/// One request being observed (module docs).
pub(crate) struct Observation {
    metrics: Arc<GatewayMetrics>,
    series: Arc<Series>,
    /// The upstream of a proxied request: a response body that fails is
    /// its failure (`reset`: it died after the head).
    upstream: Option<Arc<Upstream>>,
    start: Stamp,
    status: u16,
    bytes: u64,
    access: Option<Box<AccessRecord>>,
    /// The request's permits, given back when the observation settles.
    slot: Option<PermitSlot>,
    /// The request counted in flight on its connection until then.
    in_flight: Option<InFlight>,
    /// The request's server span (tracing on, sampled): ended when the
    /// observation settles, with the status.
    span: Option<Box<Span>>,
}

impl Observation {
    /// Starts observing a request that arrived at `start`, counted in
    /// `series` (see [`LastSeries`]).
    pub(crate) fn start(
        metrics: &Arc<GatewayMetrics>,
        start: Stamp,
        series: Arc<Series>,
        access: Option<Box<AccessRecord>>,
    ) -> Self {
        metrics.traffic().started();
        Self {
            series,
            upstream: None,
            metrics: Arc::clone(metrics),
            start,
            status: CLIENT_CLOSED,
            bytes: 0,
            access,
            slot: None,
            in_flight: None,
            span: None,
        }
    }

    /// Ends `span` when the observation settles.
    pub(crate) fn traced(&mut self, span: Box<Span>) {
        self.span = Some(span);
    }

    /// The server span, to record on it.
    pub(crate) fn span_mut(&mut self) -> Option<&mut Span> {
        self.span.as_deref_mut()
    }

    /// Gives `slot`'s permits back and ends `in_flight` when the
    /// observation settles: one body wrapper where there would be three.
    pub(crate) fn holding(mut self, slot: Option<PermitSlot>, in_flight: Option<InFlight>) -> Self {
        self.slot = slot;
        self.in_flight = in_flight;
        self
    }

    /// Blames a failing response body on `upstream` (a proxied request).
    pub(crate) fn proxied(mut self, upstream: Option<Arc<Upstream>>) -> Self {
        self.upstream = upstream;
        self
    }

    /// The response head is here: notes its status, echoes the request id
    /// (access log on), and hands the observation to the body.
    pub(crate) fn respond(mut self, mut resp: Response<Body>) -> Response<Body> {
        self.at_head(&mut resp);
        resp.map(|body| Body::new(WatchedBody::new(body, Some(self))))
    }

    /// [`respond`](Self::respond) for a response whose body is whole at its
    /// head (a refusal the gateway rendered): settled now, with the body's
    /// length as the bytes sent, and the body left unwrapped. Nothing
    /// that settling does waits for a few hundred bytes to be written
    /// (the permits given back, the log line, the in-flight count), and
    /// under a flood of refusals the wrapper would be a box and a poll more
    /// per request.
    pub(crate) fn respond_whole(mut self, resp: Response<Body>) -> Response<Body> {
        let Some(len) = http_body::Body::size_hint(resp.body()).exact() else {
            return self.respond(resp);
        };
        let mut resp = resp;
        self.at_head(&mut resp);
        self.bytes = len;
        resp
    }

    /// Notes the head's status and echoes the request id (access log on).
    fn at_head(&mut self, resp: &mut Response<Body>) {
        self.status = resp.status().as_u16();
        if let Some(id) = self.access.as_ref().and_then(|a| a.request_id_header()) {
            resp.headers_mut().insert(REQUEST_ID, id);
        }
    }
}

impl Drop for Observation {
    fn drop(&mut self) {
        let took = self.start.elapsed();
        self.series.observe(self.status, took);
        self.metrics.traffic().finished();
        if let Some(a) = &self.access {
            a.emit(self.status, took, self.bytes);
        }
        if let Some(slot) = self.slot.take() {
            slot.release_all();
        }
        if let Some(span) = self.span.take() {
            end_server_span(*span, self.status);
        }
        // `in_flight` ends after this, with the fields.
    }
}

/// Ends a request's server span with its `status` (kept out of line: a
/// request not traced never comes here).
#[cold]
#[inline(never)]
fn end_server_span(mut span: Span, status: u16) {
    span.set("http.response.status_code", status);
    // Server spans: a 5xx is an error, a 4xx the client's.
    if status >= 500 {
        span.fail("server error");
    }
    span.end();
}

/// A response body counts its bytes in its observation and settles it when
/// it ends, fails or is dropped.
impl FrameWatch for Option<Observation> {
    fn seen(&mut self, what: Seen<'_>) {
        match what {
            Seen::Frame(frame) => {
                if let (Some(data), Some(obs)) = (frame.data_ref(), self.as_mut()) {
                    obs.bytes += data.len() as u64;
                }
            }
            Seen::Error => {
                if let Some(obs) = self.take() {
                    if let Some(u) = &obs.upstream {
                        obs.metrics
                            .traffic()
                            .upstream_failure(u.name(), UpstreamFailure::Reset.as_str());
                    }
                }
            }
            Seen::End => drop(self.take()),
        }
    }
}
