//! [`CircuitBreaker`]: the state machine behind a lock, and [`CallPermit`],
//! the right to make one call.
//!
//! * **Closed**: every [`CircuitBreaker::try_acquire`] succeeds. Each
//!   reported outcome goes into the sliding time window; once the window
//!   holds at least `minimumCalls` calls and the failure rate (or, when
//!   enabled, the slow-call rate) is at or above its threshold, the breaker
//!   opens for `openWaitMs`.
//! * **Open**: `try_acquire` fails with [`Rejected`] carrying the time left,
//!   so the caller makes no network call. The first `try_acquire`, `state`
//!   or `snapshot` after the wait (checked lazily with the injected clock)
//!   turns it half-open.
//! * **HalfOpen**: at most `halfOpenProbes` permits are out at once; further
//!   callers are rejected with `retry_in` zero (the outcome is pending). As
//!   in resilience4j, the probes' rates are evaluated once all
//!   `halfOpenProbes` reported: below the thresholds → closed with a fresh
//!   window, otherwise → open again. The breaker reopens early when the
//!   failures (or slow calls) alone already reach the threshold of
//!   `halfOpenProbes` calls, because the outcome can no longer change.
//! * [`CircuitBreaker::open_for`] forces open until a provider's
//!   retry-after; it only ever lengthens an open period.
//!
//! Every transition bumps a generation number. A permit reports only into
//! the generation it was issued in: an outcome arriving after the state
//! changed (a slow call that was admitted while closed and ends after the
//! breaker opened) is ignored, like resilience4j, whose window is reset on
//! every transition anyway.
//!
//! A permit dropped without a report (the call was cancelled, or the error
//! says nothing about the provider's health, see [`CallPermit::ignore`])
//! records nothing and gives a half-open probe slot back, as resilience4j
//! does for ignored exceptions and `releasePermission`.

use super::config::BreakerConfig;
use super::fleet::FleetLink;
use super::state::{State, Transition, TransitionReason};
use super::window::{Counts, SlidingWindow};
use parking_lot::Mutex;
use pressure_core::clock::{duration_to_nanos, Clock};
use pressure_core::shared_breaker::{ProbeGrant, ProbeOutcome, SharedCircuit, SharedState};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A callback run after every transition, outside the breaker's lock (e.g.
/// to update a state gauge). It must not block.
pub type TransitionHook = Arc<dyn Fn(&Transition) + Send + Sync>;

/// A [`BreakerConfig`] that failed [`BreakerConfig::validate`] (the JSON
/// name of the field, and what is wrong with it).
pub type InvalidBreakerConfig = pressure_core::FieldError;

/// The breaker refused a call: make no network call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("circuit breaker {state}, retry in {retry_in:?}")]
pub struct Rejected {
    /// [`State::Open`], or [`State::HalfOpen`] when all probe slots are taken.
    pub state: State,
    /// Open: time left until probes are admitted. Half-open: zero (a probe
    /// is under way; its outcome decides).
    pub retry_in: Duration,
}

/// Counts and state of a breaker, for metrics and admin endpoints.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerSnapshot {
    /// The breaker's name.
    pub name: Arc<str>,
    /// The state now (after a lazy open → half-open check).
    pub state: State,
    /// Closed: calls in the window; half-open: probes reported; open: the
    /// calls that decided the opening (zero if forced from a fresh state).
    pub calls: u64,
    /// Failed calls among `calls`.
    pub failures: u64,
    /// Slow calls among `calls`.
    pub slow_calls: u64,
    /// `failures / calls` (0 without calls).
    pub failure_rate: f64,
    /// `slow_calls / calls` (0 without calls).
    pub slow_call_rate: f64,
    /// Half-open: probe permits out and not yet reported.
    pub probes_in_flight: u32,
    /// Open: time left until half-open; otherwise zero.
    pub retry_in: Duration,
    /// Transitions since creation.
    pub transitions: u64,
    /// Transitions into open since creation.
    pub times_opened: u64,
    /// Calls rejected since creation (no network call made).
    pub rejected: u64,
}

