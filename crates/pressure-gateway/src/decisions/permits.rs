//! [`PermitStore`]: the permits the decision listener holds for its clients
//! between `POST /v1/acquire` and `POST /v1/permits/{id}/release`.
//!
//! * An id is 128 random bits in lower-case hex: unguessable, so a client
//!   can only release or renew the permits it was given.
//! * The store is bounded (`gateway.decisions.maxPermits`): a client that
//!   acquires without ever releasing cannot grow it without end.
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

    /// Holds `permit` for `ttl` and returns its new id; [`Full`] (and the
    /// permit back, to be dropped by the caller) when the store is full.
    pub(crate) fn insert(
        &self,
        permit: Permit<AnyBackend>,
        ttl: Duration,
    ) -> Result<String, (Full, Permit<AnyBackend>)> {
        let mut state = self.state.lock();
        if state.by_id.len() >= self.max {
            drop(state);
            return Err((Full, permit));
        }
        let id = format!("{:032x}", rand::random::<u128>());
        let expires = Instant::now() + ttl;
        state.by_expiry.insert((expires, id.clone()));
        state.by_id.insert(
            id.clone(),
            Held {
                permit: Arc::new(tokio::sync::Mutex::new(permit)),
                ttl,
                expires,
            },
        );
        Ok(id)
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
            .insert(permit(&broker).await, Duration::from_secs(60))
            .expect("a");
        let b = store.insert(permit(&broker).await, Duration::ZERO).expect("b");
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        let (Full, refused) = store
            .insert(permit(&broker).await, Duration::from_secs(60))
            .expect_err("full");
        drop(refused);
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
}
