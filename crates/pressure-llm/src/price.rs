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
}

impl ModelPrice {
    /// A price from micro-dollars per 1M input and output tokens.
    pub const fn new(input_micro_usd_per_1m: u64, output_micro_usd_per_1m: u64) -> Self {
        Self {
            input_micro_usd_per_1m,
            output_micro_usd_per_1m,
        }
    }

    /// The cost of `input_tokens` in and `output_tokens` out, rounded up to
    /// the whole micro-dollar (saturating at `u64::MAX`).
    pub fn cost(&self, input_tokens: u64, output_tokens: u64) -> Money {
        let total = u128::from(input_tokens) * u128::from(self.input_micro_usd_per_1m)
            + u128::from(output_tokens) * u128::from(self.output_micro_usd_per_1m);
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
    /// reserves (DESIGN §6).
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
