//! Traffic metrics: every request the proxy listener answered, by route,
//! upstream and status class, its latency per route, the requests in flight
//! now, and upstream failures by cause.
//!
//! | series | type | labels |
//! |---|---|---|
//! | `pressure_gateway_requests_total` | counter | `route`, `upstream`, `status` (`1xx`…`5xx`) |
//! | `pressure_gateway_request_duration_seconds` | histogram | `route` |
//! | `pressure_gateway_in_flight_requests` | gauge | |
//! | `pressure_gateway_upstream_failures_total` | counter | `upstream`, `kind` |
//!
//! Label values are bounded by the config, never by the traffic: `route` is
//! the id of the resource the route charges before auth (the matching
//! `perRoute` resource, else the upstream's `gateway:service:<name>`), or
//! `none`; `upstream` is the upstream's name, `llm` for the gateway's own
//! OpenAI endpoint, or `none` when no upstream serves the path. Responses
//! the gateway writes itself (429, 401, 400, 413, 502, …) are counted under
//! the route and upstream the request was routed to (`none`/`none` for a
//! head refused before routing). A request whose client went away before
//! the response head counts as status `499` (class `4xx`), nginx's
//! convention. Upstream failure kinds: `connect_refused`,
//! `connect_timeout`, `connect_error`, `timeout` (no head in time), `reset`
//! (closed before a complete head, or while its body streamed),
//! `bad_response` (not HTTP), `error`.
//!
//! The duration runs from the request's arrival at the route layer to the
//! end (or drop) of its response body, like nginx's `$request_time`.
//!
//! Hot path: finding a request's series is a lock-free load of the table
//! ([`ArcSwap`]) and two hash lookups by `&str`; counting is a few relaxed
//! atomic adds. Nothing is allocated, except the first time a (route,
//! upstream) pair is seen.

