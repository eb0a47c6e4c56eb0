//! [`PermitStore`]: the permits the decision listener holds for its clients
//! between `POST /v1/acquire` and `POST /v1/permits/{id}/release`.
//!
//! * An id is 128 random bits in lower-case hex: unguessable, so a client
//!   can only release or renew the permits it was given.
//! * The store is bounded (`gateway.decisions.maxPermits`): a client that
//!   acquires without ever releasing cannot grow it without end. A place is
//!   reserved ([`PermitStore::reserve`]) before the capacity is acquired,
//!   so a full store refuses before anything is consumed, and a
//!   reservation dropped unfilled (a denial, a client gone mid-request)
//!   gives its place back.
//! * The core renews a concurrency lease for as long as its [`Permit`]
//!   lives, so the store must not keep a permit alive for a client that
//!   died: each permit expires its lease TTL after its acquisition or its
//!   last renewal, and a sweeper task drops the expired ones (which gives
//!   their slots back). A dead client loses its slot after the TTL, as a
//!   crashed process does in-process.

use crate::backend::AnyBackend;
use parking_lot::Mutex;
use pressure_core::Permit;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::time::Instant;

/// How often the sweeper looks for expired permits: the precision of the
/// expiry (a permit is gone at most this long after its TTL).
const SWEEP_EVERY: Duration = Duration::from_millis(50);

/// A held permit, shared by the calls that use it (release, reconcile).
pub(crate) type Shared = Arc<tokio::sync::Mutex<Permit<AnyBackend>>>;

/// Why a permit could not be stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Full;

struct Held {
    permit: Shared,
    ttl: Duration,
    expires: Instant,
}

#[derive(Default)]
struct State {
    by_id: HashMap<String, Held>,
    by_expiry: BTreeSet<(Instant, String)>,
    /// Places reserved by acquisitions under way ([`Slot`]s not filled or
    /// dropped yet); they count against the bound with the held permits.
    reserved: usize,
}

/// A place in the [`PermitStore`] reserved for a permit not acquired yet:
/// [`Slot::fill`] holds the permit in it; dropped unfilled, the place is
/// free again.
#[must_use = "a slot is given back when dropped"]
pub(crate) struct Slot {
    store: Arc<PermitStore>,
    filled: bool,
}

impl Slot {
    /// Holds `permit` for `ttl` in the reserved place and returns its new
    /// id (never refused: the place was counted when it was reserved).
    pub(crate) fn fill(mut self, permit: Permit<AnyBackend>, ttl: Duration) -> String {
        let id = format!("{:032x}", rand::random::<u128>());
        let expires = Instant::now() + ttl;
        let mut state = self.store.state.lock();
        state.reserved -= 1;
        // The place now holds the permit: nothing to give back on drop.
        self.filled = true;
        state.by_expiry.insert((expires, id.clone()));
        state.by_id.insert(
            id.clone(),
            Held {
                permit: Arc::new(tokio::sync::Mutex::new(permit)),
                ttl,
                expires,
            },
        );
        drop(state);
        id
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.filled {
            self.store.state.lock().reserved -= 1;
        }
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Slot")
    }
}

/// The permits held for decision API clients (module docs).
pub(crate) struct PermitStore {
    state: Mutex<State>,
    max: usize,
}

impl std::fmt::Debug for PermitStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PermitStore")
            .field("held", &self.len())
            .field("max", &self.max)
            .finish()
    }
}

