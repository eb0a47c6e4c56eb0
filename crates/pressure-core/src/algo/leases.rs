//! Concurrency permits as leases with an expiry.
//!
//! A live lease counts against `maxConcurrentRequests` until it is released
//! or its expiry passes without renewal, so a holder that vanished (a leaked
//! permit, a killed process) gives its slot back after the TTL instead of
//! leaking it forever. Expired leases are swept lazily, only when the limit
//! is reached or usage is read, so the hot path stays O(1).

use std::collections::HashMap;

/// How long a concurrency denial suggests waiting when no lease expires
/// sooner: an estimate, because a holder may release at any moment.
pub(crate) const CONCURRENCY_RETRY_HINT_NS: u64 = 100_000_000;

/// Live leases of one resource: lease id → expiry (nanoseconds).
#[derive(Debug, Default, Clone)]
pub(crate) struct LeaseSet {
    live: HashMap<u64, u64, ahash::RandomState>,
}

impl LeaseSet {
    /// Removes every lease whose expiry is at or before `now`.
    pub(crate) fn sweep(&mut self, now: u64) {
        self.live.retain(|_, exp| *exp > now);
    }

    /// Live leases (after a sweep).
    pub(crate) fn len(&self) -> usize {
        self.live.len()
    }

    /// Whether no lease is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Checks that one more lease fits under `limit` at `now`: `Ok(())` or
    /// `Err(wait_ns)` (an estimate, see [`CONCURRENCY_RETRY_HINT_NS`]).
    pub(crate) fn check(&mut self, now: u64, limit: u64) -> Result<(), u64> {
        if (self.live.len() as u64) < limit {
            return Ok(());
        }
        self.sweep(now);
        if (self.live.len() as u64) < limit {
            return Ok(());
        }
        let earliest = self.live.values().copied().min().unwrap_or(now);
        Err(earliest.saturating_sub(now).clamp(1, CONCURRENCY_RETRY_HINT_NS))
    }

    /// Records lease `id` expiring at `expiry`.
    pub(crate) fn insert(&mut self, id: u64, expiry: u64) {
        self.live.insert(id, expiry);
    }

    /// Releases lease `id`; `false` if it was not live (already released or
    /// reclaimed), so a double release never frees someone else's slot.
    pub(crate) fn remove(&mut self, id: u64) -> bool {
        self.live.remove(&id).is_some()
    }

    /// Extends lease `id` to `expiry`; `false` if it has expired or is gone.
    pub(crate) fn renew(&mut self, id: u64, now: u64, expiry: u64) -> bool {
        match self.live.get_mut(&id) {
            Some(exp) if *exp > now => {
                *exp = expiry;
                true
            }
            Some(_) => {
                self.live.remove(&id);
                false
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_leases_free_their_slot() {
        let mut s = LeaseSet::default();
        s.insert(1, 100);
        s.insert(2, 200);
        assert_eq!(s.check(50, 2), Err(50));
        assert_eq!(s.check(100, 2), Ok(()));
        assert!(!s.renew(1, 150, 500), "expired lease cannot be renewed");
        assert!(s.renew(2, 150, 500));
        assert!(s.remove(2));
        assert!(!s.remove(2));
        assert!(s.is_empty());
    }
}