use super::text::{header, sample};
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Upper bounds of the latency histogram buckets, seconds (Prometheus'
/// default buckets; `+Inf` is implied).
pub(crate) const BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// The bucket bounds in microseconds, for the hot path's integer compare.
const BUCKETS_US: [u64; 11] = [
    5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// The status class labels, by `status / 100 - 1`.
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The label value for "no route" / "no upstream".
pub(crate) const NONE: &str = "none";

/// The counters of one (route, upstream) pair.
#[derive(Debug, Default)]
pub struct Series {
    by_class: [AtomicU64; 5],
    /// Non-cumulative: `buckets[i]` counts durations in `(b[i-1], b[i]]`;
    /// the last slot is `+Inf`.
    buckets: [AtomicU64; BUCKETS_US.len() + 1],
    sum_us: AtomicU64,
    count: AtomicU64,
}

impl Series {
    /// Counts one finished request with `status` that took `took`.
    #[inline]
    pub fn observe(&self, status: u16, took: Duration) {
        let class = usize::from((status / 100).clamp(1, 5) - 1);
        self.by_class[class].fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let slot = BUCKETS_US
            .iter()
            .position(|&b| us <= b)
            .unwrap_or(BUCKETS_US.len());
        self.buckets[slot].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }
}

/// Route → upstream → series.
/// Route → upstream → series. Looked up on every request: hashed with
/// ahash (the keys are names from the config, and SipHash cost more than
/// the rest of the lookup).
type Table = HashMap<Box<str>, HashMap<Box<str>, Arc<Series>, ahash::RandomState>, ahash::RandomState>;

/// The traffic counters (module docs).
#[derive(Debug, Default)]
pub struct TrafficMetrics {
    table: ArcSwap<Table>,
    /// Serializes the (rare) insertions of new pairs.
    grow: Mutex<()>,
    in_flight: AtomicI64,
    /// Upstream → kind → count (the failure path only).
    failures: Mutex<BTreeMap<Box<str>, BTreeMap<&'static str, u64>>>,
}

impl TrafficMetrics {
    /// The series of (`route`, `upstream`), created on first use.
    #[inline]
    pub fn series(&self, route: &str, upstream: &str) -> Arc<Series> {
        if let Some(s) = self.table.load().get(route).and_then(|u| u.get(upstream)) {
            return Arc::clone(s);
        }
        self.insert(route, upstream)
    }

    #[cold]
    fn insert(&self, route: &str, upstream: &str) -> Arc<Series> {
        let _one = self.grow.lock();
        let current = self.table.load_full();
        if let Some(s) = current.get(route).and_then(|u| u.get(upstream)) {
            return Arc::clone(s);
        }
        let mut next: Table = (*current).clone();
        let s = Arc::new(Series::default());
        next.entry(route.into())
            .or_default()
            .insert(upstream.into(), Arc::clone(&s));
        self.table.store(Arc::new(next));
        s
    }

    /// A request arrived (the in-flight gauge goes up until [`Self::finished`]).
    #[inline]
    pub fn started(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// A request started with [`Self::started`] is done.
    #[inline]
    pub fn finished(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> i64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Counts a failed upstream exchange of `upstream` by `kind` (see
    /// [`crate::rejection::UpstreamFailure`]).
    pub fn upstream_failure(&self, upstream: &str, kind: &'static str) {
        let mut f = self.failures.lock();
        let kinds = match f.get_mut(upstream) {
            Some(k) => k,
            None => f.entry(upstream.into()).or_default(),
        };
        *kinds.entry(kind).or_default() += 1;
    }

    /// Appends the traffic families to `out`.
    pub fn encode(&self, out: &mut String) -> fmt::Result {
        let table = self.table.load_full();
        let mut pairs: Vec<(&str, &str, &Series)> = table
            .iter()
            .flat_map(|(r, ups)| ups.iter().map(move |(u, s)| (&**r, &**u, &**s)))
            .collect();
        pairs.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));

        let name = "pressure_gateway_requests_total";
        header(
            out,
            name,
            "counter",
            "Requests answered by the proxy listener, by route, upstream and status class (the gateway's own refusals included)",
        )?;
        for (route, upstream, s) in &pairs {
            for (i, class) in CLASSES.iter().enumerate() {
                let n = s.by_class[i].load(Ordering::Relaxed);
                if n > 0 {
                    sample(
                        out,
                        name,
                        &[("route", route), ("upstream", upstream), ("status", class)],
                        n,
                    )?;
                }
            }
        }

        let name = "pressure_gateway_request_duration_seconds";
        header(
            out,
            name,
            "histogram",
            "Time from the request's arrival to the end of its response body, by route",
        )?;
        let mut by_route: BTreeMap<&str, ([u64; BUCKETS_US.len() + 1], u64, u64)> = BTreeMap::new();
        for (route, _, s) in &pairs {
            let agg = by_route.entry(route).or_insert(([0; BUCKETS_US.len() + 1], 0, 0));
            for (i, b) in s.buckets.iter().enumerate() {
                agg.0[i] += b.load(Ordering::Relaxed);
            }
            agg.1 += s.sum_us.load(Ordering::Relaxed);
            agg.2 += s.count.load(Ordering::Relaxed);
        }
        let bucket = format!("{name}_bucket");
        let mut le = String::with_capacity(8);
        for (route, (buckets, sum_us, count)) in by_route {
            let mut cumulative = 0u64;
            for (i, n) in buckets.iter().enumerate() {
                cumulative += n;
                le.clear();
                match BUCKETS.get(i) {
                    Some(b) => write!(le, "{b}")?,
                    None => le.push_str("+Inf"),
                }
                sample(out, &bucket, &[("route", route), ("le", &le)], cumulative)?;
            }
            // Microseconds as seconds, exactly (no float rounding of the sum).
            let sum = format!("{}.{:06}", sum_us / 1_000_000, sum_us % 1_000_000);
            sample(out, &format!("{name}_sum"), &[("route", route)], sum)?;
            sample(out, &format!("{name}_count"), &[("route", route)], count)?;
        }

        let name = "pressure_gateway_in_flight_requests";
        header(
            out,
            name,
            "gauge",
            "Requests on the proxy listener whose response has not ended yet",
        )?;
        sample(out, name, &[], self.in_flight().max(0))?;

        let failures = self.failures.lock().clone();
        if !failures.is_empty() {
            let name = "pressure_gateway_upstream_failures_total";
            header(
                out,
                name,
                "counter",
                "Failed upstream exchanges by upstream and cause (connect_refused, connect_timeout, connect_error, timeout, reset, bad_response, error)",
            )?;
            for (upstream, kinds) in failures {
                for (kind, n) in kinds {
                    sample(out, name, &[("upstream", &upstream), ("kind", kind)], n)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_classes_buckets_and_sums() {
        let t = TrafficMetrics::default();
        let s = t.series("gateway:route:a", "api");
        s.observe(200, Duration::from_millis(3));
        s.observe(204, Duration::from_millis(30));
        s.observe(429, Duration::from_micros(1));
        t.series("gateway:route:a", "other")
            .observe(503, Duration::from_secs(20));
        assert!(Arc::ptr_eq(&s, &t.series("gateway:route:a", "api")));
        t.upstream_failure("api", "connect_refused");
        t.upstream_failure("api", "connect_refused");
        let mut out = String::new();
        t.encode(&mut out).expect("encode");
        let has = |line: &str| assert!(out.contains(&format!("{line}\n")), "no {line} in\n{out}");
        has(r#"pressure_gateway_requests_total{route="gateway:route:a",upstream="api",status="2xx"} 2"#);
        has(r#"pressure_gateway_requests_total{route="gateway:route:a",upstream="api",status="4xx"} 1"#);
        has(r#"pressure_gateway_requests_total{route="gateway:route:a",upstream="other",status="5xx"} 1"#);
        has(r#"pressure_gateway_request_duration_seconds_bucket{route="gateway:route:a",le="0.005"} 2"#);
        has(r#"pressure_gateway_request_duration_seconds_bucket{route="gateway:route:a",le="0.05"} 3"#);
        has(r#"pressure_gateway_request_duration_seconds_bucket{route="gateway:route:a",le="10"} 3"#);
        has(r#"pressure_gateway_request_duration_seconds_bucket{route="gateway:route:a",le="+Inf"} 4"#);
        has(r#"pressure_gateway_request_duration_seconds_sum{route="gateway:route:a"} 20.033001"#);
        has(r#"pressure_gateway_request_duration_seconds_count{route="gateway:route:a"} 4"#);
        has("# TYPE pressure_gateway_request_duration_seconds histogram");
        has(r#"pressure_gateway_upstream_failures_total{upstream="api",kind="connect_refused"} 2"#);
        has("pressure_gateway_in_flight_requests 0");
        assert!(!out.contains("status=\"3xx\""), "{out}");
    }

    #[test]
    fn in_flight_goes_up_and_down() {
        let t = TrafficMetrics::default();
        t.started();
        t.started();
        t.finished();
        assert_eq!(t.in_flight(), 1);
    }
}
