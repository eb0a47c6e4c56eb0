//! What the mock provider does, phase by phase.
//!
//! A [`Behaviour`] is a list of [`Phase`]s played in order from the moment
//! it is set (at start or through the admin endpoint); the last phase lasts
//! until the behaviour is replaced. Each phase combines independent knobs
//! (latency, a provider-style rate limit, a share of 500s, of hangs, of
//! streams that stall after the first chunk), optionally only for some
//! models, so "a 500 storm on the primary from t1 to t2, then recovery" is
//! three phases. Named presets ([`Behaviour::preset`]) cover the usual cases.

use serde::{Deserialize, Serialize};

/// The response-time distribution of a phase: a uniform draw between
/// `minMs` and `maxMs` for the whole answer (a stream spreads it over its
/// chunks), plus with probability `tailShare` an extra `tailMs`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Latency {
    /// Fastest answer, in milliseconds.
    pub min_ms: u64,
    /// Slowest answer without the tail, in milliseconds.
    pub max_ms: u64,
    /// Share of answers (0..=1) that also take `tailMs`.
    #[serde(default)]
    pub tail_share: f64,
    /// Extra time of a tail answer, in milliseconds.
    #[serde(default)]
    pub tail_ms: u64,
}

impl Latency {
    /// A uniform draw between `min_ms` and `max_ms`, without a tail.
    pub const fn uniform(min_ms: u64, max_ms: u64) -> Self {
        Self {
            min_ms,
            max_ms,
            tail_share: 0.0,
            tail_ms: 0,
        }
    }
}

impl Default for Latency {
    fn default() -> Self {
        Self::uniform(40, 60)
    }
}

/// A provider-style quota enforced by the mock itself, per model: at most
/// `requests` requests and `tokens` tokens (input + `max_tokens`) in any
/// `windowMs`. Over it the mock answers `429` with `retry-after`,
/// `retry-after-ms` and `x-ratelimit-*` headers, like OpenAI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RateLimit {
    /// Requests per window (0: unlimited).
    #[serde(default)]
    pub requests: u64,
    /// Tokens per window (0: unlimited).
    #[serde(default)]
    pub tokens: u64,
    /// The window, in milliseconds (60 000 for "per minute").
    #[serde(default = "default_window_ms")]
    pub window_ms: u64,
}

fn default_window_ms() -> u64 {
    60_000
}

/// One phase of a [`Behaviour`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Phase {
    /// A name for reports and the stats (`"storm"`, `"recovery"`, ...).
    pub name: String,
    /// How long the phase lasts; absent: until the behaviour is replaced
    /// (only meaningful on the last phase).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The models the faults of this phase hit; absent or empty: all. Other
    /// models answer normally with this phase's `latency`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// Response time.
    #[serde(default)]
    pub latency: Latency,
    /// A quota of the mock's own; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// Share (0..=1) of requests answered `500` at once (a 500 storm is 1.0).
    #[serde(default)]
    pub error_share: f64,
    /// Share (0..=1) of requests refused as overloaded at once: `529
    /// overloaded_error` on the Anthropic endpoint, `503` on the OpenAI one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub overload_share: f64,
    /// Share (0..=1) of requests that never answer (not even headers) until
    /// the client gives up.
    #[serde(default)]
    pub hang_share: f64,
    /// Share (0..=1) of requests that send the response head and the first
    /// chunk (a stream) or the first bytes (a JSON body), then hang.
    #[serde(default)]
    pub stall_share: f64,
    /// Share (0..=1) of streamed requests that fail midway: the head and
    /// the first content event, then the dialect's error event (OpenAI's
    /// `data: {"error": ...}`, Anthropic's `event: error`, the Responses
    /// API's `response.failed`) and the end of the stream; input billed, no
    /// output. A JSON request that draws it is answered `500` at once, like
    /// `errorShare`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stream_error_share: f64,
    /// Output tokens of an answer when the request's `max_tokens` allows.
    #[serde(default = "default_output_tokens")]
    pub output_tokens: u32,
}

