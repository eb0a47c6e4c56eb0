//! Prices per model and the [`Money`] they are paid in.
//!
//! Money is an integer count of **micro-dollars** (1 µUSD = 10⁻⁶ USD), so sums
//! of many small attempt costs never drift the way floats would. A price is
//! integer micro-dollars **per million tokens**, which is how providers quote
//! them: $2.50 per 1M input tokens is `inputMicroUsdPer1M: 2500000`. The cost
//! of one attempt is computed exactly in 128-bit arithmetic and rounded up to
//! the next whole micro-dollar once per attempt, so a budget is never
//! under-charged.
//!
//! ```json
//! { "models": { "gpt-4o": { "inputMicroUsdPer1M": 2500000, "outputMicroUsdPer1M": 10000000 } },
//!   "default": { "inputMicroUsdPer1M": 5000000, "outputMicroUsdPer1M": 15000000 } }
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Add;

use serde::{Deserialize, Serialize};

/// An amount of money in integer micro-dollars (10⁻⁶ USD).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(transparent)]
pub struct Money(u64);

impl Money {
    /// Nothing.
    pub const ZERO: Money = Money(0);

    /// `n` micro-dollars.
    pub const fn from_micro_usd(n: u64) -> Self {
        Money(n)
    }

    /// The amount in micro-dollars.
    pub const fn micro_usd(self) -> u64 {
        self.0
    }

    /// Sum that saturates at `u64::MAX` micro-dollars instead of wrapping.
    pub const fn saturating_add(self, other: Money) -> Money {
        Money(self.0.saturating_add(other.0))
    }

    /// Difference that stops at zero.
    pub const fn saturating_sub(self, other: Money) -> Money {
        Money(self.0.saturating_sub(other.0))
    }
}

impl Add for Money {
    type Output = Money;

    /// Saturating addition.
    fn add(self, rhs: Money) -> Money {
        self.saturating_add(rhs)
    }
}

impl fmt::Display for Money {
    /// Formats as dollars with six decimals, e.g. `$0.012500`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "${}.{:06}", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

/// The price of one model, integer micro-dollars per million tokens.
///
/// Prompt-cache classes (docs/architecture.md#agents-at-the-door-messages-and-responses): agents cache nearly every prompt, and
/// providers bill a cache write above and a cache read far below the input
/// price (Anthropic: 1.25× and 0.1×; OpenAI: cached input at a discount).
/// Without `cacheWriteMicroUsdPer1M` / `cacheReadMicroUsdPer1M` those tokens
/// are priced as plain input: never under-charged, but a tenant of an agent
/// would be refused long before its budget is really spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Micro-dollars per 1M input (prompt) tokens.
    #[serde(rename = "inputMicroUsdPer1M")]
    pub input_micro_usd_per_1m: u64,
    /// Micro-dollars per 1M output (completion) tokens; absent: 0 (an
    /// embedding model has no output tokens).
    #[serde(rename = "outputMicroUsdPer1M", default)]
    pub output_micro_usd_per_1m: u64,
    /// Micro-dollars per 1M input tokens written to the provider's prompt
    /// cache (Anthropic's `cache_creation_input_tokens`); absent: the input
    /// price.
    #[serde(
        rename = "cacheWriteMicroUsdPer1M",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cache_write_micro_usd_per_1m: Option<u64>,
    /// Micro-dollars per 1M input tokens read from the prompt cache
    /// (Anthropic's `cache_read_input_tokens`, OpenAI's `cached_tokens`);
    /// absent: the input price.
    #[serde(
        rename = "cacheReadMicroUsdPer1M",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cache_read_micro_usd_per_1m: Option<u64>,
}

/// The tokens of one call by price class, as the provider reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUse {
    /// Every input token, cached or not (what the limiter counts).
    pub input: u64,
    /// Of `input`, the tokens written to the prompt cache.
    pub cache_write: u64,
    /// Of `input`, the tokens read from the prompt cache.
    pub cache_read: u64,
    /// Output tokens.
    pub output: u64,
}

impl TokenUse {
    /// `input` tokens in and `output` out, none of them cached.
    pub const fn plain(input: u64, output: u64) -> Self {
        Self {
            input,
            cache_write: 0,
            cache_read: 0,
            output,
        }
    }

    /// Input tokens billed at the plain input price: `input` less the cache
    /// classes (never below zero, whatever a provider reports).
    pub fn uncached_input(&self) -> u64 {
        self.input
            .saturating_sub(self.cache_write)
            .saturating_sub(self.cache_read)
    }
}

