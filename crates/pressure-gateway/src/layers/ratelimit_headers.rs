//! Optional IETF `RateLimit` / `RateLimit-Policy` headers
//! (draft-ietf-httpapi-ratelimit-headers) on successful responses, in the
//! same shape the 429s carry:
//!
//! ```text
//! RateLimit-Policy: "requestsPerSecond";q=5;w=1
//! RateLimit: "requestsPerSecond";r=3;t=1
//! ```
//!
//! On with `gateway.pressure.rateLimitHeaders: true`; only responses below
//! 400 are annotated, and headers an upstream set itself are left alone.
//!
//! Which quota: of every dimension of every resource the request was charged
//! to (route or service, tenant), the *tightest* — the smallest remaining
//! share of its quota (ties: the fewest units left). Remaining and reset
//! are read after the grant with [`ResourceHandle::usage`] (one read of the
//! backend's state per charged resource: in memory a lock or an atomic load,
//! on Redis one round trip — why this is opt-in):
//!
//! * `window` dimensions: `r` = N − units counted in the last W, `t` = W
//!   (when every unit counted now has left the window at the latest), 0
//!   when nothing is counted;
//! * `gcra` dimensions: `r` = bucket size − units in the bucket, `t` = the
//!   seconds until the bucket is full again (units × W/N, rounded up);
//! * `maxConcurrentRequests`: `r` = slots free, `t` = 0, and no `w` in the
//!   policy (it is not a quota over time).

use crate::charged::Charged;
use axum::body::Body;
use http::{HeaderValue, Response};
use pressure_core::Usage;
use pressure_core::{Algorithm, Dimension, LimitSpec, ResourceHandle};

/// `RateLimit-Policy`.
pub(crate) const POLICY: &str = "ratelimit-policy";
/// `RateLimit`.
pub(crate) const RATELIMIT: &str = "ratelimit";

const NS: u64 = 1_000_000_000;

/// One dimension's quota as the headers state it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Quota {
    /// The dimension (its JSON name is the policy's name).
    pub dimension: Dimension,
    /// `q`: units per window (slots for concurrency).
    pub quota: u64,
    /// `w`: the window, seconds; 0 for concurrency (omitted).
    pub window_secs: u64,
    /// `r`: units left now.
    pub remaining: u64,
    /// `t`: seconds until the quota is whole again.
    pub reset_secs: u64,
}

impl Quota {
    /// Whether `self` leaves less room than `other`.
    fn tighter_than(&self, other: &Quota) -> bool {
        // remaining / quota < other.remaining / other.quota, without floats.
        let a = u128::from(self.remaining) * u128::from(other.quota.max(1));
        let b = u128::from(other.remaining) * u128::from(self.quota.max(1));
        a < b || (a == b && self.remaining < other.remaining)
    }
}

/// Every dimension of `spec` with `usage` as its state.
pub(crate) fn quotas(spec: &LimitSpec, usage: &Usage) -> Vec<Quota> {
    let mut out = Vec::with_capacity(spec.rates.len() + 1);
    for rate in &spec.rates {
        let used = usage
            .dimensions
            .iter()
            .find(|(d, _)| *d == rate.dimension)
            .map_or(0, |(_, u)| *u);
        let window_secs = rate.window_ns.div_ceil(NS);
        let (size, reset_secs) = match rate.algorithm {
            Algorithm::Window => (rate.limit, if used == 0 { 0 } else { window_secs }),
            Algorithm::Gcra => (rate.capacity, used.saturating_mul(rate.emission_ns).div_ceil(NS)),
        };
        out.push(Quota {
            dimension: rate.dimension,
            quota: rate.limit,
            window_secs,
            remaining: size.saturating_sub(used),
            reset_secs,
        });
    }
    if let Some(max) = spec.concurrency {
        out.push(Quota {
            dimension: Dimension::MaxConcurrentRequests,
            quota: max,
            window_secs: 0,
            remaining: max.saturating_sub(usage.leases),
            reset_secs: 0,
        });
    }
    out
}

