//! [`Ledger`]: one attempt's breaker permit, limiter permit and price,
//! settled once ([`Ledger::close`]) whichever way the attempt ended —
//! answered, failed, or dropped by a caller that went away.
//!
//! Breaker accounting: server errors, overload, timeouts, refused
//! connections, unknown errors and 401/403/404 (a broken credential or
//! model name of this pair) are failures. A rate limit (429, spend cap) and
//! 409 are *not* (the provider is healthy, only busy for us: the limiter
//! and `retry-after` handle it), and a request-caused error (400, context
//! length, content refusal) proves the provider healthy, so it is recorded
//! as a success. A cancelled call says nothing about the provider: it is
//! ignored.
//!
//! The payer's permit (the event's tenant, if any) is reconciled to what
//! the provider billed: the answer's usage, or for a failed attempt its
//! input plus the output the provider bills ([`billed_output`]), at the
//! model's price.
//!
//! A ledger dropped without being closed (the event's future was dropped
//! mid-call) releases every permit as it is: the breaker records nothing,
//! the reservations stay at their estimates (the provider may bill the
//! call) and are released.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use pressure_core::{Backend, Permit};

use super::models::ModelEntry;
use crate::breaker::CallPermit;
use crate::pipeline::config::ModelKind;
use crate::pipeline::metrics::Metrics;
use crate::price::{ModelPrice, Money, TokenUse};
use crate::reservation::Reservation;
use crate::taxonomy::{ErrorKind, TimeoutPhase};

/// How an attempt ended.
#[derive(Debug)]
pub(crate) enum Settlement {
    /// The provider answered; `ttft` (else the time since the permit was
    /// taken) is recorded as the breaker's call duration.
    Answered {
        ttft: Option<Duration>,
        total: Option<Duration>,
    },
    /// The attempt failed with this kind.
    Failed(ErrorKind),
    /// The caller went away.
    Cancelled,
}

/// One attempt's permits and price, until it is settled.
pub(crate) struct Ledger<B: Backend> {
    breaker: CallPermit,
    permit: Option<Permit<B>>,
    paid: Option<super::payer::Paid<B>>,
    provider: String,
    model: String,
    price: ModelPrice,
    reservation: Reservation,
    kind: ModelKind,
    metrics: Arc<Metrics>,
}

impl<B: Backend> Ledger<B> {
    pub(crate) fn new(
        m: &ModelEntry,
        breaker: CallPermit,
        (permit, paid): (Option<Permit<B>>, Option<super::payer::Paid<B>>),
        reservation: Reservation,
        kind: ModelKind,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            breaker,
            permit,
            paid,
            provider: m.provider.clone(),
            model: m.model.clone(),
            price: m.price,
            reservation,
            kind,
            metrics,
        }
    }

    /// The provider's name.
    pub(crate) fn provider(&self) -> &str {
        &self.provider
    }

    /// The provider's model name.
    pub(crate) fn model(&self) -> &str {
        &self.model
    }

    /// What the attempt reserved.
    pub(crate) fn reservation(&self) -> &Reservation {
        &self.reservation
    }

    /// Whether the breaker admitted this attempt as a half-open probe.
    pub(crate) fn is_probe(&self) -> bool {
        self.breaker.is_probe()
    }

    /// Settles the attempt: the breaker outcome, the metrics and the spend
    /// of `used` tokens (each cache class at its price) now; returns the
    /// attempt's cost and the reconciliation of the limiter reservation to
    /// `used` (then its release), to await or to spawn.
    pub(crate) fn close(self, how: Settlement, used: TokenUse) -> (Money, BoxFuture<'static, ()>) {
        self.close_billed(how, (used.input, used.output), used)
    }

    /// [`close`](Self::close), awaiting the reconciliation.
    pub(crate) async fn settle(self, how: Settlement, used: TokenUse) -> Money {
        let (cost, reconcile) = self.close(how, used);
        reconcile.await;
        cost
    }

    /// Settles an attempt answered whole after `ttft` (the response head)
    /// and `total`, to `used` tokens; returns its cost.
    pub(crate) async fn answered(self, ttft: Duration, total: Duration, used: TokenUse) -> Money {
        let how = Settlement::Answered {
            ttft: Some(ttft),
            total: Some(total),
        };
        self.settle(how, used).await
    }

    /// Settles an attempt that failed before any output reached us: the
    /// reserved output is refunded to the limiter, and the money counts
    /// the input plus what the provider bills ([`billed_output`]).
    pub(crate) async fn fail(self, kind: ErrorKind) -> Money {
        let input = self.reservation.input_tokens;
        let billed = TokenUse::plain(input, billed_output(&kind, &self.reservation));
        let (cost, reconcile) = self.close_billed(Settlement::Failed(kind), (input, 0), billed);
        reconcile.await;
        cost
    }

    fn close_billed(
        self,
        how: Settlement,
        used: (u64, u64),
        billed: TokenUse,
    ) -> (Money, BoxFuture<'static, ()>) {
        let Self {
            breaker,
            permit,
            paid,
            provider,
            model,
            price,
            kind,
            metrics,
            ..
        } = self;
        let cost = price.cost_of(&billed);
        Metrics::add(&metrics.spent_micro_usd, cost.micro_usd());
        if kind == ModelKind::Embedding {
            Metrics::add(&metrics.embedding_spent_micro_usd, cost.micro_usd());
        }
        match how {
            Settlement::Answered { ttft, total } => {
                metrics.timing(&provider, &model, ttft, total);
                let ttft = ttft.unwrap_or_else(|| breaker.elapsed());
                breaker.success(ttft);
            }
            Settlement::Failed(kind) => {
                let elapsed = breaker.elapsed();
                match breaker_outcome(&kind) {
                    Outcome::Failure => breaker.failure(elapsed),
                    Outcome::Success => breaker.success(elapsed),
                    Outcome::Ignore => breaker.ignore(),
                }
                Metrics::add(&metrics.failed_spent_micro_usd, cost.micro_usd());
                metrics.attempt_error(kind.label());
            }
            Settlement::Cancelled => breaker.ignore(),
        }
        let actual = Reservation::actual(used);
        let bill = super::payer::billed((billed.input, billed.output), cost.micro_usd());
        let reconcile = async move {
            if let Some(mut permit) = permit {
                if let Err(e) = permit.reconcile(actual).await {
                    tracing::warn!(%provider, %model, error = %e, "reconcile failed");
                }
            }
            super::payer::settle(paid, bill).await;
        };
        (cost, reconcile.boxed())
    }
}

