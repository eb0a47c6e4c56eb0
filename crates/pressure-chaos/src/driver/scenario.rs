//! The scenarios of a chaos run: what the mock does over time and how the
//! clients call. The criteria each scenario must meet are in
//! [`criteria`](super::criteria).

use std::time::Duration;

use pressure_mock::{Behaviour, Latency, Phase, RateLimit};

/// The model every chain tries first.
pub const PRIMARY: &str = "primary";
/// The cheaper model the chain falls back to.
pub const BACKUP: &str = "backup";

/// The scenarios, in the order `--scenario all` runs them (`normal` first:
/// the others compare with its latency).
pub const SCENARIOS: &[&str] = &[
    "normal",
    "hang",
    "stall",
    "rate-limit-storm",
    "500-storm",
    "agents",
];

/// The `agents` scenario's Anthropic primary (use case `claude-agents`,
/// named by `claude-*` on `POST /v1/messages`).
pub const CLAUDE_PRIMARY: &str = "claude-sonnet-4-5";
/// Its backup: an OpenAI chat-completions model (the other vendor).
pub const GPT_BACKUP: &str = "gpt-4.1";
/// The `agents` scenario's OpenAI Responses primary (use case
/// `codex-agents`, named by `gpt-5*` on `POST /v1/responses`).
pub const GPT_PRIMARY: &str = "gpt-5-codex";
/// Its backup: an Anthropic model (the other vendor).
pub const CLAUDE_BACKUP: &str = "claude-haiku-4-5";

/// The provider's healthy answer time in every scenario: 100–150 ms. Long
/// enough that the gateway's own share of a request's time is small, so
/// the latency comparison between scenarios measures the stack's behaviour
/// rather than the machine's noise.
pub(super) const HEALTHY: Latency = Latency::uniform(100, 150);

/// A healthy phase called `name`.
fn healthy(name: &str) -> Phase {
    Phase {
        latency: HEALTHY,
        ..Phase::normal(name)
    }
}

/// Which clients ask for streamed answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Streaming {
    /// None: every answer is one JSON body.
    Never,
    /// Every other client (even worker numbers) streams, the rest do not.
    Half,
}

impl Streaming {
    /// Whether worker `w` streams.
    pub(super) fn for_worker(self, w: usize) -> bool {
        match self {
            Self::Never => false,
            Self::Half => w.is_multiple_of(2),
        }
    }
}

/// One scenario.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Scenario {
    /// Its name (one of [`SCENARIOS`]).
    pub name: &'static str,
    /// What the mock does, in one sentence.
    pub description: &'static str,
    /// Which clients ask for streams.
    pub streaming: Streaming,
    /// The mock's behaviour over a load of `duration`.
    pub behaviour: Behaviour,
    /// When the fault starts and ends, in ms since the load started
    /// (`None`: the fault lasts the whole scenario, or there is none).
    pub fault_window: Option<(u64, u64)>,
}

