//! [`BreakerRegistry`]: one [`CircuitBreaker`] per (provider, model),
//! created lazily on first use with the registry's config, clock and
//! transition hook.
//!
//! Lookups take a read lock over a two-level map (provider → model), so the
//! hot path neither allocates nor contends; only the first call for a new
//! pair takes the write lock.

use super::circuit::{BreakerSnapshot, CircuitBreaker, InvalidBreakerConfig, TransitionHook};
use super::config::BreakerConfig;
use super::fleet::{FleetHub, FleetLink};
use super::state::Transition;
use super::sync::BreakerMap;
use parking_lot::{Mutex, RwLock};
use pressure_core::clock::Clock;
use pressure_core::shared_breaker::SharedBreakerStore;
use std::collections::HashMap;
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

/// Circuit breakers per (provider, model).
pub struct BreakerRegistry {
    config: BreakerConfig,
    clock: Arc<dyn Clock>,
    hook: Option<TransitionHook>,
    breakers: Arc<BreakerMap>,
    recent: Arc<Mutex<VecDeque<Transition>>>,
    /// Fleet scope: the shared store (its sync task ends with the registry).
    fleet: Option<Arc<FleetHub>>,
}

/// How a fleet-wide registry's store is doing, for the admin page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetStatus {
    /// Whether the last store call succeeded.
    pub healthy: bool,
    /// Store calls that failed (each fell back to the local breaker).
    pub errors: u64,
}

/// How many transitions [`BreakerRegistry::recent_transitions`] keeps.
pub const RECENT_TRANSITIONS: usize = 256;

/// The snapshot of one breaker of a registry.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyedSnapshot {
    /// Provider name.
    pub provider: String,
    /// Model name.
    pub model: String,
    /// The breaker's state and counts.
    pub snapshot: BreakerSnapshot,
}

impl fmt::Debug for BreakerRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerRegistry")
            .field("config", &self.config)
            .field("breakers", &self.len())
            .finish()
    }
}

impl BreakerRegistry {
    /// An empty registry whose breakers use `config` and `clock`.
    pub fn new(config: BreakerConfig, clock: Arc<dyn Clock>) -> Result<Self, InvalidBreakerConfig> {
        Self::with_hook(config, clock, None)
    }

    /// Like [`BreakerRegistry::new`], with a hook every breaker calls after
    /// each of its transitions (e.g. to export the state gauge).
    pub fn with_hook(
        config: BreakerConfig,
        clock: Arc<dyn Clock>,
        hook: Option<TransitionHook>,
    ) -> Result<Self, InvalidBreakerConfig> {
        config.validate()?;
        let recent = Arc::new(Mutex::new(VecDeque::with_capacity(RECENT_TRANSITIONS)));
        let log = Arc::clone(&recent);
        let recording: TransitionHook = Arc::new(move |t: &Transition| {
            {
                let mut log = log.lock();
                if log.len() == RECENT_TRANSITIONS {
                    log.pop_front();
                }
                log.push_back(t.clone());
            }
            if let Some(hook) = &hook {
                hook(t);
            }
        });
        Ok(Self {
            config,
            clock,
            hook: Some(recording),
            breakers: Arc::new(RwLock::new(HashMap::new())),
            recent,
            fleet: None,
        })
    }

