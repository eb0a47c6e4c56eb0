//! Acquisitions whose caller went away before the answer
//! ([`LostAcquisition`]): once the answer is known, what it granted is given
//! back whole, as if the caller had never asked.

use super::dims::Dim;
use super::reconcile::{changes, reconcile_invocation};
use crate::scripts;
use crate::store::{Failure, LostKind, Store};
use pressure_core::{Demand, LimitSpec};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What an acquisition whose caller went away before its answer may hold,
/// to give it back once the answer is known.
pub(super) struct LostAcquisition {
    pub(super) store: Arc<Store>,
    pub(super) key: String,
    pub(super) lease: Option<u64>,
    pub(super) lease_ttl_ns: u64,
    pub(super) dims: Arc<[Dim]>,
    pub(super) spec: Arc<LimitSpec>,
    pub(super) demand: Demand,
}

impl LostAcquisition {
    /// Settles the answer of the orphaned call (`None`: it could not be
    /// awaited). A grant is given back whole — its lease released, its
    /// units refunded at the instant they were counted — as if the caller
    /// had never asked; a denial holds nothing; no answer (an error, a
    /// timeout, no runtime) leaves the lease to the background release
    /// with a tombstone, as a lost reply does.
    pub(super) fn settle(self, answer: Option<Result<Vec<i64>, Failure>>) {
        let store = &self.store;
        let granted_at_us = match &answer {
            Some(Ok(v)) => match v[..] {
                [1, at_us, _] => scripts::reply_u64(at_us),
                // Denied, or its lease id already given up: nothing held.
                _ => return,
            },
            Some(Err(f)) if !f.sent => return,
            _ => {
                if let Some(lease) = self.lease {
                    store.lose(self.key, lease, self.lease_ttl_ns, LostKind::Acquisition);
                }
                return;
            }
        };
        store.cancel_releases.fetch_add(1, Ordering::Relaxed);
        let demand = self.demand;
        let refund = changes(&self.dims, &self.spec, |units| (units(&demand), 0));
        if let Some(lease) = self.lease {
            store.release_detached(self.key.clone(), lease, self.lease_ttl_ns);
        }
        // A refund that fails (or finds no runtime) errs on the safe side:
        // the units stay counted until their window passes.
        if let (false, Ok(rt)) = (refund.is_empty(), tokio::runtime::Handle::try_current()) {
            let (store, key) = (Arc::clone(store), self.key);
            rt.spawn(async move {
                let offset_us = store.offset_us();
                let _ = store
                    .call::<i64>(
                        &key,
                        reconcile_invocation(&key, granted_at_us, &refund, offset_us),
                    )
                    .await;
            });
        }
    }
}