fn default_output_tokens() -> u32 {
    48
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

impl Phase {
    /// A phase called `name` that answers normally with the default latency.
    pub fn normal(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            duration_ms: None,
            models: Vec::new(),
            latency: Latency::default(),
            rate_limit: None,
            error_share: 0.0,
            overload_share: 0.0,
            hang_share: 0.0,
            stall_share: 0.0,
            stream_error_share: 0.0,
            output_tokens: default_output_tokens(),
        }
    }

    /// The same phase lasting `ms` milliseconds.
    pub fn lasting(mut self, ms: u64) -> Self {
        self.duration_ms = Some(ms);
        self
    }

    /// The same phase with its faults restricted to `models`.
    pub fn on_models(mut self, models: &[&str]) -> Self {
        self.models = models.iter().map(|m| (*m).to_owned()).collect();
        self
    }

    /// Whether this phase injects any fault (a quota, 500s, hangs, stalls or
    /// failing streams).
    pub fn has_fault(&self) -> bool {
        self.rate_limit.is_some()
            || self.error_share > 0.0
            || self.overload_share > 0.0
            || self.hang_share > 0.0
            || self.stall_share > 0.0
            || self.stream_error_share > 0.0
    }

    /// Whether the faults of this phase apply to `model`.
    pub fn hits(&self, model: &str) -> bool {
        self.models.is_empty() || self.models.iter().any(|m| m == model)
    }
}

/// The mock's behaviour: phases played in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Behaviour {
    /// At least one phase; the last one lasts until replaced.
    pub phases: Vec<Phase>,
}

/// The names [`Behaviour::preset`] knows.
pub const PRESETS: &[&str] = &[
    "normal",
    "slow",
    "rate-limited",
    "500-storm",
    "overloaded",
    "stall",
    "hang-share",
    "storm-then-recovery",
];

impl Behaviour {
    /// One endless phase.
    pub fn single(phase: Phase) -> Self {
        Self { phases: vec![phase] }
    }

    /// A named preset, as `pressure mock-provider --scenario NAME` takes:
    /// `normal` (40–60 ms), `slow` (0.5–2 s, 5 % take 5 s more),
    /// `rate-limited` (60 requests and 20 000 tokens per minute and model),
    /// `500-storm` (every request 500), `overloaded` (every request refused
    /// as overloaded: 529 on `/v1/messages`, 503 on `/v1/chat/completions`),
    /// `stall` (every request stalls after
    /// its first chunk), `hang-share` (20 % hang), `storm-then-recovery`
    /// (normal 10 s, 500 storm 20 s, then normal).
    pub fn preset(name: &str) -> Option<Self> {
        let normal = Phase::normal("normal");
        let b = match name {
            "normal" => Self::single(normal),
            "slow" => Self::single(Phase {
                name: "slow".into(),
                latency: Latency {
                    min_ms: 500,
                    max_ms: 2_000,
                    tail_share: 0.05,
                    tail_ms: 5_000,
                },
                ..normal
            }),
            "rate-limited" => Self::single(Phase {
                name: "rate-limited".into(),
                rate_limit: Some(RateLimit {
                    requests: 60,
                    tokens: 20_000,
                    window_ms: 60_000,
                }),
                ..normal
            }),
            "500-storm" => Self::single(Phase {
                name: "storm".into(),
                error_share: 1.0,
                ..normal
            }),
            "overloaded" => Self::single(Phase {
                name: "overloaded".into(),
                overload_share: 1.0,
                ..normal
            }),
            "stall" => Self::single(Phase {
                name: "stall".into(),
                stall_share: 1.0,
                ..normal
            }),
            "hang-share" => Self::single(Phase {
                name: "hang-share".into(),
                hang_share: 0.2,
                ..normal
            }),
            "storm-then-recovery" => Self {
                phases: vec![
                    Phase::normal("before").lasting(10_000),
                    Phase {
                        name: "storm".into(),
                        error_share: 1.0,
                        ..Phase::normal("storm")
                    }
                    .lasting(20_000),
                    Phase::normal("recovery"),
                ],
            },
            _ => return None,
        };
        Some(b)
    }

