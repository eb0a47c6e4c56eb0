//! [`UnitsDelta`]: the correction a reconcile makes to one dimension, the
//! difference of two unit counts kept exact over their whole range.

/// `after − before` of two unit counts (`u64` each): the correction a
/// reconcile applies to one dimension, as a direction and a magnitude.
///
/// The difference of two `u64` does not fit an `i64`, and subtracting the
/// two counts cast to `i64` does not compute it (`u64::MAX` cast to `i64`
/// is `−1`, so a reconcile of `u64::MAX` would read as a refund, and one of
/// `2^63` wraps): every backend computes its correction here. Applying it
/// saturates both ways — an addition stops at the type's maximum (the count
/// pinned at "full", never wrapped), a refund at zero.
///
/// ```
/// use pressure_core::UnitsDelta;
/// assert_eq!(UnitsDelta::between(10, 3), UnitsDelta::Down(7));
/// assert_eq!(UnitsDelta::between(0, u64::MAX), UnitsDelta::Up(u64::MAX));
/// assert_eq!(UnitsDelta::between(0, u64::MAX).saturating_i64(), i64::MAX);
/// assert_eq!(UnitsDelta::between(u64::MAX, 0).saturating_i64(), i64::MIN);
/// assert_eq!(UnitsDelta::Up(5).apply(u64::MAX - 1), u64::MAX);
/// assert_eq!(UnitsDelta::Down(5).apply(3), 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnitsDelta {
    /// More was used than reserved: this many units more.
    Up(u64),
    /// Less was used than reserved: this many units back (never below zero).
    Down(u64),
}

impl UnitsDelta {
    /// No change.
    pub const ZERO: Self = Self::Up(0);

    /// `after − before`, exact.
    #[inline]
    pub const fn between(before: u64, after: u64) -> Self {
        if after >= before {
            Self::Up(after - before)
        } else {
            Self::Down(before - after)
        }
    }

    /// Whether nothing changes.
    #[inline]
    pub const fn is_zero(self) -> bool {
        self.magnitude() == 0
    }

    /// The number of units moved, either way.
    #[inline]
    pub const fn magnitude(self) -> u64 {
        match self {
            Self::Up(n) | Self::Down(n) => n,
        }
    }

    /// The difference as an `i64` for a store that counts in signed 64-bit
    /// integers (Redis `INCRBY`, a script's argument), saturated to
    /// `i64::MIN ..= i64::MAX`: an addition past `i64::MAX` still adds the
    /// most it can, a refund past `i64::MIN` still refunds (down to zero in
    /// the store), and neither changes sign.
    #[inline]
    pub fn saturating_i64(self) -> i64 {
        match self {
            Self::Up(n) => i64::try_from(n).unwrap_or(i64::MAX),
            Self::Down(n) => i64::try_from(n).map_or(i64::MIN, |n| -n),
        }
    }

    /// `value` corrected by the difference, saturating at `0` and
    /// `u64::MAX`.
    #[inline]
    pub const fn apply(self, value: u64) -> u64 {
        match self {
            Self::Up(n) => value.saturating_add(n),
            Self::Down(n) => value.saturating_sub(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::UnitsDelta;
    use proptest::prelude::*;

    #[test]
    fn the_attack_values_keep_their_sign() {
        // Cast to i64 and subtracted, `u64::MAX` − 5 was −6: a refund.
        assert_eq!(UnitsDelta::between(5, u64::MAX), UnitsDelta::Up(u64::MAX - 5));
        assert_eq!(UnitsDelta::between(5, u64::MAX).saturating_i64(), i64::MAX);
        // 2^63 cast to i64 is i64::MIN.
        assert_eq!(UnitsDelta::between(0, 1 << 63).saturating_i64(), i64::MAX);
        assert_eq!(UnitsDelta::between(1 << 63, 0).saturating_i64(), i64::MIN);
        assert_eq!(UnitsDelta::between(7, 7), UnitsDelta::ZERO);
        assert!(UnitsDelta::between(7, 7).is_zero());
    }

    proptest! {
        #[test]
        fn exact_and_saturating(a in any::<u64>(), b in any::<u64>(), v in any::<u64>()) {
            let d = UnitsDelta::between(a, b);
            let exact = i128::from(b) - i128::from(a);
            let signed = match d {
                UnitsDelta::Up(n) => i128::from(n),
                UnitsDelta::Down(n) => -i128::from(n),
            };
            prop_assert_eq!(signed, exact);
            prop_assert_eq!(
                i128::from(d.saturating_i64()),
                exact.clamp(i128::from(i64::MIN), i128::from(i64::MAX))
            );
            prop_assert_eq!(
                i128::from(d.apply(v)),
                (i128::from(v) + exact).clamp(0, i128::from(u64::MAX))
            );
        }
    }
}
