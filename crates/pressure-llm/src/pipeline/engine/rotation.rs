//! [`Rotation`]: the order in which a pool's members are offered an
//! attempt — a smooth weighted round robin (nginx's), shared by every
//! event of the pool level.
//!
//! Each member keeps a credit. For an attempt among the members still
//! open to it, the order is by credit plus weight, highest first (a tie
//! to the member listed first); the member that takes the attempt gives
//! back the open members' total weight, every open member earns its
//! weight. Over many attempts on members that all admit them, each gets
//! its weight's share, interleaved (weights 2 and 1: a, b, a, a, b, a, …).
//! A member that did not admit an attempt keeps its credit, so it is
//! offered the next one first; credits are kept within the pool's total
//! weight so a member refusing for a long while does not take a burst
//! when it comes back.

use std::sync::Mutex;

/// The weighted round robin of one pool level.
#[derive(Debug)]
pub(crate) struct Rotation {
    weights: Vec<i64>,
    credits: Mutex<Vec<i64>>,
}

impl Rotation {
    /// A rotation over members of these weights (in the pool's order).
    pub(crate) fn new(weights: impl IntoIterator<Item = u32>) -> Self {
        let weights: Vec<i64> = weights.into_iter().map(i64::from).collect();
        let credits = Mutex::new(vec![0; weights.len()]);
        Self { weights, credits }
    }

    fn weight(&self, i: usize) -> i64 {
        self.weights.get(i).copied().unwrap_or(0)
    }

    /// The members of `open` (indexes into the pool) in the order they are
    /// offered the next attempt.
    pub(crate) fn order(&self, open: &[usize]) -> Vec<usize> {
        let credits = self
            .credits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut order = open.to_vec();
        let score = |i: usize| credits.get(i).copied().unwrap_or(0) + self.weight(i);
        // Stable: a tie keeps the pool's order.
        order.sort_by_key(|&i| std::cmp::Reverse(score(i)));
        order
    }

    /// `chosen` took an attempt that the members of `open` were offered.
    pub(crate) fn took(&self, chosen: usize, open: &[usize]) {
        let total: i64 = open.iter().map(|&i| self.weight(i)).sum();
        let bound: i64 = self.weights.iter().sum();
        let mut credits = self
            .credits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for &i in open {
            if let Some(c) = credits.get_mut(i) {
                *c += self.weight(i);
            }
        }
        if let Some(c) = credits.get_mut(chosen) {
            *c -= total;
        }
        for c in credits.iter_mut() {
            *c = (*c).clamp(-bound, bound);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picks(r: &Rotation, open: &[usize], n: usize) -> Vec<usize> {
        (0..n)
            .map(|_| {
                let first = r.order(open)[0];
                r.took(first, open);
                first
            })
            .collect()
    }

    #[test]
    fn members_that_all_admit_share_by_weight_interleaved() {
        let r = Rotation::new([2, 1]);
        assert_eq!(picks(&r, &[0, 1], 6), vec![0, 1, 0, 0, 1, 0]);
        let r = Rotation::new([1, 1, 1]);
        assert_eq!(picks(&r, &[0, 1, 2], 6), vec![0, 1, 2, 0, 1, 2]);
        let r = Rotation::new([5, 3, 2]);
        let got = picks(&r, &[0, 1, 2], 100);
        let count = |m: usize| got.iter().filter(|&&g| g == m).count();
        assert_eq!((count(0), count(1), count(2)), (50, 30, 20));
    }

    #[test]
    fn the_order_offers_every_open_member_and_only_those() {
        let r = Rotation::new([1, 3, 2]);
        assert_eq!(r.order(&[0, 1, 2]), vec![1, 2, 0]);
        assert_eq!(r.order(&[0, 2]), vec![2, 0]);
        assert!(r.order(&[]).is_empty());
    }

    #[test]
    fn a_member_that_refused_is_offered_first_next_time_within_a_bound() {
        let r = Rotation::new([1, 1]);
        // Member 0 is offered first but never admits: member 1 takes all.
        for _ in 0..50 {
            assert_eq!(r.order(&[0, 1])[0], 0);
            r.took(1, &[0, 1]);
        }
        // When 0 admits again it takes a bounded run, not 50 attempts.
        let got = picks(&r, &[0, 1], 10);
        let run = got.iter().take_while(|&&g| g == 0).count();
        assert!(run <= 3, "{got:?}");
        assert!(got.contains(&1), "{got:?}");
    }
}