/// A circuit breaker for one (provider, model). Cloning is cheap and shares
/// the state; it is `Send + Sync`.
#[derive(Clone)]
pub struct CircuitBreaker {
    shared: Arc<Shared>,
}

struct Shared {
    name: Arc<str>,
    config: BreakerConfig,
    clock: Arc<dyn Clock>,
    hook: Option<TransitionHook>,
    /// Fleet scope: the link to the shared state.
    fleet: Option<Arc<FleetLink>>,
    inner: Mutex<Core>,
    transitions: AtomicU64,
    times_opened: AtomicU64,
    rejected: AtomicU64,
}

/// The state of one breaker, behind its lock.
struct Core {
    state: State,
    /// Bumped on every transition; permits carry the one they were issued in.
    generation: u64,
    /// Closed: the sliding window (reset on entering closed).
    window: SlidingWindow,
    /// Open: clock nanos at which it turns half-open.
    open_until: u64,
    /// Half-open: probe permits handed out (reported or in flight).
    probes_admitted: u32,
    /// Half-open: outcomes of the probes.
    probes: Counts,
    /// Open: the counts that opened it.
    opened_with: Counts,
}

impl fmt::Debug for CircuitBreaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("name", &self.shared.name)
            .field("state", &self.shared.inner.lock().state)
            .field("config", &self.shared.config)
            .finish()
    }
}

