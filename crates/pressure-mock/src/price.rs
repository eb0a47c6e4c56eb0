//! [`Price`]: what the mock charges per model, for its bill.

use crate::cache::CacheUse;

/// The price of one model in whole micro-dollars per million tokens, with
/// the prompt-cache classes (`cacheWriteMicroUsdPer1M`,
/// `cacheReadMicroUsdPer1M`): tokens written to or read from the cache are
/// billed at those prices instead of the input price.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Price {
    /// Micro-dollars per 1M input (prompt) tokens not served by the cache.
    pub input_micro_usd_per_1m: u64,
    /// Micro-dollars per 1M output (completion) tokens.
    pub output_micro_usd_per_1m: u64,
    /// Micro-dollars per 1M input tokens written to the prompt cache
    /// (Anthropic's `cache_creation_input_tokens`).
    pub cache_write_micro_usd_per_1m: u64,
    /// Micro-dollars per 1M input tokens read from the prompt cache
    /// (Anthropic's `cache_read_input_tokens`, OpenAI's `cached_tokens`).
    pub cache_read_micro_usd_per_1m: u64,
}

/// The tokens of a bill, by price class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Billed {
    /// Every input token, cached or not.
    pub(crate) input: u64,
    /// Of `input`, the tokens written to and read from the cache.
    pub(crate) cache: CacheUse,
    pub(crate) output: u64,
}

impl Price {
    /// A price from micro-dollars per 1M input and output tokens; the cache
    /// classes take the providers' usual ratios: a write costs 1.25 × the
    /// input price, a read 0.1 × (both rounded up to the micro-dollar).
    pub const fn new(input_micro_usd_per_1m: u64, output_micro_usd_per_1m: u64) -> Self {
        Self {
            input_micro_usd_per_1m,
            output_micro_usd_per_1m,
            cache_write_micro_usd_per_1m: input_micro_usd_per_1m.saturating_mul(5).div_ceil(4),
            cache_read_micro_usd_per_1m: input_micro_usd_per_1m.div_ceil(10),
        }
    }

    /// The same price with its own cache-write and cache-read prices.
    pub const fn with_cache(mut self, write_micro_usd_per_1m: u64, read_micro_usd_per_1m: u64) -> Self {
        self.cache_write_micro_usd_per_1m = write_micro_usd_per_1m;
        self.cache_read_micro_usd_per_1m = read_micro_usd_per_1m;
        self
    }

    /// What `input` tokens in and `output` tokens out cost, in micro-dollars
    /// rounded up (saturating), as a provider's invoice rounds.
    pub fn micro_usd(&self, input: u64, output: u64) -> u64 {
        self.micro_usd_cached(input, 0, 0, output)
    }

    /// What `input` tokens in (of which `cache_write` were written to and
    /// `cache_read` read from the prompt cache) and `output` tokens out
    /// cost: uncached input × input price + writes × write price + reads ×
    /// read price + output × output price, in micro-dollars rounded up once
    /// (saturating).
    pub fn micro_usd_cached(&self, input: u64, cache_write: u64, cache_read: u64, output: u64) -> u64 {
        let uncached = input.saturating_sub(cache_write).saturating_sub(cache_read);
        let total = [
            (uncached, self.input_micro_usd_per_1m),
            (cache_write, self.cache_write_micro_usd_per_1m),
            (cache_read, self.cache_read_micro_usd_per_1m),
            (output, self.output_micro_usd_per_1m),
        ]
        .into_iter()
        .fold(0u128, |sum, (tokens, per_1m)| {
            sum.saturating_add(u128::from(tokens) * u128::from(per_1m))
        });
        u64::try_from(total.div_ceil(1_000_000)).unwrap_or(u64::MAX)
    }

    /// The cost of `b`.
    pub(crate) fn of(&self, b: &Billed) -> u64 {
        self.micro_usd_cached(b.input, b.cache.write, b.cache.read, b.output)
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

    #[test]
    fn cache_classes_default_to_the_providers_ratios() {
        let p = Price::new(3_000_000, 15_000_000);
        assert_eq!(
            (p.cache_write_micro_usd_per_1m, p.cache_read_micro_usd_per_1m),
            (3_750_000, 300_000)
        );
        // Rounded up: 1.25 × 1 and 0.1 × 1.
        assert_eq!(
            (
                Price::new(1, 0).cache_write_micro_usd_per_1m,
                Price::new(1, 0).cache_read_micro_usd_per_1m
            ),
            (2, 1)
        );
        // 1M tokens in: 200k written, 300k read, 500k uncached; 1M out.
        let money = p.micro_usd_cached(1_000_000, 200_000, 300_000, 1_000_000);
        assert_eq!(money, 1_500_000 + 750_000 + 90_000 + 15_000_000);
        assert_eq!(p.micro_usd_cached(10, 0, 0, 5), p.micro_usd(10, 5));
        let custom = Price::new(1_000_000, 0).with_cache(2_000_000, 0);
        assert_eq!(custom.micro_usd_cached(3, 1, 1, 0), 1 + 2);
    }
}
