//! The gate before each attempt on a model level, for every kind of call.
//!
//! 1. A provider hold (its rate-limit headers said the quota is spent) is
//!    a limiter denial: waited out when it ends within the level's share of
//!    the time left (see [`Engine::gate`]), else the level is refused so a
//!    backup can answer at once.
//! 2. The breaker: an open breaker costs no quota and no call.
//! 3. The payer, if the event has one (`payer`): the attempt's estimated
//!    tokens and money, not waited for; a refusal (a spent budget) refuses
//!    the level.
//! 4. The limiter, within the time left. It may take a while (a wait for
//!    capacity, a store round trip): if the breaker changed state
//!    meanwhile, its permit is void, so the reservations are given back and
//!    the gate is asked again, and an open breaker sends nothing. A
//!    limiter refusal gives the payer's reservation back too.

use pressure_core::{Backend, Nest, Permit};
use tokio::time::Instant;

use super::models::ModelEntry;
use super::payer;
use super::Engine;
use crate::breaker::{CallPermit, CircuitBreaker};
use crate::pipeline::error::LlmError;
use crate::pipeline::metrics::Metrics;
use crate::reservation::{resource_id, Reservation};

/// What the gate decided before one attempt.
pub(super) enum Gate<B: Backend> {
    /// Call: the breaker's permit, the limiter's (none for a model
    /// without limits) and the payer's (none for an event without one).
    Go(CallPermit, Option<Permit<B>>, Option<payer::Paid<B>>),
    /// Ask the gate again: a provider hold ended, or the breaker changed
    /// state while the limiter decided (the reservation was given back).
    Again,
    /// The level cannot call now: a hold past its share of the deadline,
    /// an open breaker, the payer's or the limiter's refusal.
    Refused(LlmError),
}

impl<B: Backend> Engine<B> {
    /// The gate of one attempt on `m`; see the module docs. A hold is
    /// waited out only when it ends by `share_end` (the level's share of
    /// the time left, never past the deadline).
    pub(super) async fn gate(
        &self,
        m: &ModelEntry,
        breaker: &CircuitBreaker,
        reservation: &Reservation,
        payer: Option<&Nest<B>>,
        share_end: Instant,
        deadline: Instant,
    ) -> Gate<B> {
        let now = Instant::now();
        if let Some(wait) = m.held(self.clock.now_nanos()) {
            if now + wait <= share_end.min(deadline) {
                tokio::time::sleep_until(now + wait).await;
                return Gate::Again;
            }
            Metrics::add(&self.metrics.limiter_rejections, 1);
            return Gate::Refused(LlmError::NoCapacity {
                resource: resource_id(&m.provider, &m.model),
                retry_after: Some(wait),
            });
        }
        let bp = match breaker.acquire().await {
            Ok(p) => p,
            Err(rejected) => {
                Metrics::add(&self.metrics.breaker_rejections, 1);
                return Gate::Refused(LlmError::BreakerOpen {
                    provider: m.provider.clone(),
                    model: m.model.clone(),
                    retry_after: Some(rejected.retry_in),
                });
            }
        };
        let paid = match payer {
            None => None,
            Some(payer) => {
                match payer::charge(payer, m, reservation, deadline, self.clock.unix_nanos()).await {
                    Ok(p) => Some(p),
                    Err(e) => {
                        bp.ignore();
                        Metrics::add(&self.metrics.budget_rejections, 1);
                        return Gate::Refused(e);
                    }
                }
            }
        };
        let permit = match &m.resource {
            None => None,
            Some(resource) if m.shadow => self.shadow_permit(resource, reservation).await,
            Some(resource) => {
                let remaining = deadline.saturating_duration_since(now);
                match self
                    .broker
                    .acquire_within(resource, reservation.acquire_options(), remaining)
                    .await
                {
                    Ok(p) => Some(p),
                    Err(e) => {
                        bp.ignore();
                        payer::refund(paid).await;
                        Metrics::add(&self.metrics.limiter_rejections, 1);
                        return Gate::Refused(match e {
                            pressure_core::Error::WaitExceeded { wait, .. } => LlmError::NoCapacity {
                                resource: resource.clone(),
                                retry_after: Some(wait),
                            },
                            // Never fits: no wait would help.
                            pressure_core::Error::DemandTooLarge { .. } => LlmError::NoCapacity {
                                resource: resource.clone(),
                                retry_after: None,
                            },
                            other => LlmError::Limiter(other),
                        });
                    }
                }
            }
        };
        if !bp.is_current() {
            if let Some(mut p) = permit {
                if let Err(e) = p.reconcile(Reservation::actual((0, 0))).await {
                    tracing::warn!(model = %m.key, error = %e, "reconcile failed");
                }
            }
            payer::refund(paid).await;
            bp.ignore();
            return Gate::Again;
        }
        Gate::Go(bp, permit, paid)
    }
}

impl<B: Backend> Engine<B> {
    /// The limiter of a model in shadow mode: asked once, never waited
    /// for; a refusal lets the attempt go without a permit (nothing
    /// consumed), counted in the resource's `shadowDenied` and logged as a
    /// `request denied` line with `shadow: true`. A limiter that cannot
    /// decide lets it go too (a shadow limit never refuses).
    async fn shadow_permit(&self, resource: &str, reservation: &Reservation) -> Option<Permit<B>> {
        match self
            .broker
            .try_acquire(resource, reservation.acquire_options())
            .await
        {
            Ok(pressure_core::Acquisition::Granted(p)) => Some(p),
            Ok(pressure_core::Acquisition::Denied(d)) => {
                if let Some(h) = self.broker.resource(resource) {
                    drop(h.admit_shadow_denial());
                }
                tracing::info!(
                    target: "pressure::denial",
                    resource,
                    layer = "model",
                    wait_time_ms = u64::try_from(d.wait.as_millis()).unwrap_or(u64::MAX),
                    dimension = d.dimension.as_str(),
                    shadow = true,
                    "request denied"
                );
                None
            }
            Err(e) => {
                tracing::warn!(resource, error = %e, "shadow model limiter failed; attempt let go");
                None
            }
        }
    }
}