impl CircuitBreaker {
    /// A closed breaker named `name` (used in logs and snapshots), reading
    /// time from `clock`.
    pub fn new(
        name: impl Into<Arc<str>>,
        config: BreakerConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, InvalidBreakerConfig> {
        Self::with_hook(name, config, clock, None)
    }

    /// Like [`CircuitBreaker::new`], with a hook called after every
    /// transition.
    pub fn with_hook(
        name: impl Into<Arc<str>>,
        config: BreakerConfig,
        clock: Arc<dyn Clock>,
        hook: Option<TransitionHook>,
    ) -> Result<Self, InvalidBreakerConfig> {
        config.validate()?;
        Ok(Self::from_valid(name.into(), config, clock, hook, None))
    }

    /// Builds from an already validated config.
    pub(crate) fn from_valid(
        name: Arc<str>,
        config: BreakerConfig,
        clock: Arc<dyn Clock>,
        hook: Option<TransitionHook>,
        fleet: Option<Arc<FleetLink>>,
    ) -> Self {
        let now = clock.now_nanos();
        let window = SlidingWindow::new(config.bucket_ms(), config.buckets(), now);
        let inner = Core {
            state: State::Closed,
            generation: 0,
            window,
            open_until: 0,
            probes_admitted: 0,
            probes: Counts::default(),
            opened_with: Counts::default(),
        };
        Self {
            shared: Arc::new(Shared {
                name,
                config,
                clock,
                hook,
                fleet,
                inner: Mutex::new(inner),
                transitions: AtomicU64::new(0),
                times_opened: AtomicU64::new(0),
                rejected: AtomicU64::new(0),
            }),
        }
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Its settings.
    pub fn config(&self) -> &BreakerConfig {
        &self.shared.config
    }

    /// Asks to make one call. `Err` means: make no network call (the
    /// breaker is open, or half-open with every probe slot taken). On `Ok`,
    /// report the outcome on the permit; dropping it reports nothing.
    pub fn try_acquire(&self) -> Result<CallPermit, Rejected> {
        let s = &self.shared;
        let result = s.after_expiry(|g, now| match g.state {
            State::Closed => Ok((g.generation, false, now)),
            State::Open => Err(Rejected {
                state: State::Open,
                retry_in: Duration::from_nanos(g.open_until.saturating_sub(now)),
            }),
            State::HalfOpen => {
                if g.probes_admitted < s.config.half_open_probes {
                    g.probes_admitted += 1;
                    Ok((g.generation, true, now))
                } else {
                    Err(Rejected {
                        state: State::HalfOpen,
                        retry_in: Duration::ZERO,
                    })
                }
            }
        });
        match result {
            Ok((generation, probe, started)) => Ok(CallPermit {
                shared: Arc::clone(s),
                generation,
                probe,
                started,
                done: false,
                fleet_epoch: None,
            }),
            Err(rejected) => {
                s.rejected.fetch_add(1, Ordering::Relaxed);
                tracing::trace!(breaker = %s.name, state = rejected.state.as_str(), "call rejected");
                Err(rejected)
            }
        }
    }

    /// [`try_acquire`](Self::try_acquire), and for a fleet-wide breaker
    /// (`scope` `fleet`) a half-open probe also takes one of the fleet's
    /// probe slots: one store round trip, for probes only. When the fleet
    /// refuses, the local breaker adopts the fleet's state (a fleet that
    /// is closed again admits the call as a normal one); when the store is
    /// unreachable, the local breaker decides alone.
    pub async fn acquire(&self) -> Result<CallPermit, Rejected> {
        let mut permit = self.try_acquire()?;
        let Some(link) = self.shared.fleet.as_ref().filter(|_| permit.probe) else {
            return Ok(permit);
        };
        match link.acquire_probe().await {
            Ok(ProbeGrant::Granted { epoch }) => {
                permit.fleet_epoch = Some(epoch);
                Ok(permit)
            }
            Ok(ProbeGrant::Refused(circuit)) => {
                drop(permit);
                self.apply_fleet(&circuit);
                if circuit.state == SharedState::Closed {
                    return self.try_acquire();
                }
                self.shared.rejected.fetch_add(1, Ordering::Relaxed);
                Err(Rejected {
                    state: match circuit.state {
                        SharedState::Open => State::Open,
                        _ => State::HalfOpen,
                    },
                    retry_in: circuit.retry_in,
                })
            }
            Err(_) => Ok(permit),
        }
    }

    /// Adopts the fleet's shared state (transition reason `fleet`): open
    /// until the fleet's time (never shortening a local open period),
    /// half-open, or closed with a fresh window. Nothing is published back.
    /// A local open period that ended unseen is not turned half-open first:
    /// the fleet's state decides (no open → half-open → open flap).
    pub(crate) fn apply_fleet(&self, c: &SharedCircuit) {
        let s = &self.shared;
        let event = {
            let mut g = s.inner.lock();
            let now = s.clock.now_nanos();
            // Local expiry a little after the fleet's, so the local breaker
            // asks for probes once the fleet grants them.
            let until = now
                .saturating_add(duration_to_nanos(c.retry_in))
                .saturating_add(duration_to_nanos(FLEET_SKEW));
            let to = match (g.state, c.state) {
                (State::Open, SharedState::Open) => {
                    g.open_until = g.open_until.max(until);
                    None
                }
                (_, SharedState::Open) => Some(State::Open),
                (State::HalfOpen, SharedState::HalfOpen) | (State::Closed, SharedState::Closed) => None,
                (_, SharedState::HalfOpen) => Some(State::HalfOpen),
                (_, SharedState::Closed) => Some(State::Closed),
            };
            to.map(|to| {
                let counts = s.current_counts(&mut g, now);
                s.transition(&mut g, now, to, TransitionReason::Fleet, counts, until)
            })
        };
        s.emit(event);
    }

    /// The link to the fleet, for a fleet-wide breaker.
    pub(crate) fn fleet_link(&self) -> Option<&Arc<FleetLink>> {
        self.shared.fleet.as_ref()
    }

    /// Forces the breaker open for `d` (a provider's retry-after), from any
    /// state. An open breaker stays open until the later of its current end
    /// and `now + d`; a zero `d` never opens a breaker that is not open.
    pub fn open_for(&self, d: Duration) {
        let s = &self.shared;
        let event = {
            let mut g = s.inner.lock();
            let now = s.clock.now_nanos();
            let until = now.saturating_add(duration_to_nanos(d));
            match g.state {
                State::Open => {
                    if until > g.open_until {
                        g.open_until = until;
                        if let Some(link) = &s.fleet {
                            link.opened(d);
                        }
                    }
                    None
                }
                _ if d.is_zero() => None,
                State::Closed | State::HalfOpen => {
                    let counts = s.current_counts(&mut g, now);
                    Some(s.transition(&mut g, now, State::Open, TransitionReason::Forced, counts, until))
                }
            }
        };
        s.emit(event);
    }

    /// The state now; turns an open breaker whose wait elapsed half-open.
    pub fn state(&self) -> State {
        self.shared.after_expiry(|g, _| g.state)
    }

    /// Transitions since creation.
    pub fn transitions(&self) -> u64 {
        self.shared.transitions.load(Ordering::Relaxed)
    }

    /// State and counts, for metrics.
    pub fn snapshot(&self) -> BreakerSnapshot {
        let s = &self.shared;
        s.after_expiry(|g, now| {
            let counts = s.current_counts(g, now);
            BreakerSnapshot {
                name: Arc::clone(&s.name),
                state: g.state,
                calls: counts.calls,
                failures: counts.failures,
                slow_calls: counts.slow,
                failure_rate: counts.failure_rate(),
                slow_call_rate: counts.slow_call_rate(),
                probes_in_flight: match g.state {
                    State::HalfOpen => {
                        let reported = u32::try_from(g.probes.calls).unwrap_or(u32::MAX);
                        g.probes_admitted.saturating_sub(reported)
                    }
                    _ => 0,
                },
                retry_in: match g.state {
                    State::Open => Duration::from_nanos(g.open_until.saturating_sub(now)),
                    _ => Duration::ZERO,
                },
                transitions: s.transitions.load(Ordering::Relaxed),
                times_opened: s.times_opened.load(Ordering::Relaxed),
                rejected: s.rejected.load(Ordering::Relaxed),
            }
        })
    }
}

impl Shared {
    /// The counts that matter in the current state.
    fn current_counts(&self, g: &mut Core, now: u64) -> Counts {
        match g.state {
            State::Closed => {
                g.window.advance(now);
                g.window.totals()
            }
            State::HalfOpen => g.probes,
            State::Open => g.opened_with,
        }
    }

    /// Runs `f` under the lock at the current time, once an open breaker
    /// whose wait is over has turned half-open; that transition is emitted
    /// after the lock is released.
    fn after_expiry<T>(&self, f: impl FnOnce(&mut Core, u64) -> T) -> T {
        let (out, event) = {
            let mut g = self.inner.lock();
            let now = self.clock.now_nanos();
            let event = self.expire_open(&mut g, now);
            (f(&mut g, now), event)
        };
        self.emit(event);
        out
    }

    /// Open → half-open once the wait is over.
    fn expire_open(&self, g: &mut Core, now: u64) -> Option<Transition> {
        if g.state == State::Open && now >= g.open_until {
            let counts = g.opened_with;
            Some(self.transition(g, now, State::HalfOpen, TransitionReason::WaitElapsed, counts, 0))
        } else {
            None
        }
    }

    /// Changes state under the lock; the caller emits the result after
    /// releasing it. `open_until` is used only when `to` is open.
    fn transition(
        &self,
        g: &mut Core,
        now: u64,
        to: State,
        reason: TransitionReason,
        counts: Counts,
        open_until: u64,
    ) -> Transition {
        let from = g.state;
        g.state = to;
        g.generation = g.generation.wrapping_add(1);
        g.probes_admitted = 0;
        g.probes = Counts::default();
        match to {
            State::Closed => g.window.reset(now),
            State::Open => {
                g.open_until = open_until;
                g.opened_with = counts;
                self.times_opened.fetch_add(1, Ordering::Relaxed);
            }
            State::HalfOpen => {}
        }
        self.transitions.fetch_add(1, Ordering::Relaxed);
        Transition {
            name: Arc::clone(&self.name),
            from,
            to,
            reason,
            failure_rate: counts.failure_rate(),
            slow_call_rate: counts.slow_call_rate(),
            calls: counts.calls,
            open_for: (to == State::Open).then(|| Duration::from_nanos(open_until.saturating_sub(now))),
            at_nanos: now,
        }
    }

    /// Logs a transition and runs the hook; call without the lock held.
    /// A fleet-wide breaker publishes the openings it decided itself (its
    /// window, a retry-after, a failed probe granted only locally); a probe
    /// granted by the fleet reports its own outcome instead.
    fn emit(&self, event: Option<Transition>) {
        let Some(t) = event else { return };
        if let (Some(link), Some(open_for)) = (&self.fleet, t.open_for) {
            if matches!(
                t.reason,
                TransitionReason::FailureRate | TransitionReason::SlowCallRate | TransitionReason::Forced
            ) {
                link.opened(open_for);
            }
        }
        let open_for_ms = t.open_for.map(|d| d.as_millis() as u64);
        // One line per transition with the same fields; a macro because
        // tracing fixes an event's level where it is written.
        macro_rules! transition_event {
            ($level:ident, $($rest:tt)+) => {
                tracing::$level!(
                    name = %t.name,
                    from = t.from.as_str(),
                    to = t.to.as_str(),
                    reason = t.reason.as_str(),
                    failure_rate = t.failure_rate,
                    slow_call_rate = t.slow_call_rate,
                    calls = t.calls,
                    $($rest)+
                )
            };
        }
        match t.to {
            State::Open => transition_event!(warn, open_for_ms, "circuit breaker opened"),
            State::HalfOpen | State::Closed => transition_event!(
                info,
                "circuit breaker {}",
                if t.to == State::Closed {
                    "closed"
                } else {
                    "half-open"
                }
            ),
        }
        if let Some(hook) = &self.hook {
            hook(&t);
        }
    }

    /// Does `counts` trip the thresholds (given at least `minimum` calls)?
    fn exceeded(&self, counts: Counts, minimum: u64) -> Option<Trip> {
        if counts.calls == 0 || counts.calls < minimum {
            return None;
        }
        if counts.failure_rate() >= self.config.failure_rate_threshold {
            return Some(Trip::Failures);
        }
        if self.config.slow_calls_enabled() && counts.slow_call_rate() >= self.config.slow_call_rate_threshold
        {
            return Some(Trip::Slow);
        }
        None
    }

    /// Records the outcome of a permit's call (`fleet_epoch`: the fleet
    /// probe it was, reported to the fleet whatever the local state).
    fn record(&self, generation: u64, failed: bool, duration: Duration, fleet_epoch: Option<u64>) {
        let slow = duration > self.config.slow_call_duration();
        if let (Some(link), Some(epoch)) = (&self.fleet, fleet_epoch) {
            let bad = failed || (slow && self.config.slow_calls_enabled());
            let outcome = if bad {
                ProbeOutcome::Failure
            } else {
                ProbeOutcome::Success
            };
            link.probe_done(epoch, outcome);
        }
        let event = {
            let mut g = self.inner.lock();
            if g.generation != generation {
                return; // issued before the last transition: ignored
            }
            let now = self.clock.now_nanos();
            match g.state {
                State::Closed => {
                    if let Some(link) = &self.fleet {
                        link.outcome(failed, slow);
                    }
                    g.window.record(now, failed, slow);
                    let counts = g.window.totals();
                    self.exceeded(counts, self.config.minimum_calls).map(|trip| {
                        let reason = match trip {
                            Trip::Failures => TransitionReason::FailureRate,
                            Trip::Slow => TransitionReason::SlowCallRate,
                        };
                        let until = now.saturating_add(duration_to_nanos(self.config.open_wait()));
                        self.transition(&mut g, now, State::Open, reason, counts, until)
                    })
                }
                State::HalfOpen => {
                    g.probes.add(failed, slow);
                    let n = u64::from(self.config.half_open_probes);
                    let counts = g.probes;
                    // Probes must all succeed: the first failed (or, with
                    // the slow-call rule on, slow) probe reopens at once.
                    let trip = if failed {
                        Some(Trip::Failures)
                    } else if slow && self.config.slow_calls_enabled() {
                        Some(Trip::Slow)
                    } else {
                        None
                    };
                    match trip {
                        Some(trip) => {
                            let reason = match trip {
                                Trip::Failures => TransitionReason::ProbesFailed,
                                Trip::Slow => TransitionReason::ProbesSlow,
                            };
                            if let (Some(link), None) = (&self.fleet, fleet_epoch) {
                                // A probe the store was down for: publish it.
                                link.opened(self.config.open_wait());
                            }
                            let until = now.saturating_add(duration_to_nanos(self.config.open_wait()));
                            Some(self.transition(&mut g, now, State::Open, reason, counts, until))
                        }
                        None if counts.calls >= n => Some(self.transition(
                            &mut g,
                            now,
                            State::Closed,
                            TransitionReason::ProbesSucceeded,
                            counts,
                            0,
                        )),
                        None => None,
                    }
                }
                // Unreachable: entering open bumps the generation.
                State::Open => None,
            }
        };
        self.emit(event);
    }

    /// A probe permit was dropped without a report: free its slot.
    fn release_probe(&self, generation: u64) {
        let mut g = self.inner.lock();
        if g.generation == generation && g.state == State::HalfOpen {
            g.probes_admitted = g.probes_admitted.saturating_sub(1);
        }
    }
}

/// How much later than the fleet a local breaker it opened turns half-open.
const FLEET_SKEW: Duration = Duration::from_millis(10);

enum Trip {
    Failures,
    Slow,
}

/// The right to make one call through a [`CircuitBreaker`]. Report the
/// outcome with [`CallPermit::success`] or [`CallPermit::failure`]; dropping
/// it (or [`CallPermit::ignore`]) records nothing and frees a half-open probe
/// slot.
#[must_use = "report the call's outcome with success() or failure(); dropping the permit records nothing"]
pub struct CallPermit {
    shared: Arc<Shared>,
    generation: u64,
    probe: bool,
    started: u64,
    done: bool,
    /// The fleet probe epoch, when the fleet granted this probe.
    fleet_epoch: Option<u64>,
}

impl fmt::Debug for CallPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallPermit")
            .field("breaker", &self.shared.name)
            .field("probe", &self.probe)
            .finish()
    }
}