impl ModelPrice {
    /// A price from micro-dollars per 1M input and output tokens.
    pub const fn new(input_micro_usd_per_1m: u64, output_micro_usd_per_1m: u64) -> Self {
        Self {
            input_micro_usd_per_1m,
            output_micro_usd_per_1m,
            cache_write_micro_usd_per_1m: None,
            cache_read_micro_usd_per_1m: None,
        }
    }

    /// The price with its prompt-cache classes; builder style.
    pub const fn with_cache(mut self, write_micro_usd_per_1m: u64, read_micro_usd_per_1m: u64) -> Self {
        self.cache_write_micro_usd_per_1m = Some(write_micro_usd_per_1m);
        self.cache_read_micro_usd_per_1m = Some(read_micro_usd_per_1m);
        self
    }

    /// The cost of `input_tokens` in and `output_tokens` out, rounded up to
    /// the whole micro-dollar (saturating at `u64::MAX`).
    pub fn cost(&self, input_tokens: u64, output_tokens: u64) -> Money {
        self.cost_of(&TokenUse::plain(input_tokens, output_tokens))
    }

    /// The cost of a call's tokens by class — uncached input, cache writes,
    /// cache reads and output each at its price — summed exactly and rounded
    /// up to the whole micro-dollar once (saturating at `u64::MAX`).
    pub fn cost_of(&self, used: &TokenUse) -> Money {
        let input = self.input_micro_usd_per_1m;
        let write = self.cache_write_micro_usd_per_1m.unwrap_or(input);
        let read = self.cache_read_micro_usd_per_1m.unwrap_or(input);
        let total = u128::from(used.uncached_input()) * u128::from(input)
            + u128::from(used.cache_write.min(used.input)) * u128::from(write)
            + u128::from(used.cache_read.min(used.input.saturating_sub(used.cache_write))) * u128::from(read)
            + u128::from(used.output) * u128::from(self.output_micro_usd_per_1m);
        let micro = total.div_ceil(1_000_000);
        Money(u64::try_from(micro).unwrap_or(u64::MAX))
    }
}

/// The model is not in the price table and the table has no default.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no price for model {model:?} and no default price")]
pub struct UnknownModel {
    /// The model that was asked for.
    pub model: String,
}

/// Prices per model name, with an optional default for unlisted models.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PriceTable {
    /// Price per exact model name (as sent in the request's `model`).
    #[serde(default)]
    pub models: BTreeMap<String, ModelPrice>,
    /// Price for models not listed; without it an unlisted model is an error,
    /// so a budget never silently treats an unknown model as free.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<ModelPrice>,
}