    /// Like [`BreakerRegistry::with_hook`], with every breaker shared by the
    /// fleet through `store` (`scope` `fleet`, see `super::fleet`): a task
    /// on the current tokio runtime flushes outcomes to the store and
    /// applies its state every [`super::SYNC_INTERVAL`], until the registry
    /// is dropped. Fails outside a tokio runtime.
    pub fn fleet(
        config: BreakerConfig,
        clock: Arc<dyn Clock>,
        hook: Option<TransitionHook>,
        store: Arc<dyn SharedBreakerStore>,
    ) -> Result<Self, InvalidBreakerConfig> {
        let mut reg = Self::with_hook(config, clock, hook)?;
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| pressure_core::FieldError::new("scope", "fleet breakers need a tokio runtime"))?;
        let hub = Arc::new(FleetHub::new(store, reg.config.circuit_rules()));
        runtime.spawn(super::sync::run(Arc::downgrade(&reg.breakers), Arc::clone(&hub)));
        reg.fleet = Some(hub);
        Ok(reg)
    }

    /// Whether the breakers are shared by the fleet, and how its store is
    /// doing; `None` for per-process breakers.
    pub fn fleet_status(&self) -> Option<FleetStatus> {
        self.fleet.as_ref().map(|h| FleetStatus {
            healthy: h.is_healthy(),
            errors: h.errors(),
        })
    }

    /// The config of every breaker.
    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    /// The breaker of (`provider`, `model`), created closed on first use. Its
    /// name is `provider/model`.
    pub fn get(&self, provider: &str, model: &str) -> Arc<CircuitBreaker> {
        if let Some(b) = self.breakers.read().get(provider).and_then(|m| m.get(model)) {
            return Arc::clone(b);
        }
        let mut map = self.breakers.write();
        let models = map.entry(provider.to_owned()).or_default();
        let breaker = models.entry(model.to_owned()).or_insert_with(|| {
            let name: Arc<str> = Arc::from(format!("{provider}/{model}"));
            let link = self.fleet.as_ref().map(|hub| {
                // Learn the fleet's state now rather than at the next tick.
                hub.wake.notify_one();
                Arc::new(FleetLink::new(Arc::clone(&name), Arc::clone(hub)))
            });
            Arc::new(CircuitBreaker::from_valid(
                name,
                self.config.clone(),
                Arc::clone(&self.clock),
                self.hook.clone(),
                link,
            ))
        });
        Arc::clone(breaker)
    }

    /// The last [`RECENT_TRANSITIONS`] transitions of every breaker, oldest
    /// first: what an operator (or the chaos report) reads to see when a
    /// breaker opened, probed and closed. `at_nanos` is on [`clock`](Self::clock).
    pub fn recent_transitions(&self) -> Vec<Transition> {
        self.recent.lock().iter().cloned().collect()
    }

    /// The clock the breakers run on.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Number of breakers created so far.
    pub fn len(&self) -> usize {
        self.breakers.read().values().map(HashMap::len).sum()
    }

    /// Whether no breaker was created yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Snapshots of every breaker, sorted by provider then model.
    pub fn snapshot(&self) -> Vec<KeyedSnapshot> {
        // Collect the breakers first so no breaker lock is taken under the map lock.
        let breakers: Vec<(String, String, Arc<CircuitBreaker>)> = self
            .breakers
            .read()
            .iter()
            .flat_map(|(p, models)| {
                models
                    .iter()
                    .map(move |(m, b)| (p.clone(), m.clone(), Arc::clone(b)))
            })
            .collect();
        let mut out: Vec<KeyedSnapshot> = breakers
            .into_iter()
            .map(|(provider, model, b)| KeyedSnapshot {
                provider,
                model,
                snapshot: b.snapshot(),
            })
            .collect();
        out.sort_by(|a, b| (&a.provider, &a.model).cmp(&(&b.provider, &b.model)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::State;
    use pressure_core::clock::ManualClock;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn transitions_are_kept_bounded_and_the_hook_still_runs() {
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&calls);
        let hook: TransitionHook = Arc::new(move |_| {
            seen.fetch_add(1, Ordering::Relaxed);
        });
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::default());
        let reg = BreakerRegistry::with_hook(BreakerConfig::default(), clock, Some(hook)).unwrap();
        assert!(reg.recent_transitions().is_empty());
        let b = reg.get("p", "m");
        b.open_for(Duration::from_secs(1));
        let recent = reg.recent_transitions();
        assert_eq!(recent.len(), 1);
        assert_eq!((recent[0].from, recent[0].to), (State::Closed, State::Open));
        assert_eq!(&*recent[0].name, "p/m");
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        for i in 0..RECENT_TRANSITIONS {
            reg.get("p", &format!("other{i}"))
                .open_for(Duration::from_secs(1));
        }
        let recent = reg.recent_transitions();
        assert_eq!(recent.len(), RECENT_TRANSITIONS, "the log is bounded");
        assert_eq!(&*recent[0].name, "p/other0", "the oldest went first");
        assert_eq!(calls.load(Ordering::Relaxed), 1 + RECENT_TRANSITIONS);
    }
}