/// How a failed attempt counts for the breaker; see the module docs.
enum Outcome {
    Failure,
    Success,
    Ignore,
}

fn breaker_outcome(kind: &ErrorKind) -> Outcome {
    match kind {
        ErrorKind::RateLimited { .. } | ErrorKind::QuotaExhausted | ErrorKind::Conflict => Outcome::Ignore,
        ErrorKind::BadRequest | ErrorKind::ContextLength | ErrorKind::ContentRefusal => Outcome::Success,
        _ => Outcome::Failure,
    }
}

/// Output tokens a failed attempt is assumed to have cost: the whole
/// reservation when we stopped waiting for a provider that had the request
/// (a first-byte, read or deadline timeout: providers go on generating, and
/// billing, after the client has gone — the chaos stand's stall scenario
/// measures it), none otherwise. The money budget then stops retries that
/// would burn more than it allows, instead of counting only the prompt.
pub(crate) fn billed_output(kind: &ErrorKind, reservation: &Reservation) -> u64 {
    match kind {
        ErrorKind::Timeout {
            phase: TimeoutPhase::FirstByte | TimeoutPhase::Read | TimeoutPhase::Total,
        } => reservation.output_tokens,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reservation::ModelLimits;

    #[test]
    fn a_call_we_stopped_waiting_for_is_charged_its_whole_output() {
        let limits = ModelLimits {
            context_tokens: 1_000,
            max_output_tokens: 100,
            default_max_tokens: None,
        };
        let r = Reservation::for_request(40, Some(64), &limits).unwrap();
        let timeout = |phase| ErrorKind::Timeout { phase };
        for phase in [TimeoutPhase::FirstByte, TimeoutPhase::Read, TimeoutPhase::Total] {
            assert_eq!(billed_output(&timeout(phase), &r), 64, "{phase:?}");
        }
        for phase in [TimeoutPhase::Connect, TimeoutPhase::PoolWait, TimeoutPhase::Write] {
            assert_eq!(
                billed_output(&timeout(phase), &r),
                0,
                "{phase:?}: the provider never had it"
            );
        }
        assert_eq!(
            billed_output(&ErrorKind::RateLimited { retry_after: None }, &r),
            0
        );
        assert_eq!(billed_output(&ErrorKind::BadRequest, &r), 0);
    }
}
