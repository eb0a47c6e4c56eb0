//! [`Price`]: what the mock charges per model, for its bill.

/// The price of one model in whole micro-dollars per million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Price {
    /// Micro-dollars per 1M input (prompt) tokens.
    pub input_micro_usd_per_1m: u64,
    /// Micro-dollars per 1M output (completion) tokens.
    pub output_micro_usd_per_1m: u64,
}

impl Price {
    /// A price from micro-dollars per 1M input and output tokens.
    pub const fn new(input_micro_usd_per_1m: u64, output_micro_usd_per_1m: u64) -> Self {
        Self {
            input_micro_usd_per_1m,
            output_micro_usd_per_1m,
        }
    }

    /// What `input` tokens in and `output` tokens out cost, in micro-dollars
    /// rounded up (saturating), as a provider's invoice rounds.
    pub fn micro_usd(&self, input: u64, output: u64) -> u64 {
        let total = (u128::from(input) * u128::from(self.input_micro_usd_per_1m))
            .saturating_add(u128::from(output) * u128::from(self.output_micro_usd_per_1m));
        u64::try_from(total.div_ceil(1_000_000)).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::Price;

    #[test]
    fn cost_rounds_up_to_the_micro_dollar() {
        let p = Price::new(150_000, 600_000);
        assert_eq!(p.micro_usd(0, 0), 0);
        assert_eq!(p.micro_usd(1, 0), 1);
        assert_eq!(p.micro_usd(1_000_000, 1_000_000), 750_000);
        assert_eq!(
            Price::new(u64::MAX, u64::MAX).micro_usd(u64::MAX, u64::MAX),
            u64::MAX
        );
    }
}
