//! [`ModelEntry`]: one configured model, ready to call, and the provider
//! hold its rate-limit headers impose ([`hold_for`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use pressure_core::clock::{duration_to_millis, duration_to_nanos};
use pressure_core::{Backend, QueueConfig, ResourceBroker, ResourceConfig};

use crate::pipeline::config::ModelConfig;
use crate::pipeline::error::LlmError;
use crate::price::ModelPrice;
use crate::provider::RateLimitHints;
use crate::reservation::{resource_id, ModelLimits, Reservation};

/// One configured model, ready to call.
#[derive(Debug)]
pub(crate) struct ModelEntry {
    pub(crate) provider: String,
    pub(crate) model: String,
    /// `provider/model`.
    pub(crate) key: String,
    /// The broker resource, when the model has limits.
    pub(crate) resource: Option<String>,
    pub(crate) context: ModelLimits,
    /// Embedding models: the most tokens one input may have.
    pub(crate) max_input_tokens: Option<u64>,
    pub(crate) price: ModelPrice,
    /// The model's limits are in shadow mode (`"shadow": true`): a refusal
    /// of its limiter lets the attempt go, counted as `shadowDenied`.
    pub(crate) shadow: bool,
    /// Provider hold: no call before this instant (nanoseconds on the
    /// client's clock; 0 = none). See [`hold_for`].
    hold: AtomicU64,
}

impl ModelEntry {
    /// The entry of `m`, its resource registered on `broker` when it has
    /// limits: a `queue` resource (not `register_limit`) so that the batch
    /// ceiling applies to `Priority::Batch` acquisitions.
    pub(crate) fn register<B: Backend>(
        m: &ModelConfig,
        broker: &ResourceBroker<B>,
    ) -> Result<Self, LlmError> {
        let resource = match &m.limits {
            Some(limits) => {
                let id = resource_id(&m.provider, &m.model);
                let queue = QueueConfig {
                    batch_headroom: m.batch_headroom(),
                    ..QueueConfig::default()
                };
                broker.register(id.clone(), ResourceConfig::new(limits.clone()).queue(queue))?;
                Some(id)
            }
            None => None,
        };
        Ok(Self {
            provider: m.provider.clone(),
            model: m.model.clone(),
            key: m.key(),
            resource,
            context: m.context,
            max_input_tokens: m.max_input_tokens,
            price: m.price,
            shadow: m.limits.as_ref().is_some_and(|l| l.shadow),
            hold: AtomicU64::new(0),
        })
    }

    /// How long the model is still held at `now_nanos` (client clock), if it is.
    pub(crate) fn held(&self, now_nanos: u64) -> Option<Duration> {
        let held = self.hold.load(Ordering::Relaxed);
        (held > now_nanos).then(|| Duration::from_nanos(held - now_nanos))
    }

    /// Holds the model until the reset the provider announced, when
    /// [`hold_for`] says its quota is spent (`typical`: the reservation of
    /// the call that got the answer). A hold only ever extends.
    pub(crate) fn apply_hints(&self, hints: &RateLimitHints, typical: &Reservation, now_nanos: u64) {
        if let Some(d) = hold_for(hints, typical) {
            let until = now_nanos.saturating_add(duration_to_nanos(d));
            let before = self.hold.fetch_max(until, Ordering::Relaxed);
            if before < until {
                tracing::info!(model = %self.key, hold_ms = duration_to_millis(d), "provider rate-limit headers: holding model until reset");
            }
        }
    }
}

/// Longest hold a provider's headers can impose (a guard against a bogus reset).
pub(crate) const MAX_PROVIDER_HOLD: Duration = Duration::from_secs(60);

/// How long a (provider, model) must not be called after a successful answer
/// whose rate-limit headers say the quota is spent, before the provider
/// would answer 429:
///
/// * remaining requests is 0 → until the request window resets;
/// * remaining tokens (or, Anthropic, input / output tokens) is below what
///   `typical` (the reservation of the call that got the answer, as an
///   estimate of the next one) needs → until the token window resets.
///
/// Without a reset figure there is no hold (the local limiter and the
/// provider's 429 with `retry-after` still apply). The longest applicable
/// reset wins, capped at [`MAX_PROVIDER_HOLD`]. The hold is kept in this
/// process only (not shared through the broker backend).
pub(crate) fn hold_for(hints: &RateLimitHints, typical: &Reservation) -> Option<Duration> {
    let mut hold: Option<Duration> = None;
    let mut extend = |d: Option<Duration>| {
        if let Some(d) = d {
            hold = Some(hold.map_or(d, |h| h.max(d)));
        }
    };
    if hints.remaining_requests == Some(0) {
        extend(hints.reset_requests);
    }
    let total = typical.input_tokens.saturating_add(typical.output_tokens);
    let short = hints.remaining_tokens.is_some_and(|r| r < total)
        || hints
            .remaining_input_tokens
            .is_some_and(|r| r < typical.input_tokens)
        || hints
            .remaining_output_tokens
            .is_some_and(|r| r < typical.output_tokens);
    if short {
        extend(hints.reset_tokens);
    }
    hold.filter(|d| !d.is_zero()).map(|d| d.min(MAX_PROVIDER_HOLD))
}
