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
use crate::metrics::traffic::{Series, NONE};
use crate::metrics::GatewayMetrics;
use crate::permits::PermitSlot;
use crate::plan::{Endpoint, Route};
use crate::proxy::Upstream;
use crate::rejection::UpstreamFailure;
use crate::server::InFlight;
use crate::watched_body::{FrameWatch, Seen, WatchedBody};
use axum::body::Body;
use http::Response;
use std::sync::Arc;
use tokio::time::Instant;

/// The status recorded for a request whose client went away before the
/// response head (nginx's convention).
pub(crate) const CLIENT_CLOSED: u16 = 499;

/// The `route` and `upstream` labels of a routed request (see
/// [`crate::metrics::traffic`]).
pub(crate) fn labels(route: &Route) -> (&str, &str) {
    let name = route.resource.as_ref().map_or(NONE, |r| r.id());
    let upstream = match route.endpoint {
        Endpoint::ChatCompletions | Endpoint::Embeddings | Endpoint::Models | Endpoint::Model => "llm",
        Endpoint::Proxy => route.upstream.as_ref().map_or(NONE, |u| u.name()),
    };
    (name, upstream)
}

/// One request being observed (module docs).
pub(crate) struct Observation {
    metrics: Arc<GatewayMetrics>,
    series: Arc<Series>,
    /// The upstream of a proxied request: a response body that fails is
    /// its failure (`reset`: it died after the head).
    upstream: Option<Arc<Upstream>>,
    start: Instant,
    status: u16,
    bytes: u64,
    access: Option<Box<AccessRecord>>,
    /// The request's permits, given back when the observation settles.
    slot: Option<PermitSlot>,
    /// The request counted in flight on its connection until then.
    in_flight: Option<InFlight>,
}

impl Observation {
    /// Starts observing a request that arrived at `start`, counted under
    /// (`route`, `upstream`).
    pub(crate) fn start(
        metrics: &Arc<GatewayMetrics>,
        start: Instant,
        route: &str,
        upstream: &str,
        access: Option<Box<AccessRecord>>,
    ) -> Self {
        let traffic = metrics.traffic();
        traffic.started();
        Self {
            series: traffic.series(route, upstream),
            upstream: None,
            metrics: Arc::clone(metrics),
            start,
            status: CLIENT_CLOSED,
            bytes: 0,
            access,
            slot: None,
            in_flight: None,
        }
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
    pub(crate) fn respond(mut self, resp: Response<Body>) -> Response<Body> {
        self.status = resp.status().as_u16();
        let (mut parts, body) = resp.into_parts();
        if let Some(id) = self.access.as_ref().and_then(|a| a.request_id_header()) {
            parts.headers.insert(REQUEST_ID, id);
        }
        Response::from_parts(parts, Body::new(WatchedBody::new(body, Some(self))))
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
        // `in_flight` ends after this, with the fields.
    }
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
