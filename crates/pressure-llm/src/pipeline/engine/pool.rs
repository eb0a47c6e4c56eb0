//! A pool level of the chain (DESIGN §13): the retry loop of a level whose
//! attempts go to one deployment of a pool each
//! ([`crate::pipeline::pool`]).
//!
//! Which member takes an attempt:
//!
//! 1. the members still open to it (not failed at this level since the
//!    last full round) are offered it in the order of the pool's
//!    [`Rotation`] (a smooth weighted round robin);
//! 2. each is asked, in that order, whether it admits the attempt *now*:
//!    the level's usual gate (provider hold, breaker, payer, limiter)
//!    with no time to wait, so the limiter's answer is a try-acquire whose
//!    reservation is the attempt's own — nothing is reserved twice. The
//!    first that admits takes the attempt; a member whose breaker is open
//!    is skipped;
//! 3. when none admits now, the attempt sleeps until the first of them
//!    could (the soonest limiter wait or provider hold their refusals
//!    announced; a hold only within the level's share of the time left, a
//!    limiter wait within the deadline), then every open member is asked
//!    again. Requests waiting together so spread over the members as each
//!    frees: no member sits idle while a request waits. When none could
//!    within those bounds, the level is refused with the refusal that
//!    says to ask again the soonest.
//!
//! After a failure: an error a retry or a fallback could mend (a 429,
//! 5xx, a timeout, a broken credential of that deployment) moves the next
//! attempt, at once, to a member not yet tried at this level, as long as
//! the event's money budget allows one more attempt — so every member gets
//! its chance before the chain's next level. Once every member failed, the
//! event's retry decision applies as on a model level (`maxAttempts`
//! counts the pool level's attempts, the backoff is waited, then every
//! member is open again). A request error fails the event, as anywhere.

use std::time::Duration;

use pressure_core::{Backend, Nest};
use tokio::time::Instant;

use super::call::{Call, Request};
use super::gate::Gate;
use super::level::{given_up, upstream, Admitted, Event, LevelEnd};
use super::models::ModelEntry;
use super::rotation::Rotation;
use super::Engine;
use crate::pipeline::error::LlmError;
use crate::pipeline::metrics::Metrics;
use crate::reservation::{resource_id, Reservation};
use crate::retry::Decision;
use crate::taxonomy::Disposition;

/// The shortest sleep before the members are asked again, when none
/// admitted an attempt (a concurrency limit's wait is an estimate that may
/// be zero).
const MIN_POOL_WAIT: Duration = Duration::from_millis(5);

/// One member of a pool level as an event reaches it.
pub(super) struct Member<'a> {
    /// Its index in the pool (the rotation's).
    pub(super) index: usize,
    pub(super) entry: &'a ModelEntry,
    /// What it reserves per attempt.
    pub(super) reservation: Reservation,
}

/// Which member takes the next attempt.
enum Pick<B: Backend> {
    /// This one (a position in the level's members), admitted.
    Go(usize, Admitted<B>),
    /// Ask again: a breaker changed state while its member decided, or
    /// none admitted the attempt and the first of them has freed since.
    Again,
    /// None can take it within the deadline.
    Refused(LlmError),
}

impl<B: Backend> Engine<B> {
    /// Retries one pool level until a member answers, the level gives up,
    /// or the deadline passes (see the module docs); the answer and the
    /// member that gave it.
    pub(super) async fn run_pool<'m, C: Call<B>>(
        &self,
        call: &C,
        members: &[Member<'m>],
        rotation: &Rotation,
        share_end: Instant,
        deadline: Instant,
        event: &mut Event<B>,
    ) -> Result<(C::Output, &'m ModelEntry), LevelEnd> {
        let mut prepared: Vec<Option<<C::Request as Request<B>>::Prepared>> =
            members.iter().map(|_| None).collect();
        let mut failed = vec![false; members.len()];
        loop {
            if Instant::now() >= deadline {
                return Err(LevelEnd::Next(event.deadline_error()));
            }
            let open: Vec<usize> = (0..members.len()).filter(|&i| !failed[i]).collect();
            let (at, admitted) = match self
                .pick(
                    members,
                    &open,
                    rotation,
                    event.payer.as_ref(),
                    share_end,
                    deadline,
                )
                .await
            {
                Pick::Go(at, admitted) => (at, admitted),
                Pick::Again => continue,
                Pick::Refused(e) => return Err(LevelEnd::Next(e)),
            };
            let member = &members[at];
            let m = member.entry;
            let Some(provider) = self.providers.get(&m.provider) else {
                return Err(LevelEnd::Next(LlmError::NoAnswer));
            };
            let request =
                prepared[at].get_or_insert_with(|| call.request().prepare(m, provider, &member.reservation));
            let reservation = member.reservation;
            let (e, cost) = match self
                .attempt(
                    call,
                    (m, provider, &*request),
                    admitted,
                    reservation,
                    deadline,
                    event,
                )
                .await
            {
                Ok(output) => return Ok((output, m)),
                Err(failed) => failed,
            };
            failed[at] = true;
            let next = m.price.cost(reservation.input_tokens, reservation.output_tokens);
            let decision = event
                .retry
                .on_failure(&e.kind, cost, next, self.clock.now_nanos());
            tracing::debug!(model = %m.key, error = %e.kind, ?decision, "pool attempt failed");
            let movable = matches!(e.kind.disposition(), Disposition::Retry | Disposition::Fallback)
                && event.retry.budget().allows(next);
            let err = upstream(m, e);
            if movable && failed.contains(&false) {
                // Another deployment at once: no backoff for a member
                // that has not failed.
                Metrics::add(&self.metrics.retries, 1);
                continue;
            }
            match decision {
                Decision::RetryAfter(wait) => {
                    Metrics::add(&self.metrics.retries, 1);
                    tokio::time::sleep_until((Instant::now() + wait).min(deadline)).await;
                    failed.fill(false);
                }
                Decision::GiveUp(reason) => return Err(given_up(err, &reason, event)),
            }
        }
    }

