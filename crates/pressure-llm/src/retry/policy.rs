//! The retry policy (configuration) and the retry state of one event.
//!
//! [`RetryState::on_failure`] is called after every failed attempt and
//! answers with a [`Decision`]. It charges the attempt's cost to the event's
//! [`MoneyBudget`] first (money spent is spent), then checks, in order:
//!
//! 1. the error is transient ([`Disposition::Retry`]), else
//!    [`GiveUpReason::NotRetryable`] carrying the kind's disposition;
//! 2. attempts left: at most `maxAttempts` attempts per level, counting the
//!    first, else [`GiveUpReason::AttemptsExhausted`];
//! 3. money: `spent + next_attempt_estimate ≤ budget`, else
//!    [`GiveUpReason::BudgetExceeded`];
//! 4. the provider's `retry-after` is at most `maxRetryAfterMs`, else
//!    [`GiveUpReason::RetryAfterTooLong`];
//! 5. the wait (full-jitter backoff, at least the `retry-after`) ends before
//!    the event's deadline (`now + wait < deadline`), else
//!    [`GiveUpReason::DeadlineWouldPass`].
//!
//! Then it answers [`Decision::RetryAfter`] with the wait.

use std::time::Duration;

use pressure_core::clock::{duration_to_nanos, Clock};
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};

use super::backoff::Backoff;
use super::budget::MoneyBudget;
use crate::price::Money;
use crate::taxonomy::{Disposition, ErrorKind};

/// Retry configuration (camelCase in config files, unknown fields rejected).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct RetryPolicy {
    /// Most attempts per (provider, model) level, the first one included. Default 3.
    pub max_attempts: u32,
    /// Base of the exponential backoff, ms. Default 500.
    pub base_delay_ms: u64,
    /// Cap of the jittered backoff, ms. Default 30 000.
    pub max_delay_ms: u64,
    /// Longest provider `retry-after` that is waited out, ms; a longer one
    /// ends the retries. Default 60 000.
    pub max_retry_after_ms: u64,
    /// Money budget per event in micro-dollars; `None` = only attempts and the
    /// deadline limit retries. Default `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_micro_usd: Option<u64>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            base_delay_ms: 500,
            max_delay_ms: 30_000,
            max_retry_after_ms: 60_000,
            budget_micro_usd: None,
        }
    }
}

/// A [`RetryPolicy`] that makes no sense.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// `maxAttempts` is 0: not even the first attempt would be made.
    #[error("maxAttempts must be at least 1")]
    ZeroAttempts,
    /// `baseDelayMs` is above `maxDelayMs`.
    #[error("baseDelayMs ({base}) must not exceed maxDelayMs ({max})")]
    BaseAboveCap {
        /// The configured base, ms.
        base: u64,
        /// The configured cap, ms.
        max: u64,
    },
}

impl RetryPolicy {
    /// Checks the policy for nonsense.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.max_attempts == 0 {
            return Err(PolicyError::ZeroAttempts);
        }
        if self.base_delay_ms > self.max_delay_ms {
            return Err(PolicyError::BaseAboveCap {
                base: self.base_delay_ms,
                max: self.max_delay_ms,
            });
        }
        Ok(())
    }

    /// The backoff this policy describes.
    pub fn backoff(&self) -> Backoff {
        Backoff::new(
            Duration::from_millis(self.base_delay_ms),
            Duration::from_millis(self.max_delay_ms),
            Duration::from_millis(self.max_retry_after_ms),
        )
    }

    /// A fresh money budget for one event.
    pub fn budget(&self) -> MoneyBudget {
        match self.budget_micro_usd {
            Some(limit) => MoneyBudget::new(Money::from_micro_usd(limit)),
            None => MoneyBudget::unlimited(),
        }
    }
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Wait this long, then make the next attempt on the same (provider, model).
    RetryAfter(Duration),
    /// No retry here, for this reason.
    GiveUp(GiveUpReason),
}

/// Why a failed attempt is not retried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GiveUpReason {
    /// The error is not transient; its disposition says whether to fall back or fail.
    #[error("error is not retryable ({0:?})")]
    NotRetryable(Disposition),
    /// `maxAttempts` attempts were made.
    #[error("{attempts} attempts made, none left")]
    AttemptsExhausted {
        /// Attempts made at this level.
        attempts: u32,
    },
    /// The next attempt would take the event's spend past its budget.
    #[error("next attempt ({next_estimate}) would exceed the budget: {spent} spent of {limit}")]
    BudgetExceeded {
        /// Spent by the event so far, this attempt included.
        spent: Money,
        /// Estimated cost of the next attempt.
        next_estimate: Money,
        /// The event's budget.
        limit: Money,
    },
    /// The provider asked for a longer wait than `maxRetryAfterMs`.
    #[error("provider asked to wait {retry_after:?}, more than the {max:?} honoured")]
    RetryAfterTooLong {
        /// What the provider asked for.
        retry_after: Duration,
        /// The longest wait honoured.
        max: Duration,
    },
    /// Waiting would reach or pass the event's deadline.
    #[error("waiting {wait:?} would pass the deadline ({remaining:?} left)")]
    DeadlineWouldPass {
        /// The wait the retry needed.
        wait: Duration,
        /// Time left until the deadline.
        remaining: Duration,
    },
}

impl GiveUpReason {
    /// What the caller should do next: the kind's own disposition for a
    /// non-retryable error; otherwise (a transient error that ran out of
    /// attempts, money, patience or time) [`Disposition::Fallback`] — the next
    /// level (a backup model, the non-LLM handler, the manual queue) may still
    /// answer, and the fallback layer checks the deadline and budget itself.
    pub fn disposition(&self) -> Disposition {
        match self {
            Self::NotRetryable(d) => *d,
            _ => Disposition::Fallback,
        }
    }
}