impl Scenario {
    /// The scenario called `name`, its phases scaled to `duration`.
    pub(super) fn named(name: &str, duration: Duration) -> Option<Self> {
        let d = pressure_core::clock::duration_to_millis(duration).max(3_000);
        let third = d / 3;
        let s = match name {
            "normal" => Self {
                name: "normal",
                description: "The provider answers every request in 100–150 ms: the baseline the others compare with.",
                streaming: Streaming::Never,
                behaviour: Behaviour::single(healthy("normal")),
                fault_window: None,
            },
            "hang" => Self {
                name: "hang",
                description: "20 % of requests to any model hang without sending a byte; the rest answer in 100–150 ms.",
                streaming: Streaming::Never,
                behaviour: Behaviour::single(Phase {
                    hang_share: 0.2,
                    ..healthy("hang")
                }),
                fault_window: None,
            },
            "stall" => Self {
                name: "stall",
                description: "20 % of answers stall after their first bytes (a stream after its first chunk); the provider keeps generating, and billing, the whole answer. Half the clients stream.",
                streaming: Streaming::Half,
                behaviour: Behaviour::single(Phase {
                    stall_share: 0.2,
                    ..healthy("stall")
                }),
                fault_window: None,
            },
            "rate-limit-storm" => Self {
                name: "rate-limit-storm",
                description: "For the middle third the provider allows each model 10 requests per second and answers the rest 429 with retry-after, then lifts the limit.",
                streaming: Streaming::Never,
                behaviour: Behaviour {
                    phases: vec![
                        healthy("before").lasting(third),
                        Phase {
                            rate_limit: Some(RateLimit {
                                requests: 10,
                                tokens: 0,
                                window_ms: 1_000,
                            }),
                            ..healthy("429-storm")
                        }
                        .lasting(third),
                        healthy("after"),
                    ],
                },
                fault_window: Some((third, 2 * third)),
            },
            "500-storm" => Self {
                name: "500-storm",
                description: "For the middle third the primary model answers every request 500; the backup stays healthy; then the primary recovers.",
                streaming: Streaming::Never,
                behaviour: Behaviour {
                    phases: vec![
                        healthy("before").lasting(third),
                        Phase {
                            error_share: 1.0,
                            ..healthy("500-storm")
                        }
                        .on_models(&[PRIMARY])
                        .lasting(third),
                        healthy("after"),
                    ],
                },
                fault_window: Some((third, 2 * third)),
            },
            "agents" => Self {
                name: "agents",
                description: "Agents on POST /v1/messages (claude-*: Anthropic primary, OpenAI chat backup) and POST /v1/responses (gpt-5*: OpenAI Responses primary, Anthropic backup), half of them streaming, from three tenants; for the middle third both primaries refuse every call as overloaded (Anthropic's 529 overloaded_error, the Responses API's 503), the backups stay healthy; then the primaries recover.",
                streaming: Streaming::Half,
                behaviour: Behaviour {
                    phases: vec![
                        healthy("calm").lasting(third),
                        Phase {
                            overload_share: 1.0,
                            ..healthy("529-storm")
                        }
                        .on_models(&[CLAUDE_PRIMARY, GPT_PRIMARY])
                        .lasting(third),
                        healthy("recovery"),
                    ],
                },
                fault_window: Some((third, 2 * third)),
            },
            _ => return None,
        };
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_has_a_valid_behaviour() {
        for name in SCENARIOS {
            let s = Scenario::named(name, Duration::from_secs(9)).expect(name);
            assert_eq!(s.behaviour.validate(), Ok(()), "{name}");
            assert_eq!(s.name, *name);
        }
        assert!(Scenario::named("nope", Duration::from_secs(9)).is_none());
    }

    #[test]
    fn storms_sit_in_the_middle_third() {
        let s = Scenario::named("500-storm", Duration::from_secs(9)).unwrap();
        assert_eq!(s.fault_window, Some((3_000, 6_000)));
        assert_eq!(s.behaviour.phase_at(2_999).1.name, "before");
        assert_eq!(s.behaviour.phase_at(3_000).1.name, "500-storm");
        assert!(!s.behaviour.phase_at(3_000).1.hits(BACKUP));
        assert_eq!(s.behaviour.phase_at(6_000).1.name, "after");
    }

    #[test]
    fn the_agents_storm_hits_only_the_primaries() {
        let s = Scenario::named("agents", Duration::from_secs(9)).unwrap();
        assert_eq!(s.fault_window, Some((3_000, 6_000)));
        let (_, storm) = s.behaviour.phase_at(3_000);
        assert_eq!(storm.overload_share, 1.0);
        assert!(storm.hits(CLAUDE_PRIMARY) && storm.hits(GPT_PRIMARY));
        assert!(!storm.hits(CLAUDE_BACKUP) && !storm.hits(GPT_BACKUP));
        assert!(!s.behaviour.phase_at(6_000).1.has_fault());
    }
}
