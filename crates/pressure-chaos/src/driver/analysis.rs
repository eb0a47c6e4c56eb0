//! From raw observations (client samples, the mock's arrivals, breaker
//! transitions) to the report's series: percentiles, time buckets, breaker
//! spans, attempts per event.

use std::collections::BTreeMap;

use pressure_llm::breaker::State;

use super::load::Sample;
use crate::report::{BreakerSpan, Bucket, LatencyPoint, Percentiles};
use pressure_mock::{Arrival, Outcome};

/// A breaker transition on the run's time axis.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct TransitionAt {
    /// Ms since the load started.
    pub at_ms: f64,
    /// `provider/model`.
    pub breaker: String,
    /// State before.
    pub from: State,
    /// State after.
    pub to: State,
}

/// Nearest-rank percentiles of `values` (ms).
pub(super) fn percentiles(values: &[f64]) -> Percentiles {
    if values.is_empty() {
        return Percentiles::default();
    }
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let rank = (q * v.len() as f64).ceil() as usize;
        v[rank.clamp(1, v.len()) - 1]
    };
    Percentiles {
        count: v.len() as u64,
        p50: at(0.50),
        p90: at(0.90),
        p95: at(0.95),
        p99: at(0.99),
        max: v.last().copied().unwrap_or(0.0),
    }
}

/// The bucket width for a load of `duration_ms`: about 40 buckets, at least 250 ms.
pub(super) fn bucket_width(duration_ms: f64) -> f64 {
    (duration_ms / 40.0).max(250.0)
}

/// Completions (by end time) and mock arrivals per bucket, over `[0, end_ms)`.
pub(super) fn buckets(samples: &[Sample], arrivals: &[Arrival], end_ms: f64, width: f64) -> Vec<Bucket> {
    let n = ((end_ms / width).ceil() as usize).max(1);
    let mut out: Vec<Bucket> = (0..n)
        .map(|i| Bucket {
            t_ms: i as f64 * width,
            width_ms: width,
            ..Bucket::default()
        })
        .collect();
    let slot = |t: f64| ((t.max(0.0) / width) as usize).min(n - 1);
    for s in samples {
        let b = &mut out[slot(s.end_ms)];
        if s.answered_by_model() {
            b.answered += 1;
        } else if (s.status == 200 || s.status == 202) && !s.stream_error {
            b.degraded += 1;
        } else if !s.bad {
            b.failed += 1;
        }
    }
    for a in arrivals {
        let b = &mut out[slot(a.at_ms)];
        b.upstream += 1;
        match a.status {
            429 => b.upstream_429 += 1,
            500 => b.upstream_500 += 1,
            _ => {}
        }
    }
    out
}

/// Client latency percentiles per bucket of start time (requests the provider
/// must refuse are left out).
pub(super) fn latency_series(samples: &[Sample], end_ms: f64, width: f64) -> Vec<LatencyPoint> {
    let n = ((end_ms / width).ceil() as usize).max(1);
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); n];
    for s in samples.iter().filter(|s| !s.bad) {
        per[((s.start_ms.max(0.0) / width) as usize).min(n - 1)].push(s.latency_ms());
    }
    per.iter()
        .enumerate()
        .filter(|(_, v)| !v.is_empty())
        .map(|(i, v)| {
            let p = percentiles(v);
            LatencyPoint {
                t_ms: (i as f64 + 0.5) * width,
                p50: p.p50,
                p95: p.p95,
                p99: p.p99,
            }
        })
        .collect()
}

/// The state spans of every breaker that moved, from its transitions;
/// breakers start closed at 0.
pub(super) fn breaker_spans(transitions: &[TransitionAt], end_ms: f64) -> Vec<BreakerSpan> {
    let mut by: BTreeMap<&str, Vec<&TransitionAt>> = BTreeMap::new();
    for t in transitions {
        by.entry(t.breaker.as_str()).or_default().push(t);
    }
    let mut out = Vec::new();
    for (name, mut ts) in by {
        ts.sort_by(|a, b| a.at_ms.total_cmp(&b.at_ms));
        let mut state = State::Closed;
        let mut since = 0.0;
        for t in ts {
            out.push(BreakerSpan {
                breaker: name.to_owned(),
                state: state.as_str().to_owned(),
                start_ms: since,
                end_ms: t.at_ms.max(since),
            });
            state = t.to;
            since = t.at_ms.max(since);
        }
        out.push(BreakerSpan {
            breaker: name.to_owned(),
            state: state.as_str().to_owned(),
            start_ms: since,
            end_ms: end_ms.max(since),
        });
    }
    out
}

/// The arrivals of each event (by `x-pressure-request-id`), in arrival order.
pub(super) fn by_request(arrivals: &[Arrival]) -> BTreeMap<&str, Vec<&Arrival>> {
    let mut out: BTreeMap<&str, Vec<&Arrival>> = BTreeMap::new();
    for a in arrivals {
        if let Some(id) = a.request_id.as_deref() {
            out.entry(id).or_default().push(a);
        }
    }
    for v in out.values_mut() {
        v.sort_by_key(|a| a.seq);
    }
    out
}

/// Whether `a` was an attempt that did not answer (and so, if billed, money burned).
pub(super) fn failed_attempt(a: &Arrival) -> bool {
    !matches!(a.outcome, Outcome::Ok | Outcome::BadRequest)
}

/// Arrivals per second within `[from_ms, to_ms)` that satisfy `keep`.
pub(super) fn rate(arrivals: &[Arrival], from_ms: f64, to_ms: f64, keep: impl Fn(&Arrival) -> bool) -> f64 {
    if to_ms <= from_ms {
        return 0.0;
    }
    let n = arrivals
        .iter()
        .filter(|a| a.at_ms >= from_ms && a.at_ms < to_ms && keep(a))
        .count();
    n as f64 * 1_000.0 / (to_ms - from_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = percentiles(&v);
        assert_eq!(
            (p.count, p.p50, p.p90, p.p95, p.p99, p.max),
            (100, 50.0, 90.0, 95.0, 99.0, 100.0)
        );
        assert_eq!(percentiles(&[]).count, 0);
        assert_eq!(percentiles(&[7.0]).p99, 7.0);
    }

    #[test]
    fn spans_follow_transitions_from_closed() {
        let t = |at_ms, from, to| TransitionAt {
            at_ms,
            breaker: "mock/primary".into(),
            from,
            to,
        };
        let spans = breaker_spans(
            &[
                t(100.0, State::Closed, State::Open),
                t(1_100.0, State::Open, State::HalfOpen),
                t(1_150.0, State::HalfOpen, State::Closed),
            ],
            2_000.0,
        );
        let got: Vec<(&str, f64, f64)> = spans
            .iter()
            .map(|s| (s.state.as_str(), s.start_ms, s.end_ms))
            .collect();
        assert_eq!(
            got,
            [
                ("closed", 0.0, 100.0),
                ("open", 100.0, 1_100.0),
                ("half_open", 1_100.0, 1_150.0),
                ("closed", 1_150.0, 2_000.0)
            ]
        );
        assert!(breaker_spans(&[], 10.0).is_empty());
    }
}
