//! The counters of descriptors, bounded without ever forgetting a live one.
//!
//! Each distinct descriptor (one per client address, user, API key...) is
//! counted on its own resource, registered lazily on the broker. At most
//! `max` of them are kept. The rule that keeps a flood of distinct values
//! from resetting anyone's count:
//!
//! * **Only a counter whose windows have fully passed is ever dropped**:
//!   nothing granted on it is still counted (the last grant is older than
//!   its longest window plus two sub-windows), and no call in flight holds
//!   it. Dropping it loses nothing: a fresh counter would decide the same.
//!   A counter over its limit, idle or not, is kept until its window
//!   has passed.
//! * **When every slot is live, a new value shares its rule's overflow
//!   counter**: one counter per rule (`rls:<domain>:~overflow/<rule>`),
//!   with the rule's limit, on which every value that found no slot is
//!   counted together. So a flood of new values is itself limited (to the
//!   rule's `requests_per_unit` per unit, all of them together), and the
//!   values that already have a counter keep it and their counts. While
//!   that overflow counter still counts units, new values of the rule keep
//!   going to it even once slots are free again, so a value counted there
//!   cannot get a fresh, empty counter inside its window.
//! * Overflow counters are per rule of the config (and per limit Envoy
//!   sends with a descriptor); at most [`MAX_OVERFLOW`] are kept. Past that
//!   (only a caller sending thousands of different `limit` overrides gets
//!   there) a descriptor that finds no counter is refused (`OVER_LIMIT`),
//!   counted nowhere.
//!
//! The sweep that looks for passed counters runs when the table is full,
//! at most once per [`SWEEP_EVERY_NS`], so a flood does not pay a scan per
//! call.
//!
//! With a store that keeps the state itself (Redis), nothing here applies:
//! dropping a local handle loses nothing (the count is in Redis and
//! expires there), so each call takes its handle from the broker, whose
//! own bound evicts idle handles.

use pressure_core::clock::{Clock, MonotonicClock};
use pressure_core::{Backend, Error as CoreError, LimitTemplate, ResourceBroker, ResourceHandle};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Most overflow counters kept (module docs).
pub(crate) const MAX_OVERFLOW: usize = 1_024;

/// A full table is swept for passed counters at most this often.
pub(crate) const SWEEP_EVERY_NS: u64 = 100_000_000;

/// One counter: the broker's handle (which keeps the broker from evicting
/// it) and when it last may have counted something.
#[derive(Debug)]
pub(crate) struct Counter<B: Backend> {
    pub(crate) handle: ResourceHandle<B>,
    /// Clock nanoseconds of its latest use that may have counted units.
    last: AtomicU64,
    /// Whether this is a rule's shared overflow counter.
    pub(crate) overflow: bool,
}

impl<B: Backend> Counter<B> {
    fn new(handle: ResourceHandle<B>, now: u64, overflow: bool) -> Self {
        Self {
            handle,
            last: AtomicU64::new(now),
            overflow,
        }
    }

    /// Marks a use at `now` (before it acquires, and again after a grant).
    pub(crate) fn touch(&self, now: u64) {
        self.last.fetch_max(now, Ordering::AcqRel);
    }

    /// Whether units counted on it may still be counted at `now`: its
    /// latest use is within its longest window (plus two sub-windows, so a
    /// unit counted late in a sub-window has surely left).
    fn live(&self, now: u64) -> bool {
        let span = self
            .handle
            .spec()
            .rates
            .iter()
            .map(|r| r.window_ns.saturating_add(r.sub_window_ns.saturating_mul(2)))
            .max()
            .unwrap_or(0);
        now < self.last.load(Ordering::Acquire).saturating_add(span)
    }
}

/// The bounded table of counters (module docs).
#[derive(Debug)]
pub(crate) struct Counters<B: Backend> {
    max: usize,
    /// The state lives in a shared store (Redis): no table.
    store_keeps_state: bool,
    clock: Arc<dyn Clock>,
    table: parking_lot::RwLock<HashMap<Arc<str>, Arc<Counter<B>>>>,
    overflow: parking_lot::RwLock<HashMap<Arc<str>, Arc<Counter<B>>>>,
    /// Clock nanoseconds before which a full table is not swept again.
    next_sweep: AtomicU64,
}

