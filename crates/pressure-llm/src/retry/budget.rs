//! The money budget of one event.
//!
//! Every attempt — failed or not — costs its input tokens plus the output
//! generated before it ended, at the model's price
//! ([`PriceTable::cost`](crate::price::PriceTable::cost)). The budget sums
//! those charges; a retry is allowed only if `spent + estimate(next) ≤ limit`,
//! where the estimate of the next attempt is its prompt tokens plus its
//! `max_tokens` at the next model's price — the worst case, the same figure
//! the limiter reserves. A budget without a limit still counts what was spent
//! (the "money spent on failed attempts" metric).
//!
//! The budget belongs to the event, not to one model: the fallback chain
//! keeps charging the same budget when it moves to the next level.

use crate::price::Money;

/// Money spent by one event, against an optional limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MoneyBudget {
    limit: Option<Money>,
    spent: Money,
}

impl MoneyBudget {
    /// A budget of `limit`, nothing spent yet.
    pub const fn new(limit: Money) -> Self {
        Self {
            limit: Some(limit),
            spent: Money::ZERO,
        }
    }

    /// A budget that only counts: every next attempt fits.
    pub const fn unlimited() -> Self {
        Self {
            limit: None,
            spent: Money::ZERO,
        }
    }

    /// The limit, if any.
    pub const fn limit(&self) -> Option<Money> {
        self.limit
    }

    /// Money charged so far.
    pub const fn spent(&self) -> Money {
        self.spent
    }

    /// Money left under the limit (`None` when unlimited).
    pub fn remaining(&self) -> Option<Money> {
        self.limit.map(|l| l.saturating_sub(self.spent))
    }

    /// Records the cost of an attempt that was made. Spending past the limit
    /// is recorded too: money already spent is spent.
    pub fn charge(&mut self, cost: Money) {
        self.spent = self.spent.saturating_add(cost);
    }

    /// True if an attempt estimated at `next_estimate` would take the spend
    /// past the limit (`spent + next_estimate > limit`).
    pub fn would_exceed(&self, next_estimate: Money) -> bool {
        match self.limit {
            Some(limit) => self.spent.saturating_add(next_estimate) > limit,
            None => false,
        }
    }

    /// True if an attempt estimated at `next_estimate` still fits
    /// (`spent + next_estimate ≤ limit`): the negation of
    /// [`would_exceed`](Self::would_exceed).
    pub fn allows(&self, next_estimate: Money) -> bool {
        !self.would_exceed(next_estimate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundary_is_inclusive() {
        let mut b = MoneyBudget::new(Money::from_micro_usd(100));
        b.charge(Money::from_micro_usd(60));
        assert!(b.allows(Money::from_micro_usd(40)));
        assert!(b.would_exceed(Money::from_micro_usd(41)));
        assert_eq!(b.remaining(), Some(Money::from_micro_usd(40)));
        b.charge(Money::from_micro_usd(50));
        assert_eq!(b.spent(), Money::from_micro_usd(110));
        assert_eq!(b.remaining(), Some(Money::ZERO));
        assert!(b.would_exceed(Money::ZERO));
    }

    #[test]
    fn unlimited_counts_but_never_refuses() {
        let mut b = MoneyBudget::unlimited();
        b.charge(Money::from_micro_usd(u64::MAX));
        b.charge(Money::from_micro_usd(1));
        assert_eq!(b.spent(), Money::from_micro_usd(u64::MAX));
        assert!(b.allows(Money::from_micro_usd(u64::MAX)));
    }
}