/// The tightest quota of the resources in `charged`; resources whose usage
/// cannot be read are skipped.
async fn tightest(
    resources: &[ResourceHandle<crate::backend::AnyBackend>],
    concurrency: bool,
) -> Option<Quota> {
    let mut best: Option<Quota> = None;
    for handle in resources {
        let Ok(usage) = handle.usage().await else {
            continue;
        };
        for q in quotas(handle.spec(), &usage) {
            if !concurrency && q.dimension == Dimension::MaxConcurrentRequests {
                continue;
            }
            if best.as_ref().is_none_or(|b| q.tighter_than(b)) {
                best = Some(q);
            }
        }
    }
    best
}

/// The two header values of `q`.
pub(crate) fn header_values(q: &Quota) -> (String, String) {
    let name = q.dimension.as_str();
    let policy = if q.window_secs > 0 {
        format!("\"{name}\";q={};w={}", q.quota, q.window_secs)
    } else {
        format!("\"{name}\";q={}", q.quota)
    };
    (policy, format!("\"{name}\";r={};t={}", q.remaining, q.reset_secs))
}

/// Adds the headers to `resp` (module docs); `concurrency: false` leaves
/// out `maxConcurrentRequests` (a request that was not charged a slot,
/// such as a forward-auth decision).
pub(crate) async fn annotate(resp: &mut Response<Body>, charged: &Charged, concurrency: bool) {
    let status = resp.status();
    if status.is_client_error() || status.is_server_error() || resp.headers().contains_key(RATELIMIT) {
        return;
    }
    let resources = charged.resources();
    let Some(q) = tightest(&resources, concurrency).await else {
        return;
    };
    let (policy, limit) = header_values(&q);
    let h = resp.headers_mut();
    if let (Ok(p), Ok(l)) = (HeaderValue::from_str(&policy), HeaderValue::from_str(&limit)) {
        h.insert(POLICY, p);
        h.insert(RATELIMIT, l);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pressure_core::Limits;

    fn spec(l: Limits) -> LimitSpec {
        l.compile().expect("valid limits")
    }

    #[test]
    fn window_and_gcra_remaining_and_reset() {
        let s = spec(Limits::default().requests_per_second(5).requests_per_minute(100));
        let u = Usage {
            dimensions: vec![
                (Dimension::RequestsPerSecond, 2),
                (Dimension::RequestsPerMinute, 90),
            ],
            leases: 0,
            resets: Vec::new(),
        };
        let q = quotas(&s, &u);
        assert_eq!(q.len(), 2);
        assert_eq!((q[0].remaining, q[0].reset_secs, q[0].window_secs), (3, 1, 1));
        assert_eq!((q[1].remaining, q[1].reset_secs, q[1].window_secs), (10, 60, 60));
        // 10/100 left is tighter than 3/5.
        assert!(q[1].tighter_than(&q[0]));
        let (p, r) = header_values(&q[1]);
        assert_eq!(p, "\"requestsPerMinute\";q=100;w=60");
        assert_eq!(r, "\"requestsPerMinute\";r=10;t=60");

        let mut l = Limits::default()
            .requests_per_minute(60)
            .max_concurrent_requests(4);
        l.algorithm = Algorithm::Gcra;
        let s = spec(l);
        let u = Usage {
            dimensions: vec![(Dimension::RequestsPerMinute, 3)],
            leases: 3,
            resets: Vec::new(),
        };
        let q = quotas(&s, &u);
        // 3 units at one per second: full again in 3 s.
        assert_eq!((q[0].remaining, q[0].reset_secs), (57, 3));
        assert_eq!(q[1].dimension, Dimension::MaxConcurrentRequests);
        assert_eq!((q[1].remaining, q[1].window_secs), (1, 0));
        assert_eq!(header_values(&q[1]).0, "\"maxConcurrentRequests\";q=4");
    }
}