    /// The member of `open` that takes the next attempt: the first in the
    /// rotation's order that admits it now; when none does, [`Pick::Again`]
    /// once the first of them frees (see the module docs).
    async fn pick(
        &self,
        members: &[Member<'_>],
        open: &[usize],
        rotation: &Rotation,
        payer: Option<&Nest<B>>,
        share_end: Instant,
        deadline: Instant,
    ) -> Pick<B> {
        let pool_indexes = indexes(members, open);
        let mut soonest: Option<Instant> = None;
        let mut refusal: Option<LlmError> = None;
        for index in rotation.order(&pool_indexes) {
            let Some(at) = members.iter().position(|m| m.index == index) else {
                continue;
            };
            let now = Instant::now();
            match self.gate_member(&members[at], payer, now).await {
                Gate::Go(bp, permit, paid) => {
                    rotation.took(index, &pool_indexes);
                    return Pick::Go(at, (bp, permit, paid));
                }
                Gate::Again => return Pick::Again,
                Gate::Refused(e) => match self.frees_at(&members[at], &e, share_end, deadline) {
                    Some(at) => soonest = Some(soonest.map_or(at, |s| s.min(at))),
                    None if refusal.as_ref().is_none_or(|r| sooner(&e, r)) => refusal = Some(e),
                    None => {}
                },
            }
        }
        match soonest {
            Some(at) => {
                tokio::time::sleep_until(at.max(Instant::now() + MIN_POOL_WAIT)).await;
                Pick::Again
            }
            None => Pick::Refused(refusal.unwrap_or(LlmError::NoAnswer)),
        }
    }

    /// When `member`, which refused an attempt with `e`, could take one:
    /// `None` when it will not within the time the level may wait — an
    /// open breaker, the payer's refusal, a demand that never fits, a hold
    /// past `share_end` or a limiter wait past `deadline`.
    fn frees_at(
        &self,
        member: &Member<'_>,
        e: &LlmError,
        share_end: Instant,
        deadline: Instant,
    ) -> Option<Instant> {
        let m = member.entry;
        let LlmError::NoCapacity {
            resource,
            retry_after: Some(wait),
        } = e
        else {
            return None;
        };
        // The member's own limiter or hold, not the payer's.
        if *resource != resource_id(&m.provider, &m.model) {
            return None;
        }
        let bound = if m.held(self.clock.now_nanos()).is_some() {
            share_end.min(deadline)
        } else {
            deadline
        };
        let at = Instant::now() + *wait;
        (at <= bound).then_some(at)
    }

    /// The gate of one attempt on `member` that waits for nothing (a hold,
    /// the limiter): whether it admits the attempt at `now`.
    async fn gate_member(&self, member: &Member<'_>, payer: Option<&Nest<B>>, now: Instant) -> Gate<B> {
        let m = member.entry;
        let breaker = self.breakers.get(&m.provider, &m.model);
        self.gate(m, &breaker, &member.reservation, payer, now, now).await
    }
}

/// Whether `a` says to ask again sooner than `b` (a refusal that says
/// nothing comes last): the level's refusal is the one that lets the
/// chain's retry hint be the soonest.
fn sooner(a: &LlmError, b: &LlmError) -> bool {
    match (a.retry_after(), b.retry_after()) {
        (Some(x), Some(y)) => x < y,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// The pool indexes of the members at the positions `open`.
fn indexes(members: &[Member<'_>], open: &[usize]) -> Vec<usize> {
    open.iter().map(|&at| members[at].index).collect()
}