/// The retry state of one event: attempts at the current level, money spent
/// by the whole event, and the event's deadline.
///
/// `R` is the RNG for jitter; tests inject a seeded one with
/// [`with_rng`](Self::with_rng).
#[derive(Debug, Clone)]
pub struct RetryState<R = SmallRng> {
    backoff: Backoff,
    max_attempts: u32,
    attempts: u32,
    total_attempts: u32,
    budget: MoneyBudget,
    deadline: Option<u64>,
    rng: R,
}

impl RetryState<SmallRng> {
    /// A state for a new event under `policy`, with a deadline in the
    /// injected clock's nanoseconds (`None` = no deadline), jitter seeded from
    /// the thread-local RNG.
    pub fn new(policy: &RetryPolicy, deadline_nanos: Option<u64>) -> Self {
        Self::with_rng(policy, deadline_nanos, SmallRng::from_rng(&mut rand::rng()))
    }

    /// A state for a new event whose deadline is `total` from `clock`'s now.
    pub fn with_timeout(policy: &RetryPolicy, clock: &dyn Clock, total: Duration) -> Self {
        let deadline = clock.now_nanos().saturating_add(duration_to_nanos(total));
        Self::new(policy, Some(deadline))
    }
}

impl<R: RngCore> RetryState<R> {
    /// A state for a new event with an injected RNG.
    pub fn with_rng(policy: &RetryPolicy, deadline_nanos: Option<u64>, rng: R) -> Self {
        Self {
            backoff: policy.backoff(),
            max_attempts: policy.max_attempts.max(1),
            attempts: 0,
            total_attempts: 0,
            budget: policy.budget(),
            deadline: deadline_nanos,
            rng,
        }
    }

    /// Failed attempts recorded at the current level.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Failed attempts recorded over the whole event, all levels.
    pub fn total_attempts(&self) -> u32 {
        self.total_attempts
    }

    /// The event's money budget (what was spent, and the limit).
    pub fn budget(&self) -> &MoneyBudget {
        &self.budget
    }

    /// The event's deadline in clock nanoseconds, if any.
    pub fn deadline(&self) -> Option<u64> {
        self.deadline
    }

    /// Moves to the next level of the fallback chain: the attempt count
    /// restarts, the money spent and the deadline stay (they are per event).
    pub fn start_fallback_level(&mut self) {
        self.attempts = 0;
    }

    /// Records a failed attempt and decides whether to retry; see the module
    /// docs for the order of the checks.
    ///
    /// * `attempt_cost` — what the failed attempt cost: its input tokens plus
    ///   the output generated before it failed (zero if nothing reached the
    ///   provider, e.g. a refused connection).
    /// * `next_attempt_estimate` — the worst-case cost of the retry: its input
    ///   tokens plus `max_tokens` of output at the model's price.
    /// * `now` — the injected clock's nanoseconds.
    pub fn on_failure(
        &mut self,
        kind: &ErrorKind,
        attempt_cost: Money,
        next_attempt_estimate: Money,
        now: u64,
    ) -> Decision {
        self.budget.charge(attempt_cost);
        self.attempts = self.attempts.saturating_add(1);
        self.total_attempts = self.total_attempts.saturating_add(1);
        let decision = self.decide(kind, next_attempt_estimate, now);
        tracing::debug!(
            error = kind.label(),
            attempts = self.attempts,
            spent_micro_usd = self.budget.spent().micro_usd(),
            ?decision,
            "retry decision"
        );
        decision
    }

    fn decide(&mut self, kind: &ErrorKind, next_estimate: Money, now: u64) -> Decision {
        let disposition = kind.disposition();
        if disposition != Disposition::Retry {
            return Decision::GiveUp(GiveUpReason::NotRetryable(disposition));
        }
        if self.attempts >= self.max_attempts {
            return Decision::GiveUp(GiveUpReason::AttemptsExhausted {
                attempts: self.attempts,
            });
        }
        if let Some(limit) = self.budget.limit() {
            if self.budget.would_exceed(next_estimate) {
                return Decision::GiveUp(GiveUpReason::BudgetExceeded {
                    spent: self.budget.spent(),
                    next_estimate,
                    limit,
                });
            }
        }
        let retry = self.attempts - 1;
        let Some(wait) = self.backoff.delay(retry, kind.retry_after(), &mut self.rng) else {
            return Decision::GiveUp(GiveUpReason::RetryAfterTooLong {
                retry_after: kind.retry_after().unwrap_or_default(),
                max: self.backoff.max_retry_after(),
            });
        };
        if let Some(deadline) = self.deadline {
            let remaining = Duration::from_nanos(deadline.saturating_sub(now));
            if wait >= remaining {
                return Decision::GiveUp(GiveUpReason::DeadlineWouldPass { wait, remaining });
            }
        }
        Decision::RetryAfter(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_validation() {
        let p = RetryPolicy::default();
        assert_eq!(p.validate(), Ok(()));
        assert_eq!(p.backoff(), Backoff::default());
        let zero = RetryPolicy {
            max_attempts: 0,
            ..p.clone()
        };
        assert_eq!(zero.validate(), Err(PolicyError::ZeroAttempts));
        let inverted = RetryPolicy {
            base_delay_ms: 40_000,
            ..p
        };
        assert!(matches!(
            inverted.validate(),
            Err(PolicyError::BaseAboveCap { .. })
        ));
    }

    #[test]
    fn give_up_disposition() {
        assert_eq!(
            GiveUpReason::NotRetryable(Disposition::Fail).disposition(),
            Disposition::Fail
        );
        assert_eq!(
            GiveUpReason::AttemptsExhausted { attempts: 3 }.disposition(),
            Disposition::Fallback
        );
    }
}
