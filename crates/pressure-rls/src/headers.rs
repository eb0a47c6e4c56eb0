//! IETF `RateLimit` / `RateLimit-Policy` headers
//! (draft-ietf-httpapi-ratelimit-headers) for `response_headers_to_add`, in
//! the same text as the gateway's:
//!
//! ```text
//! RateLimit-Policy: "requestsPerSecond";q=5;w=1
//! RateLimit: "requestsPerSecond";r=3;t=1
//! ```
//!
//! Of every counted descriptor of a request, the tightest quota (the
//! smallest remaining share; ties: the fewest units left) is stated. An
//! answer over the limit also carries `Retry-After` (whole seconds, rounded
//! up): Envoy copies these headers into its 429.

use crate::proto::HeaderValue;
use std::time::Duration;

/// `RateLimit-Policy`.
pub(crate) const POLICY: &str = "ratelimit-policy";
/// `RateLimit`.
pub(crate) const RATELIMIT: &str = "ratelimit";
/// `Retry-After`.
pub(crate) const RETRY_AFTER: &str = "retry-after";

/// One descriptor's quota as the headers state it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeaderQuota {
    /// The policy name: the pressure dimension (`requestsPerSecond`).
    pub(crate) name: &'static str,
    /// `q`: units per window.
    pub(crate) quota: u64,
    /// `w`: the window, seconds.
    pub(crate) window_secs: u64,
    /// `r`: units left now.
    pub(crate) remaining: u64,
    /// `t`: seconds until the quota is whole again (or, refused, until the
    /// demand fits).
    pub(crate) reset_secs: u64,
}

impl HeaderQuota {
    /// Whether `self` leaves less room than `other`.
    pub(crate) fn tighter_than(&self, other: &HeaderQuota) -> bool {
        let a = u128::from(self.remaining) * u128::from(other.quota.max(1));
        let b = u128::from(other.remaining) * u128::from(self.quota.max(1));
        a < b || (a == b && self.remaining < other.remaining)
    }
}

/// Whole seconds of `d`, rounded up.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// The headers of the tightest of `quotas`, plus `Retry-After` when
/// `retry_after` is set (an answer over the limit).
pub(crate) fn render(quotas: &[HeaderQuota], retry_after: Option<Duration>) -> Vec<HeaderValue> {
    let mut out = Vec::with_capacity(3);
    let mut best: Option<&HeaderQuota> = None;
    for q in quotas {
        if best.is_none_or(|b| q.tighter_than(b)) {
            best = Some(q);
        }
    }
    if let Some(q) = best {
        out.push(HeaderValue {
            key: POLICY.into(),
            value: format!("\"{}\";q={};w={}", q.name, q.quota, q.window_secs),
        });
        out.push(HeaderValue {
            key: RATELIMIT.into(),
            value: format!("\"{}\";r={};t={}", q.name, q.remaining, q.reset_secs),
        });
    }
    if let Some(wait) = retry_after {
        out.push(HeaderValue {
            key: RETRY_AFTER.into(),
            value: ceil_secs(wait).max(1).to_string(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tightest_quota_in_the_gateway_format() {
        let a = HeaderQuota {
            name: "requestsPerSecond",
            quota: 5,
            window_secs: 1,
            remaining: 3,
            reset_secs: 1,
        };
        let b = HeaderQuota {
            name: "requestsPerMinute",
            quota: 100,
            window_secs: 60,
            remaining: 10,
            reset_secs: 60,
        };
        let h = render(&[a, b], None);
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].value, "\"requestsPerMinute\";q=100;w=60");
        assert_eq!(h[1].value, "\"requestsPerMinute\";r=10;t=60");
        let h = render(&[a], Some(Duration::from_millis(1_200)));
        assert_eq!((h[2].key.as_str(), h[2].value.as_str()), ("retry-after", "2"));
        assert!(render(&[], None).is_empty());
    }
}
