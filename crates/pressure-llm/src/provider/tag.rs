//! [`CallTag`]: who is calling, sent along with every provider call so that
//! the provider side (a proxy's logs, the chaos stand's mock) can tell the
//! attempts of one user request apart, like OpenAI's SDKs send
//! `x-stainless-retry-count`.

use http::header::{HeaderName, HeaderValue};

/// The header naming the event (one user request, shared by its retries
/// and fallbacks).
pub const REQUEST_ID_HEADER: &str = "x-pressure-request-id";
/// The header numbering the attempts of one event, from 1.
pub const ATTEMPT_HEADER: &str = "x-pressure-attempt";
/// The header marking a circuit breaker's half-open probe (`true`).
pub const PROBE_HEADER: &str = "x-pressure-probe";

// The names as constants: `from_static` at compile time, not per call.
const REQUEST_ID_NAME: HeaderName = HeaderName::from_static(REQUEST_ID_HEADER);
const ATTEMPT_NAME: HeaderName = HeaderName::from_static(ATTEMPT_HEADER);
const PROBE_NAME: HeaderName = HeaderName::from_static(PROBE_HEADER);

/// Identifies one provider call within its event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallTag {
    /// The event's id (visible ASCII; anything else is not sent).
    pub request_id: Option<String>,
    /// The attempt number within the event, from 1 (0: not sent).
    pub attempt: u32,
    /// Whether the call is a half-open breaker probe.
    pub probe: bool,
    /// The W3C `traceparent` naming the attempt's span (tracing on).
    pub traceparent: Option<String>,
}

impl CallTag {
    /// The headers to send: only those with a value.
    pub(crate) fn headers(&self) -> impl Iterator<Item = (HeaderName, HeaderValue)> + '_ {
        let id = self
            .request_id
            .as_deref()
            .and_then(|id| HeaderValue::from_str(id).ok())
            .map(|v| (REQUEST_ID_NAME, v));
        let attempt = (self.attempt > 0).then(|| (ATTEMPT_NAME, HeaderValue::from(self.attempt)));
        let probe = self.probe.then(|| (PROBE_NAME, HeaderValue::from_static("true")));
        let traceparent = self
            .traceparent
            .as_deref()
            .and_then(|tp| HeaderValue::from_str(tp).ok())
            .map(|v| (HeaderName::from_static("traceparent"), v));
        id.into_iter().chain(attempt).chain(probe).chain(traceparent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_set_fields_become_headers() {
        assert_eq!(CallTag::default().headers().count(), 0);
        let tag = CallTag {
            request_id: Some("req-1".into()),
            attempt: 2,
            probe: true,
            traceparent: None,
        };
        let h: Vec<_> = tag
            .headers()
            .map(|(k, v)| format!("{k}={}", v.to_str().unwrap()))
            .collect();
        assert_eq!(
            h,
            [
                "x-pressure-request-id=req-1",
                "x-pressure-attempt=2",
                "x-pressure-probe=true"
            ]
        );
        let bad = CallTag {
            request_id: Some("new\nline".into()),
            ..CallTag::default()
        };
        assert_eq!(
            bad.headers().count(),
            0,
            "a value that is not a header value is not sent"
        );
    }
}
