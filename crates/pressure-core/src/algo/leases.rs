//! Concurrency permits as leases with an expiry.
//!
//! A live lease counts against `maxConcurrentRequests` until it is released
//! or its expiry passes without renewal, so a holder that vanished (a leaked
//! permit, a killed process) gives its slot back after the TTL instead of
//! leaking it forever. Expired leases are swept lazily, only when the limit
//! is reached or usage is read, so the hot path stays O(1).
//!
//! The leases are a slab: a lease id names its slot (low 32 bits) and the
//! slot's generation when it was taken (high 32 bits), so taking, releasing
//! and renewing one is an index, not a hash-map operation, and a freed slot
//! is reused by the next lease (the same cache line, again and again, for a
//! resource whose permits come and go). The generation makes an id
//! single-use: a second release of the same lease, or a release after the
//! lease expired and its slot went to another one, finds another
//! generation and changes nothing — unless that one slot was taken 2³²
//! times in between, which a holder would have to outlive (about an hour
//! at a million leases per second on that slot).

/// How long a concurrency denial suggests waiting when no lease expires
/// sooner: an estimate, because a holder may release at any moment.
pub(crate) const CONCURRENCY_RETRY_HINT_NS: u64 = 100_000_000;

/// One slot: the generation of its current (or last) lease and, while that
/// lease is live, its expiry (nanoseconds; 0: free).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Slot {
    generation: u32,
    expiry: u64,
}

/// Live leases of one resource: slots of lease id → expiry (nanoseconds).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct LeaseSet {
    slots: Vec<Slot>,
    /// Free slots, the most recently freed last (reused first).
    free: Vec<u32>,
    live: usize,
}

impl LeaseSet {
    /// The live slot of lease `id`, if it still is.
    #[inline(always)]
    fn slot(&mut self, id: u64) -> Option<&mut Slot> {
        let slot = self.slots.get_mut((id & u64::from(u32::MAX)) as usize)?;
        (slot.expiry != 0 && u64::from(slot.generation) == id >> 32).then_some(slot)
    }

    /// Frees `slot` (live).
    #[inline(always)]
    fn free_slot(&mut self, idx: usize) {
        self.slots[idx].expiry = 0;
        self.free.push(idx as u32);
        self.live -= 1;
    }

    /// Removes every lease whose expiry is at or before `now`; how many.
    pub(crate) fn sweep(&mut self, now: u64) -> usize {
        let before = self.live;
        for idx in 0..self.slots.len() {
            let exp = self.slots[idx].expiry;
            if exp != 0 && exp <= now {
                self.free_slot(idx);
            }
        }
        before - self.live
    }

    /// Live leases (after a sweep).
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// Whether no lease is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Checks that one more lease fits under `limit` at `now`: `Ok(())` or
    /// `Err(wait_ns)` (an estimate, see [`CONCURRENCY_RETRY_HINT_NS`]).
    #[inline]
    pub(crate) fn check(&mut self, now: u64, limit: u64) -> Result<(), u64> {
        if (self.live as u64) < limit {
            return Ok(());
        }
        self.check_full(now, limit)
    }

    #[inline(never)]
    fn check_full(&mut self, now: u64, limit: u64) -> Result<(), u64> {
        self.sweep(now);
        if (self.live as u64) < limit {
            return Ok(());
        }
        let earliest = self
            .slots
            .iter()
            .filter(|s| s.expiry != 0)
            .map(|s| s.expiry)
            .min()
            .unwrap_or(now);
        Err(earliest.saturating_sub(now).clamp(1, CONCURRENCY_RETRY_HINT_NS))
    }

    /// Takes a lease expiring at `expiry` (non-zero); returns its id.
    #[inline(always)]
    pub(crate) fn insert(&mut self, expiry: u64) -> u64 {
        debug_assert!(expiry != 0, "0 marks a free slot");
        let idx = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                self.slots.push(Slot::default());
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[idx];
        slot.generation = slot.generation.wrapping_add(1);
        slot.expiry = expiry.max(1);
        self.live += 1;
        (u64::from(slot.generation) << 32) | idx as u64
    }

    /// Releases lease `id`; `false` if it was not live (already released or
    /// reclaimed), so a double release never frees someone else's slot.
    #[inline]
    pub(crate) fn remove(&mut self, id: u64) -> bool {
        if self.slot(id).is_none() {
            return false;
        }
        self.free_slot((id & u64::from(u32::MAX)) as usize);
        true
    }

    /// Extends lease `id` to `expiry`; `false` if it has expired or is gone.
    pub(crate) fn renew(&mut self, id: u64, now: u64, expiry: u64) -> bool {
        let Some(slot) = self.slot(id) else {
            return false;
        };
        if slot.expiry > now {
            slot.expiry = expiry.max(1);
            return true;
        }
        self.free_slot((id & u64::from(u32::MAX)) as usize);
        false
    }

    /// Extends every lease still live at `now` to `expiry` and removes the
    /// expired ones: (leases renewed, leases lost).
    pub(crate) fn renew_all(&mut self, now: u64, expiry: u64) -> (usize, usize) {
        let before = self.live;
        for idx in 0..self.slots.len() {
            match self.slots[idx].expiry {
                0 => {}
                exp if exp <= now => self.free_slot(idx),
                _ => self.slots[idx].expiry = expiry.max(1),
            }
        }
        (self.live, before - self.live)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_leases_free_their_slot() {
        let mut s = LeaseSet::default();
        let one = s.insert(100);
        let two = s.insert(200);
        assert_eq!(s.check(50, 2), Err(50));
        assert_eq!(s.check(100, 2), Ok(()));
        assert!(!s.renew(one, 150, 500), "expired lease cannot be renewed");
        assert!(s.renew(two, 150, 500));
        assert!(s.remove(two));
        assert!(!s.remove(two));
        assert!(s.is_empty());
    }

    /// A freed slot is reused, under a new generation: the old id neither
    /// releases nor renews the lease that now holds the slot.
    #[test]
    fn an_id_is_single_use_across_slot_reuse() {
        let mut s = LeaseSet::default();
        let first = s.insert(1_000);
        assert!(s.remove(first));
        let second = s.insert(1_000);
        assert_eq!(first & 0xffff_ffff, second & 0xffff_ffff, "same slot");
        assert_ne!(first, second);
        assert!(!s.remove(first), "a stale id frees nothing");
        assert!(!s.renew(first, 10, 2_000), "a stale id renews nothing");
        assert_eq!(s.len(), 1);
        // Expired and swept, then the slot is taken again.
        assert_eq!(s.check(1_000, 1), Ok(()));
        let third = s.insert(3_000);
        assert!(!s.remove(second), "reclaimed: its holder frees nothing");
        assert!(s.remove(third));
        assert!(!s.remove(u64::MAX), "an unknown slot");
        assert!(s.is_empty());
    }

    #[test]
    fn renew_all_extends_the_live_and_drops_the_expired() {
        let mut s = LeaseSet::default();
        let a = s.insert(100);
        let b = s.insert(300);
        let c = s.insert(400);
        assert!(s.remove(c));
        assert_eq!(s.renew_all(200, 900), (1, 1));
        assert!(!s.renew(a, 200, 1_000), "lost");
        assert_eq!(s.check(899, 1), Err(1), "b expires at 900");
        assert!(s.renew(b, 200, 1_000));
        assert!(s.remove(b));
        assert!(s.is_empty());
    }
}
