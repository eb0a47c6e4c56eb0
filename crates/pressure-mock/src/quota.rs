//! The mock's own provider-style quota: per model, at most `requests`
//! requests and `tokens` tokens in any window of `windowMs`.
//!
//! # Scheme
//!
//! An exact sliding log per model: every admitted request is kept as
//! `(admitted at, tokens)` until it is `windowMs` old. A request is admitted
//! when, counting the entries still in the window, one more request stays
//! within `requests` and its tokens stay within `tokens` (a limit of 0 is
//! unlimited). So for every instant `t`, the requests admitted in
//! `(t - windowMs, t]` never exceed the limits — the guarantee holds for ANY
//! window, not only for aligned ones, and there is no burst at a window
//! boundary. A refused request is not logged (a 429 costs no quota).
//!
//! The wait of a refusal is exact: the time until enough of the oldest
//! entries leave the window for the request to fit. A request larger than
//! the whole token limit can never fit; it is refused with the full window
//! as its wait (OpenAI answers such a request 429 too).
//!
//! Time is passed in (milliseconds since the mock started), never read here,
//! so the arithmetic is tested without a clock.

use std::collections::{HashMap, VecDeque};

use crate::behaviour::RateLimit;

/// The quota figures of one model at one instant, as `x-ratelimit-*`
/// headers carry them. `None` for a dimension without a limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct QuotaHints {
    /// Requests per window, and the requests still free.
    pub(crate) requests: Option<Dimension>,
    /// Tokens per window, and the tokens still free.
    pub(crate) tokens: Option<Dimension>,
}

/// One dimension (requests or tokens) of [`QuotaHints`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dimension {
    /// The limit per window.
    pub(crate) limit: u64,
    /// What is left in the current window.
    pub(crate) remaining: u64,
    /// Milliseconds until capacity of this dimension returns: for an
    /// admitted request, until the oldest entry leaves the window; for a
    /// refused one, until this request would fit.
    pub(crate) reset_ms: u64,
}

/// The answer of [`QuotaBook::check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Admitted and logged.
    Admitted(QuotaHints),
    /// Refused; not logged.
    Refused {
        /// Which limit refused (`"requests"` wins when both do), as OpenAI's `type`.
        kind: &'static str,
        /// Milliseconds until the request would fit (at least 1).
        retry_after_ms: u64,
        /// The figures at refusal time.
        hints: QuotaHints,
    },
}

/// The sliding log of one model.
#[derive(Debug, Default)]
struct Log {
    /// `(admitted at ms, tokens)`, oldest first.
    entries: VecDeque<(u64, u64)>,
    /// Sum of the tokens of `entries`.
    tokens: u64,
}

impl Log {
    /// Drops the entries that are `window_ms` old or older at `now_ms`.
    fn purge(&mut self, window_ms: u64, now_ms: u64) {
        while let Some(&(at, tokens)) = self.entries.front() {
            if at.saturating_add(window_ms) > now_ms {
                break;
            }
            self.entries.pop_front();
            self.tokens -= tokens;
        }
    }

    /// Milliseconds until the entry at `index` leaves the window.
    fn expiry(&self, index: usize, window_ms: u64, now_ms: u64) -> u64 {
        self.entries
            .get(index)
            .map_or(0, |&(at, _)| at.saturating_add(window_ms).saturating_sub(now_ms))
    }
}

/// Sliding logs of every model under a quota.
#[derive(Debug, Default)]
pub(crate) struct QuotaBook {
    logs: HashMap<String, Log>,
}

impl QuotaBook {
    /// Forgets every admitted request (a new behaviour, a reset).
    pub(crate) fn clear(&mut self) {
        self.logs.clear();
    }

    /// Admits (and logs) or refuses a request of `model` costing `tokens`
    /// at `now_ms`, under `limit`.
    pub(crate) fn check(&mut self, model: &str, limit: RateLimit, tokens: u64, now_ms: u64) -> Verdict {
        let window = limit.window_ms.max(1);
        let log = match self.logs.get_mut(model) {
            Some(log) => log,
            None => self.logs.entry(model.to_owned()).or_default(),
        };
        log.purge(window, now_ms);
        let count = u64::try_from(log.entries.len()).unwrap_or(u64::MAX);

        // Requests: the (count - limit)-th oldest entry must leave first.
        let requests_wait = (limit.requests > 0 && count >= limit.requests).then(|| {
            let index = usize::try_from(count - limit.requests).unwrap_or(usize::MAX);
            log.expiry(index, window, now_ms).max(1)
        });
        // Tokens: drop the oldest entries until the rest plus this request fit.
        let tokens_wait = (limit.tokens > 0 && log.tokens.saturating_add(tokens) > limit.tokens).then(|| {
            if tokens > limit.tokens {
                return window;
            }
            let mut left = log.tokens;
            for (i, &(_, t)) in log.entries.iter().enumerate() {
                left -= t;
                if left + tokens <= limit.tokens {
                    return log.expiry(i, window, now_ms).max(1);
                }
            }
            window
        });

        let oldest = log.expiry(0, window, now_ms);
        let dims = |log: &Log, req_reset: u64, tok_reset: u64| QuotaHints {
            requests: (limit.requests > 0).then(|| Dimension {
                limit: limit.requests,
                remaining: limit
                    .requests
                    .saturating_sub(u64::try_from(log.entries.len()).unwrap_or(u64::MAX)),
                reset_ms: req_reset,
            }),
            tokens: (limit.tokens > 0).then(|| Dimension {
                limit: limit.tokens,
                remaining: limit.tokens.saturating_sub(log.tokens),
                reset_ms: tok_reset,
            }),
        };

        if requests_wait.is_some() || tokens_wait.is_some() {
            let kind = if requests_wait.is_some() {
                "requests"
            } else {
                "tokens"
            };
            let retry_after_ms = requests_wait.unwrap_or(0).max(tokens_wait.unwrap_or(0));
            let hints = dims(
                log,
                requests_wait.unwrap_or(oldest),
                tokens_wait.unwrap_or(oldest),
            );
            return Verdict::Refused {
                kind,
                retry_after_ms,
                hints,
            };
        }
        log.entries.push_back((now_ms, tokens));
        log.tokens += tokens;
        let reset = log.expiry(0, window, now_ms);
        Verdict::Admitted(dims(log, reset, reset))
    }
}

