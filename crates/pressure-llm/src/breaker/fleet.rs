//! Fleet-wide breakers (`llm.breaker.scope` `fleet`, docs/architecture.md#what-openai-and-anthropic-clients-expect): what a
//! local [`super::CircuitBreaker`] tells the fleet's shared state, and the
//! store's health.
//!
//! The local breaker stays the decision engine of every call, with no store
//! round trip on the hot path:
//!
//! * **closed**: outcomes are summed per breaker here and
//!   flushed into the shared window by the sync task every
//!   [`SYNC_INTERVAL`] (one `record` per breaker with outcomes); the store
//!   opens the breaker when the fleet's window crosses the threshold, so
//!   instances that each see a fraction of the failures still open it. The
//!   local window still trips by itself, and a local opening is published
//!   (`open`) at once.
//! * **open / half-open / closed learned from the fleet**: the sync task
//!   reads every breaker's shared state every [`SYNC_INTERVAL`] and applies
//!   it locally (transition reason `fleet`), so an opening anywhere stops
//!   calls everywhere within about one interval plus a round trip.
//! * **half-open**: a local probe permit also needs a fleet-wide probe slot
//!   (`acquire_probe`, one round trip, only for probes); the probe's outcome
//!   is reported under the epoch it was granted in. All fleet probes
//!   succeeding closes it for everyone; a failed one reopens it for everyone
//!   under a new epoch.
//! * **store unreachable**: every store error falls back to the local
//!   breaker alone (a probe is then granted locally); nothing fails a call.
//!   The outage is logged once when it starts and once when it ends.

use parking_lot::Mutex;
use pressure_core::shared_breaker::{
    CircuitRules, OutcomeCounts, ProbeGrant, ProbeOutcome, SharedBreakerStore,
};
use pressure_core::BackendError;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// How often instances flush outcomes to, and read state from, the store:
/// the fleet converges within about this plus a round trip.
pub const SYNC_INTERVAL: Duration = Duration::from_millis(100);

/// The store of a fleet-wide registry, shared by its breakers and its sync
/// task.
#[derive(Debug)]
pub(crate) struct FleetHub {
    pub(crate) store: Arc<dyn SharedBreakerStore>,
    pub(crate) rules: CircuitRules,
    /// Wakes the sync task (an opening or a probe report to send now).
    pub(crate) wake: Notify,
    healthy: AtomicBool,
    errors: AtomicU64,
}

impl FleetHub {
    pub(crate) fn new(store: Arc<dyn SharedBreakerStore>, rules: CircuitRules) -> Self {
        Self {
            store,
            rules,
            wake: Notify::new(),
            healthy: AtomicBool::new(true),
            errors: AtomicU64::new(0),
        }
    }

    /// The store answered.
    pub(crate) fn ok(&self) {
        if !self.healthy.swap(true, Ordering::AcqRel) {
            tracing::info!("fleet breaker store answers again; breakers are shared by the fleet again");
        }
    }

    /// A store call failed: counted, and logged once per outage.
    pub(crate) fn failed(&self, e: &BackendError) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if self.healthy.swap(false, Ordering::AcqRel) {
            tracing::warn!(error = %e, "fleet breaker store unavailable; each instance's breakers decide alone until it answers");
        }
    }

    /// Whether the last store call succeeded.
    pub(crate) fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Store calls that failed.
    pub(crate) fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }
}

/// What one breaker still has to tell the fleet.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    /// Closed-state outcomes since the last flush.
    pub(crate) counts: OutcomeCounts,
    /// A local opening to publish: the epoch it was decided in, and for how long.
    pub(crate) open: Option<(u64, Duration)>,
    /// Probe outcomes to report, with their epoch.
    pub(crate) reports: Vec<(u64, ProbeOutcome)>,
}

/// One breaker's link to the fleet.
#[derive(Debug)]
pub(crate) struct FleetLink {
    pub(crate) name: Arc<str>,
    pub(crate) hub: Arc<FleetHub>,
    /// The last shared epoch seen.
    pub(crate) epoch: AtomicU64,
    pending: Mutex<Pending>,
}

impl FleetLink {
    pub(crate) fn new(name: Arc<str>, hub: Arc<FleetHub>) -> Self {
        Self {
            name,
            hub,
            epoch: AtomicU64::new(0),
            pending: Mutex::new(Pending::default()),
        }
    }

    /// A closed-state outcome, for the next flush.
    pub(crate) fn outcome(&self, failed: bool, slow: bool) {
        let mut p = self.pending.lock();
        p.counts.calls += 1;
        p.counts.failures += u64::from(failed);
        p.counts.slow += u64::from(slow);
    }

    /// The local breaker opened by itself for `open_for`: publish it now.
    pub(crate) fn opened(&self, open_for: Duration) {
        let epoch = self.epoch.load(Ordering::Relaxed);
        {
            let mut p = self.pending.lock();
            let d = p.open.map_or(open_for, |(_, d)| d.max(open_for));
            p.open = Some((epoch, d));
        }
        self.hub.wake.notify_one();
    }

    /// A fleet probe of `epoch` ended: report it now.
    pub(crate) fn probe_done(&self, epoch: u64, outcome: ProbeOutcome) {
        self.pending.lock().reports.push((epoch, outcome));
        self.hub.wake.notify_one();
    }

    /// Takes what is to be sent.
    pub(crate) fn take(&self) -> Pending {
        std::mem::take(&mut *self.pending.lock())
    }

    /// Puts back an opening that could not be published.
    pub(crate) fn retry_open(&self, open: (u64, Duration)) {
        let mut p = self.pending.lock();
        if p.open.is_none() {
            p.open = Some(open);
        }
    }

    /// Whether an opening waits to be published (the shared state read
    /// meanwhile does not know it yet).
    pub(crate) fn open_pending(&self) -> bool {
        self.pending.lock().open.is_some()
    }

    /// One fleet-wide probe slot; `Err` when the store is unreachable.
    pub(crate) async fn acquire_probe(&self) -> Result<ProbeGrant, BackendError> {
        match self.hub.store.acquire_probe(&self.name, &self.hub.rules).await {
            Ok(g) => {
                self.hub.ok();
                Ok(g)
            }
            Err(e) => {
                self.hub.failed(&e);
                Err(e)
            }
        }
    }
}
