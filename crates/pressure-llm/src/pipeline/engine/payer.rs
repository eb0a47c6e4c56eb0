//! The payer's side of one attempt: its estimated tokens and money
//! reserved on the event's payer (a tenant's `gateway:tenant:<id>`) before
//! the call, given back when the attempt does not go out, and reconciled to
//! what the provider billed by the [`Ledger`](super::Ledger).
//!
//! The estimate is an upper bound of the bill whenever the provider keeps
//! to `max_tokens`: the prompt's counted tokens × input price + the output
//! reserved × output price. A payer is charged no request (the caller's
//! request was counted where it came in) and no concurrency lease, and its
//! limits are not waited for (see [`Caller`](crate::pipeline::Caller)).

use pressure_core::{
    AcquireOptions, Backend, Demand, Denial, Nest, NestAcquisition, NestError, Permit, Reserved,
    ResourceHandle,
};

use tokio::time::Instant;

use super::models::ModelEntry;
use crate::pipeline::error::LlmError;
use crate::reservation::Reservation;

/// What the payer is charged for one attempt of `reservation` on `m`.
pub(super) fn estimate(m: &ModelEntry, reservation: &Reservation) -> AcquireOptions {
    let (input, output) = (reservation.input_tokens, reservation.output_tokens);
    AcquireOptions::default()
        .requests(0)
        .tokens(input, output)
        .cost_micro_usd(m.price.cost(input, output).micro_usd())
        .priority(reservation.priority)
        .without_lease()
}

/// What the payer is charged once the attempt is over: the tokens the
/// provider billed and their price.
pub(super) fn billed(tokens: (u64, u64), micro_usd: u64) -> Reserved {
    Reserved {
        requests: 0,
        input_tokens: tokens.0,
        output_tokens: tokens.1,
        cost_micro_usd: micro_usd,
    }
}

/// What one attempt reserved on its payer: a permit per level of the
/// payer's nest (a key, its tenant, the tenant's ancestors), innermost
/// first.
pub(super) type Paid<B> = Vec<Permit<B>>;

/// Reserves one attempt's estimate on every level of `payer`, all or
/// nothing: the permits, or why the level cannot call (a spent budget,
/// another of a payer's limits, a store that could not decide), naming the
/// level that refused.
pub(super) async fn charge<B: Backend>(
    payer: &Nest<B>,
    m: &ModelEntry,
    reservation: &Reservation,
    deadline: Instant,
    unix_nanos: u64,
) -> Result<Paid<B>, LlmError> {
    let opts = estimate(m, reservation);
    let (level, answer) = match payer.try_acquire(opts).await {
        Ok(NestAcquisition::Granted(permits)) => return Ok(permits),
        Ok(NestAcquisition::Denied { level, denial }) => (level, Ok(denial)),
        Err(NestError { level, error }) => (level, Err(error)),
    };
    let Some(payer) = payer.levels().get(level) else {
        return Err(LlmError::NoCapacity {
            resource: "payer".to_owned(),
            retry_after: None,
        });
    };
    match answer {
        Ok(d) => Err(refusal(payer, &opts, &d, deadline).await),
        // A call larger than a whole period's budget: no period can take
        // it, so it is a spent budget that asking again does not mend (a
        // rate limit here would send agents into hours of retries).
        Err(pressure_core::Error::DemandTooLarge {
            dimension,
            demand,
            max,
            ..
        }) if let Some(calendar) = dimension.calendar() => {
            let unix_ms = unix_nanos / 1_000_000;
            let reset_ms = calendar.next_reset(unix_ms).saturating_sub(unix_ms);
            Err(LlmError::BudgetExceeded {
                resource: payer.id().to_owned(),
                dimension,
                spent: spent_of(payer, dimension, max).await,
                budget: max,
                needed: demand,
                retry_after: std::time::Duration::from_millis(reset_ms.max(1)),
                beyond_deadline: true,
            })
        }
        Err(pressure_core::Error::DemandTooLarge { .. }) => Err(LlmError::NoCapacity {
            resource: payer.id().to_owned(),
            retry_after: None,
        }),
        Err(e) => Err(LlmError::Limiter(e)),
    }
}

/// The error of a payer's denial: a spent calendar budget names its
/// dimension, the spend (as the store counts it now) and the budget.
async fn refusal<B: Backend>(
    payer: &ResourceHandle<B>,
    opts: &AcquireOptions,
    d: &Denial,
    deadline: Instant,
) -> LlmError {
    let resource = payer.id().to_owned();
    if d.is_unavailable() || d.dimension.calendar().is_none() {
        return LlmError::NoCapacity {
            resource,
            retry_after: Some(d.wait),
        };
    }
    let budget = payer.limits().get(d.dimension).unwrap_or(0);
    let spent = spent_of(payer, d.dimension, budget).await;
    LlmError::BudgetExceeded {
        resource,
        dimension: d.dimension,
        spent,
        budget,
        needed: d.dimension.units(&Demand {
            requests: opts.requests,
            input_tokens: opts.input_tokens,
            output_tokens: opts.output_tokens,
            cost_micro_usd: opts.cost_micro_usd,
            ..Demand::default()
        }),
        retry_after: d.wait,
        beyond_deadline: Instant::now() + d.wait > deadline,
    }
}

/// What the store counts as spent on `dimension` of `payer` now (`or`
/// when it cannot say).
async fn spent_of<B: Backend>(
    payer: &ResourceHandle<B>,
    dimension: pressure_core::Dimension,
    or: u64,
) -> u64 {
    match payer.usage().await {
        Ok(u) => u
            .dimensions
            .iter()
            .find(|(dim, _)| *dim == dimension)
            .map_or(or, |(_, n)| *n),
        Err(_) => or,
    }
}

/// Gives back everything `paid` reserved: the attempt did not go out.
pub(super) async fn refund<B: Backend>(paid: Option<Paid<B>>) {
    settle(paid, billed((0, 0), 0)).await;
}

/// Corrects every level of `paid` to `bill` (what the provider billed).
pub(super) async fn settle<B: Backend>(paid: Option<Paid<B>>, bill: Reserved) {
    for mut p in paid.into_iter().flatten() {
        if let Err(e) = p.reconcile(bill).await {
            tracing::warn!(resource = p.resource().unwrap_or("-"), error = %e, "payer reconcile failed");
        }
    }
}