impl PermitStore {
    /// A store of at most `max` permits, with its sweeper task running on
    /// the current tokio runtime until the store is dropped.
    pub(crate) fn start(max: usize) -> Arc<Self> {
        let store = Arc::new(Self {
            state: Mutex::new(State::default()),
            max,
        });
        let weak: Weak<Self> = Arc::downgrade(&store);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(store) = weak.upgrade() else { return };
                // Dropped outside the lock: a drop releases the lease.
                drop(store.expired(Instant::now()));
            }
        });
        store
    }

    /// The most permits held at once.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Permits held now.
    pub(crate) fn len(&self) -> usize {
        self.state.lock().by_id.len()
    }

    /// Places reserved now by acquisitions under way.
    #[cfg(test)]
    fn reserved(&self) -> usize {
        self.state.lock().reserved
    }

    /// Reserves a place for a permit about to be acquired; [`Full`] when
    /// the held permits and the places already reserved reach the bound.
    /// Call it before acquiring, so a full store consumes nothing.
    pub(crate) fn reserve(self: &Arc<Self>) -> Result<Slot, Full> {
        let mut state = self.state.lock();
        if state.by_id.len() + state.reserved >= self.max {
            return Err(Full);
        }
        state.reserved += 1;
        Ok(Slot {
            store: Arc::clone(self),
            filled: false,
        })
    }

    /// Takes the permit `id` out of the store (to release it); `None` when
    /// it is unknown, expired or already released.
    pub(crate) fn remove(&self, id: &str) -> Option<Shared> {
        let mut state = self.state.lock();
        let held = state.by_id.remove(id)?;
        state.by_expiry.remove(&(held.expires, id.to_owned()));
        Some(held.permit)
    }

    /// Extends the permit `id` by its TTL from now and returns the TTL;
    /// `None` when it is unknown, expired or released.
    pub(crate) fn renew(&self, id: &str) -> Option<Duration> {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        let held = state.by_id.get_mut(id)?;
        let now = Instant::now();
        if held.expires <= now {
            // Expired, not swept yet: as gone as a swept one.
            return None;
        }
        state.by_expiry.remove(&(held.expires, id.to_owned()));
        held.expires = now + held.ttl;
        state.by_expiry.insert((held.expires, id.to_owned()));
        Some(held.ttl)
    }

    /// The permit `id`, while it is held and not expired.
    pub(crate) fn get(&self, id: &str) -> Option<Shared> {
        let state = self.state.lock();
        let held = state.by_id.get(id)?;
        (held.expires > Instant::now()).then(|| Arc::clone(&held.permit))
    }

    /// Takes every permit that expired by `now` out of the store.
    fn expired(&self, now: Instant) -> Vec<Shared> {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        let mut out = Vec::new();
        while let Some((at, _)) = state.by_expiry.first() {
            if *at > now {
                break;
            }
            let Some((_, id)) = state.by_expiry.pop_first() else {
                break;
            };
            if let Some(held) = state.by_id.remove(&id) {
                out.push(held.permit);
            }
        }
        if !out.is_empty() {
            tracing::info!(
                target: "pressure::decisions",
                expired = out.len(),
                "permits expired without renewal; their slots are given back"
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Broker;
    use pressure_core::{AcquireOptions, Limits, MemoryBackend, ResourceBroker};

    async fn permit(broker: &Broker) -> Permit<AnyBackend> {
        broker
            .try_acquire("slots", AcquireOptions::default())
            .await
            .expect("acquire")
            .into_permit()
            .expect("granted")
    }

    #[tokio::test]
    async fn bounded_renewable_and_expiring() {
        let broker: Broker = ResourceBroker::builder(AnyBackend::Memory(MemoryBackend::new())).build();
        broker
            .register_limit("slots", Limits::default().max_concurrent_requests(3))
            .expect("register");
        let store = PermitStore::start(2);
        let a = store
            .reserve()
            .expect("a")
            .fill(permit(&broker).await, Duration::from_secs(60));
        let b = store
            .reserve()
            .expect("b")
            .fill(permit(&broker).await, Duration::ZERO);
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert_eq!(store.reserve().expect_err("full"), Full);
        assert_eq!(store.renew(&a), Some(Duration::from_secs(60)));
        // `b` expired at once: gone for renew and get, swept out.
        assert_eq!(store.renew(&b), None);
        assert!(store.get(&b).is_none());
        assert_eq!(store.expired(Instant::now()).len(), 1);
        assert_eq!(store.len(), 1);
        assert!(store.remove(&a).is_some());
        assert!(store.remove(&a).is_none());
        assert_eq!(store.len(), 0);
    }

    /// A reservation counts against the bound until it is filled or
    /// dropped; a dropped one gives its place back.
    #[tokio::test]
    async fn reservations_count_until_filled_or_dropped() {
        let broker: Broker = ResourceBroker::builder(AnyBackend::Memory(MemoryBackend::new())).build();
        broker
            .register_limit("slots", Limits::default().max_concurrent_requests(3))
            .expect("register");
        let store = PermitStore::start(2);
        let one = store.reserve().expect("one");
        let two = store.reserve().expect("two");
        assert_eq!(store.reserve().expect_err("both places reserved"), Full);
        drop(one);
        assert_eq!(store.reserved(), 1);
        let id = two.fill(permit(&broker).await, Duration::from_secs(60));
        assert_eq!((store.len(), store.reserved()), (1, 0));
        let three = store.reserve().expect("the dropped place is free");
        assert_eq!(store.reserve().expect_err("full"), Full);
        drop(three);
        assert!(store.remove(&id).is_some());
        assert_eq!((store.len(), store.reserved()), (0, 0));
    }
}