    /// Checks shares are in 0..=1, latencies ordered, at least one phase and
    /// only the last without a duration; the error names the JSON path.
    pub fn validate(&self) -> Result<(), String> {
        if self.phases.is_empty() {
            return Err("phases: needs at least one phase".into());
        }
        let last = self.phases.len() - 1;
        for (i, p) in self.phases.iter().enumerate() {
            let path = format!("phases[{i}]");
            for (field, v) in [
                ("errorShare", p.error_share),
                ("overloadShare", p.overload_share),
                ("hangShare", p.hang_share),
                ("stallShare", p.stall_share),
                ("streamErrorShare", p.stream_error_share),
                ("latency.tailShare", p.latency.tail_share),
            ] {
                if !(0.0..=1.0).contains(&v) {
                    return Err(format!("{path}.{field}: must be between 0 and 1"));
                }
            }
            let shares =
                p.error_share + p.overload_share + p.hang_share + p.stall_share + p.stream_error_share;
            if shares > 1.0 + 1e-9 {
                return Err(format!(
                    "{path}: errorShare + overloadShare + hangShare + stallShare + streamErrorShare must be at most 1"
                ));
            }
            if p.latency.min_ms > p.latency.max_ms {
                return Err(format!("{path}.latency.minMs: must be at most maxMs"));
            }
            if p.duration_ms.is_none() && i != last {
                return Err(format!("{path}.durationMs: only the last phase may be endless"));
            }
            if p.duration_ms == Some(0) {
                return Err(format!("{path}.durationMs: must be > 0"));
            }
            if let Some(rl) = p.rate_limit {
                if rl.window_ms == 0 {
                    return Err(format!("{path}.rateLimit.windowMs: must be > 0"));
                }
            }
        }
        Ok(())
    }

    /// The phase in force `elapsed_ms` after the behaviour was set, and its index.
    pub fn phase_at(&self, elapsed_ms: u64) -> (usize, &Phase) {
        let mut start = 0u64;
        for (i, p) in self.phases.iter().enumerate() {
            match p.duration_ms {
                Some(d) if elapsed_ms >= start.saturating_add(d) && i + 1 < self.phases.len() => {
                    start = start.saturating_add(d);
                }
                _ => return (i, p),
            }
        }
        let last = self.phases.len().saturating_sub(1);
        (last, &self.phases[last])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_is_valid() {
        for name in PRESETS {
            let b = Behaviour::preset(name).expect(name);
            assert_eq!(b.validate(), Ok(()), "{name}");
        }
        assert!(Behaviour::preset("nope").is_none());
    }

    #[test]
    fn phases_follow_each_other_and_the_last_lasts() {
        let b = Behaviour::preset("storm-then-recovery").unwrap();
        assert_eq!(b.phase_at(0).1.name, "before");
        assert_eq!(b.phase_at(9_999).1.name, "before");
        assert_eq!(b.phase_at(10_000).1.name, "storm");
        assert_eq!(b.phase_at(29_999).1.name, "storm");
        assert_eq!(b.phase_at(30_000).1.name, "recovery");
        assert_eq!(b.phase_at(u64::MAX).0, 2);
    }

    #[test]
    fn invalid_behaviours_name_the_path() {
        let mut b = Behaviour::single(Phase::normal("x"));
        b.phases[0].hang_share = 1.5;
        assert_eq!(
            b.validate(),
            Err("phases[0].hangShare: must be between 0 and 1".into())
        );
        let b = Behaviour {
            phases: vec![Phase::normal("a"), Phase::normal("b")],
        };
        assert_eq!(
            b.validate(),
            Err("phases[0].durationMs: only the last phase may be endless".into())
        );
        assert!(Behaviour { phases: vec![] }.validate().is_err());
    }

    #[test]
    fn a_phase_parses_from_camel_case_json() {
        let p: Phase = serde_json::from_str(
            r#"{"name":"storm","durationMs":5000,"models":["m1"],"errorShare":1,"rateLimit":{"requests":10}}"#,
        )
        .unwrap();
        assert_eq!(p.duration_ms, Some(5000));
        assert!(p.hits("m1") && !p.hits("m2"));
        assert_eq!(p.rate_limit.unwrap().window_ms, 60_000);
        assert!(serde_json::from_str::<Phase>(r#"{"name":"x","bogus":1}"#).is_err());
    }
}