impl PriceTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the price of `model`; builder style.
    pub fn with_model(mut self, model: impl Into<String>, price: ModelPrice) -> Self {
        self.models.insert(model.into(), price);
        self
    }

    /// Sets the price of unlisted models; builder style.
    pub fn with_default(mut self, price: ModelPrice) -> Self {
        self.default = Some(price);
        self
    }

    /// The price of `model`: its own entry, else the default.
    pub fn price(&self, model: &str) -> Result<ModelPrice, UnknownModel> {
        self.models
            .get(model)
            .copied()
            .or(self.default)
            .ok_or_else(|| UnknownModel {
                model: model.to_owned(),
            })
    }

    /// The cost of one attempt on `model`: its input tokens plus the output
    /// tokens generated (before it failed, or in total), rounded up to the
    /// whole micro-dollar.
    ///
    /// To *estimate* the next attempt before making it, pass its prompt tokens
    /// and its `max_tokens` as the output — the same worst case the limiter
    /// reserves (docs/architecture.md#the-llm-stack).
    pub fn cost(&self, model: &str, input_tokens: u64, output_tokens: u64) -> Result<Money, UnknownModel> {
        Ok(self.price(model)?.cost(input_tokens, output_tokens))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_rounds_up_once_per_attempt() {
        // $2.50 / 1M in, $10 / 1M out.
        let p = ModelPrice::new(2_500_000, 10_000_000);
        assert_eq!(p.cost(1_000, 500), Money::from_micro_usd(2_500 + 5_000));
        // 1 token in = 2.5 µUSD → 3 µUSD.
        assert_eq!(p.cost(1, 0), Money::from_micro_usd(3));
        // 1 in + 1 out = 12.5 µUSD → 13 (rounded once, not 3 + 10).
        assert_eq!(p.cost(1, 1), Money::from_micro_usd(13));
        assert_eq!(p.cost(0, 0), Money::ZERO);
        assert_eq!(p.cost(u64::MAX, u64::MAX), Money::from_micro_usd(u64::MAX));
    }

    #[test]
    fn cache_classes_are_priced_apart_and_never_above_the_input() {
        // Anthropic's Sonnet: $3 in, $3.75 cache write, $0.30 cache read, $15 out.
        let p = ModelPrice::new(3_000_000, 15_000_000).with_cache(3_750_000, 300_000);
        let used = TokenUse {
            input: 10_000,
            cache_write: 2_000,
            cache_read: 7_000,
            output: 100,
        };
        // 1,000 × 3 + 2,000 × 3.75 + 7,000 × 0.3 + 100 × 15 = 3,000 + 7,500 + 2,100 + 1,500.
        assert_eq!(p.cost_of(&used), Money::from_micro_usd(14_100));
        // Without cache prices every input token is plain input.
        let plain = ModelPrice::new(3_000_000, 15_000_000);
        assert_eq!(plain.cost_of(&used), plain.cost(10_000, 100));
        // A provider reporting more cached than input tokens is not believed.
        let odd = TokenUse {
            input: 10,
            cache_write: 8,
            cache_read: u64::MAX,
            output: 0,
        };
        assert_eq!(odd.uncached_input(), 0);
        // Its 10 input tokens: 8 written (3.75 each), the other 2 read (0.3).
        assert_eq!(p.cost_of(&odd), Money::from_micro_usd(31));
        let max = TokenUse {
            input: u64::MAX,
            cache_write: u64::MAX,
            cache_read: u64::MAX,
            output: u64::MAX,
        };
        assert_eq!(p.cost_of(&max), Money::from_micro_usd(u64::MAX));
    }

    proptest::proptest! {
        /// Splitting input into cache classes priced at or below the input
        /// price never costs more than plain input, and never less than the
        /// classes' exact sum rounded up.
        #[test]
        fn the_cache_classes_split_the_input_exactly(
            input in 0u64..=u64::from(u32::MAX),
            write in 0u64..=u64::from(u32::MAX),
            read in 0u64..=u64::from(u32::MAX),
            output in 0u64..=u64::from(u32::MAX),
            price in 0u64..=100_000_000,
            write_price_pct in 0u64..=100,
            read_price_pct in 0u64..=100,
        ) {
            let write_price = price * write_price_pct / 100;
            let read_price = price * read_price_pct / 100;
            let p = ModelPrice::new(price, price).with_cache(write_price, read_price);
            let used = TokenUse { input, cache_write: write, cache_read: read, output };
            let cost = p.cost_of(&used);
            proptest::prop_assert!(cost <= ModelPrice::new(price, price).cost(input, output));
            let w = write.min(input);
            let r = read.min(input - w);
            let exact = u128::from(input - w - r) * u128::from(price)
                + u128::from(w) * u128::from(write_price)
                + u128::from(r) * u128::from(read_price)
                + u128::from(output) * u128::from(price);
            proptest::prop_assert_eq!(u128::from(cost.micro_usd()), exact.div_ceil(1_000_000));
        }
    }

    #[test]
    fn cache_prices_are_optional_in_the_json() {
        let p: ModelPrice = serde_json::from_str(
            r#"{"inputMicroUsdPer1M":3000000,"outputMicroUsdPer1M":15000000,"cacheWriteMicroUsdPer1M":3750000,"cacheReadMicroUsdPer1M":300000}"#,
        )
        .expect("a price");
        assert_eq!(
            p,
            ModelPrice::new(3_000_000, 15_000_000).with_cache(3_750_000, 300_000)
        );
        let p: ModelPrice = serde_json::from_str(r#"{"inputMicroUsdPer1M":1}"#).expect("a price");
        assert_eq!(p.cache_read_micro_usd_per_1m, None);
        assert_eq!(
            serde_json::to_string(&p).expect("encodes"),
            r#"{"inputMicroUsdPer1M":1,"outputMicroUsdPer1M":0}"#
        );
    }

    #[test]
    fn unknown_model_without_default_is_an_error() {
        let t = PriceTable::new().with_model("a", ModelPrice::new(1_000_000, 2_000_000));
        assert_eq!(t.cost("a", 1_000_000, 0), Ok(Money::from_micro_usd(1_000_000)));
        assert!(t.cost("b", 1, 1).is_err());
        let t = t.with_default(ModelPrice::new(3_000_000, 0));
        assert_eq!(t.cost("b", 1_000_000, 5), Ok(Money::from_micro_usd(3_000_000)));
    }

    #[test]
    fn display_in_dollars() {
        assert_eq!(Money::from_micro_usd(12_500).to_string(), "$0.012500");
        assert_eq!(Money::from_micro_usd(3_000_001).to_string(), "$3.000001");
    }
}