/// What [`Counters::get`] found for a descriptor.
pub(crate) enum Found<B: Backend> {
    /// Its own counter, or its rule's overflow counter.
    Counter(Arc<Counter<B>>),
    /// Every slot is live and no overflow counter can be kept: refuse.
    Full,
}

impl<B: Backend> Counters<B> {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            store_keeps_state: false,
            clock: Arc::new(MonotonicClock::new()),
            table: parking_lot::RwLock::new(HashMap::new()),
            overflow: parking_lot::RwLock::new(HashMap::new()),
            next_sweep: AtomicU64::new(0),
        }
    }

    pub(crate) fn set_max(&mut self, max: usize) {
        self.max = max.max(1);
    }

    pub(crate) fn set_store_keeps_state(&mut self, yes: bool) {
        self.store_keeps_state = yes;
    }

    pub(crate) fn set_clock(&mut self, clock: Arc<dyn Clock>) {
        self.clock = clock;
    }

    /// Clock nanoseconds now.
    pub(crate) fn now(&self) -> u64 {
        self.clock.now_nanos()
    }

    /// Counters held now (overflow ones not included).
    pub(crate) fn len(&self) -> usize {
        self.table.read().len()
    }

    /// The counter of `id` for `template`'s rule, registered on first use;
    /// `overflow` names the rule's overflow counter, asked only when `id`
    /// has no counter and finds no slot.
    pub(crate) fn get(
        &self,
        broker: &ResourceBroker<B>,
        id: &str,
        template: &LimitTemplate,
        overflow: impl FnOnce() -> String,
    ) -> Result<Found<B>, CoreError> {
        let now = self.now();
        if self.store_keeps_state {
            let handle = broker.lazy_limit(id, template)?;
            return Ok(Found::Counter(Arc::new(Counter::new(handle, now, false))));
        }
        if let Some(c) = self.table.read().get(id) {
            c.touch(now);
            return Ok(Found::Counter(Arc::clone(c)));
        }
        let overflow_id = overflow();
        // A live overflow counter of the rule takes every new value (module
        // docs): one counted there must not get an empty counter of its own.
        if let Some(c) = self.overflow.read().get(overflow_id.as_str()) {
            if c.live(now) {
                c.touch(now);
                return Ok(Found::Counter(Arc::clone(c)));
            }
        }
        {
            let mut table = self.table.write();
            if let Some(c) = table.get(id) {
                c.touch(now);
                return Ok(Found::Counter(Arc::clone(c)));
            }
            if table.len() >= self.max {
                self.sweep(broker, &mut table, now);
            }
            if table.len() < self.max {
                let handle = broker.lazy_limit(id, template)?;
                let c = Arc::new(Counter::new(handle, now, false));
                table.insert(Arc::from(id), Arc::clone(&c));
                return Ok(Found::Counter(c));
            }
        }
        let mut map = self.overflow.write();
        if let Some(c) = map.get(overflow_id.as_str()) {
            c.touch(now);
            return Ok(Found::Counter(Arc::clone(c)));
        }
        if map.len() >= MAX_OVERFLOW {
            map.retain(|id, c| {
                let keep = Arc::strong_count(c) > 1 || c.live(now);
                if !keep {
                    broker.unregister(id);
                }
                keep
            });
            if map.len() >= MAX_OVERFLOW {
                return Ok(Found::Full);
            }
        }
        let handle = broker.lazy_limit(&overflow_id, template)?;
        let c = Arc::new(Counter::new(handle, now, true));
        map.insert(Arc::from(overflow_id), Arc::clone(&c));
        Ok(Found::Counter(c))
    }

    /// Drops every counter whose windows have passed and that no call
    /// holds, at most once per [`SWEEP_EVERY_NS`].
    fn sweep(&self, broker: &ResourceBroker<B>, table: &mut HashMap<Arc<str>, Arc<Counter<B>>>, now: u64) {
        if now < self.next_sweep.load(Ordering::Relaxed) {
            return;
        }
        self.next_sweep
            .store(now.saturating_add(SWEEP_EVERY_NS), Ordering::Relaxed);
        // Under the write lock nobody can take a new reference, so a count
        // of one (the table's) means no call holds it.
        table.retain(|id, c| {
            let keep = Arc::strong_count(c) > 1 || c.live(now);
            if !keep {
                broker.unregister(id);
            }
            keep
        });
    }
}