/// Formats milliseconds as OpenAI's Go-style duration: `250ms`, `1s`,
/// `1.5s`, `6m0s`, `1h2m3.5s`.
pub(crate) fn go_duration(ms: u64) -> String {
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    let h = ms / 3_600_000;
    let m = (ms / 60_000) % 60;
    let s_ms = ms % 60_000;
    let secs = if s_ms.is_multiple_of(1_000) {
        format!("{}", s_ms / 1_000)
    } else {
        let frac = format!("{:03}", s_ms % 1_000);
        format!("{}.{}", s_ms / 1_000, frac.trim_end_matches('0'))
    };
    if h > 0 {
        format!("{h}h{m}m{secs}s")
    } else if m > 0 {
        format!("{m}m{secs}s")
    } else {
        format!("{secs}s")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use pressure_llm::provider::ratelimit::parse_go_duration;

    use super::*;

    fn rl(requests: u64, tokens: u64, window_ms: u64) -> RateLimit {
        RateLimit {
            requests,
            tokens,
            window_ms,
        }
    }

    fn refused(v: Verdict) -> (&'static str, u64) {
        match v {
            Verdict::Refused {
                kind, retry_after_ms, ..
            } => (kind, retry_after_ms),
            Verdict::Admitted(h) => panic!("admitted: {h:?}"),
        }
    }

    #[test]
    fn requests_limit_holds_in_any_window_and_waits_exactly() {
        let mut q = QuotaBook::default();
        let limit = rl(3, 0, 1_000);
        for t in [0, 100, 200] {
            assert!(matches!(q.check("m", limit, 10, t), Verdict::Admitted(_)));
        }
        // Full: the oldest (t=0) leaves at 1000.
        assert_eq!(refused(q.check("m", limit, 10, 500)), ("requests", 500));
        assert_eq!(refused(q.check("m", limit, 10, 999)), ("requests", 1));
        // A refusal is not logged: at 1000 exactly one slot is free.
        assert!(matches!(q.check("m", limit, 10, 1_000), Verdict::Admitted(_)));
        assert_eq!(refused(q.check("m", limit, 10, 1_000)), ("requests", 100));
        // Other models have their own log.
        assert!(matches!(q.check("other", limit, 10, 1_000), Verdict::Admitted(_)));
    }

    #[test]
    fn tokens_limit_waits_until_enough_entries_leave() {
        let mut q = QuotaBook::default();
        let limit = rl(0, 100, 1_000);
        assert!(matches!(q.check("m", limit, 40, 0), Verdict::Admitted(_)));
        assert!(matches!(q.check("m", limit, 40, 300), Verdict::Admitted(_)));
        // 80 used; 50 more needs the first entry gone (at 1000).
        assert_eq!(refused(q.check("m", limit, 50, 400)), ("tokens", 600));
        // 90 more needs both gone (at 1300).
        assert_eq!(refused(q.check("m", limit, 90, 400)), ("tokens", 900));
        // 20 fits.
        match q.check("m", limit, 20, 400) {
            Verdict::Admitted(h) => {
                let t = h.tokens.expect("tokens limited");
                assert_eq!((t.limit, t.remaining, t.reset_ms), (100, 0, 600));
                assert!(h.requests.is_none());
            }
            v => panic!("{v:?}"),
        }
        // Larger than the whole limit: never fits, the full window is the wait.
        assert_eq!(refused(q.check("m", limit, 101, 400)), ("tokens", 1_000));
    }

    #[test]
    fn both_limits_report_requests_first_and_the_longer_wait() {
        let mut q = QuotaBook::default();
        let limit = rl(1, 100, 1_000);
        match q.check("m", limit, 60, 0) {
            Verdict::Admitted(h) => {
                let r = h.requests.expect("requests limited");
                assert_eq!((r.limit, r.remaining, r.reset_ms), (1, 0, 1_000));
            }
            v => panic!("{v:?}"),
        }
        match q.check("m", limit, 60, 250) {
            Verdict::Refused {
                kind,
                retry_after_ms,
                hints,
            } => {
                assert_eq!((kind, retry_after_ms), ("requests", 750));
                assert_eq!(hints.tokens.map(|t| t.remaining), Some(40));
            }
            v => panic!("{v:?}"),
        }
        q.clear();
        assert!(matches!(q.check("m", limit, 60, 250), Verdict::Admitted(_)));
    }

    #[test]
    fn go_durations_round_trip_through_the_client_parser() {
        for (ms, s) in [
            (0, "0ms"),
            (250, "250ms"),
            (1_000, "1s"),
            (1_500, "1.5s"),
            (1_250, "1.25s"),
            (60_000, "1m0s"),
            (360_000, "6m0s"),
            (3_723_500, "1h2m3.5s"),
        ] {
            assert_eq!(go_duration(ms), s);
            assert_eq!(parse_go_duration(s), Some(Duration::from_millis(ms)), "{s}");
        }
    }
}
