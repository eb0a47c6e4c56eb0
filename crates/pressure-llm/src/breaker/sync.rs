//! The sync task of a fleet-wide registry: every [`SYNC_INTERVAL`] (and at
//! once when a breaker opened locally, a fleet probe ended or a breaker was
//! created) it sends each breaker's pending news to the store — probe
//! reports, a local opening, the closed-state outcomes of the interval —
//! and applies the shared state the store answers (or, with nothing to
//! send, reads it). One store call per breaker and item, all breakers
//! concurrently; the task ends when the registry is dropped.
//!
//! A state read while the local breaker changed, or while a local opening
//! waits to be published, is not applied: it would undo news the store
//! does not have yet. The next round applies the fresh state.

use super::circuit::CircuitBreaker;
use super::fleet::{FleetHub, FleetLink, SYNC_INTERVAL};
use super::state::State;
use parking_lot::RwLock;
use pressure_core::shared_breaker::SharedCircuit;
use pressure_core::BackendError;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use tokio::time::MissedTickBehavior;

type Models = HashMap<String, Arc<CircuitBreaker>>;

/// The breakers of a registry, by provider then model (the map the sync
/// task walks and the registry fills).
pub(crate) type BreakerMap = RwLock<HashMap<String, Models>>;

/// Runs until the registry's breaker map is gone.
pub(crate) async fn run(breakers: Weak<BreakerMap>, hub: Arc<FleetHub>) {
    let mut tick = tokio::time::interval(SYNC_INTERVAL);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = hub.wake.notified() => {}
        }
        let all: Vec<Arc<CircuitBreaker>> = {
            let Some(map) = breakers.upgrade() else { return };
            let guard = map.read();
            guard.values().flat_map(|m| m.values().cloned()).collect()
        };
        futures::future::join_all(all.iter().map(|b| sync_one(b, &hub))).await;
    }
}

/// The store's answer, with the hub's health updated.
fn checked(hub: &FleetHub, r: Result<SharedCircuit, BackendError>) -> Option<SharedCircuit> {
    match r {
        Ok(c) => {
            hub.ok();
            Some(c)
        }
        Err(e) => {
            hub.failed(&e);
            None
        }
    }
}

/// One breaker's round: send, then apply.
async fn sync_one(b: &CircuitBreaker, hub: &FleetHub) {
    let Some(link) = b.fleet_link() else { return };
    // An opening the store missed (it was down) is stale once the breaker
    // left open by itself: publishing it would reopen a recovered model.
    let still_open = b.state() == State::Open;
    let before = b.transitions();
    let Some(state) = exchange(link, hub, still_open).await else {
        return;
    };
    link.epoch.store(state.epoch, Ordering::Relaxed);
    if b.transitions() == before && !link.open_pending() {
        b.apply_fleet(&state);
    }
}

/// Sends what `link` has pending (its opening only while `still_open`);
/// the last state the store answered, or `None` when it is unreachable
/// (the local breaker then decides alone; an opening is kept to be
/// published later, other news is dropped).
async fn exchange(link: &FleetLink, hub: &FleetHub, still_open: bool) -> Option<SharedCircuit> {
    let (store, rules, name) = (&hub.store, &hub.rules, &*link.name);
    let mut pending = link.take();
    if !still_open {
        pending.open = None;
    }
    let mut last = None;
    for (epoch, outcome) in pending.reports {
        last = Some(checked(
            hub,
            store.report_probe(name, rules, epoch, outcome).await,
        )?);
    }
    if let Some((seen, open_for)) = pending.open {
        match checked(hub, store.open(name, rules, seen, open_for).await) {
            Some(c) => last = Some(c),
            None => {
                link.retry_open((seen, open_for));
                return None;
            }
        }
    }
    if !pending.counts.is_empty() {
        last = Some(checked(hub, store.record(name, rules, pending.counts).await)?);
    }
    match last {
        Some(c) => Some(c),
        None => checked(hub, store.read(name).await),
    }
}