impl CallPermit {
    /// The call succeeded after `duration` (slow if above
    /// `slowCallDurationMs`).
    pub fn success(mut self, duration: Duration) {
        self.done = true;
        self.shared
            .record(self.generation, false, duration, self.fleet_epoch);
    }

    /// The call failed in a way that says the provider is unhealthy
    /// (timeout, 5xx, 529, a rate limit…) after `duration`.
    pub fn failure(mut self, duration: Duration) {
        self.done = true;
        self.shared
            .record(self.generation, true, duration, self.fleet_epoch);
    }

    /// Records nothing: the call was cancelled, or its error says nothing
    /// about the provider's health (e.g. a 400). Same as dropping the permit.
    pub fn ignore(self) {}

    /// Whether this permit is one of the half-open probes.
    pub fn is_probe(&self) -> bool {
        self.probe
    }

    /// Whether the call may still be made: the breaker has not changed
    /// state since it issued this permit. A caller that does more work
    /// between the permit and the call (e.g. waits for the limiter) asks
    /// again right before the call: a permit issued while closed is void
    /// once the breaker opened meanwhile, since open means no network call.
    pub fn is_current(&self) -> bool {
        self.shared.inner.lock().generation == self.generation
    }

    /// Time since the permit was issued, by the breaker's clock.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.shared.clock.now_nanos().saturating_sub(self.started))
    }
}

impl Drop for CallPermit {
    fn drop(&mut self) {
        if !self.done && self.probe {
            self.shared.release_probe(self.generation);
            if let (Some(link), Some(epoch)) = (&self.shared.fleet, self.fleet_epoch) {
                link.probe_done(epoch, ProbeOutcome::Released);
            }
        }
    }
}
