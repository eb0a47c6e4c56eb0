//! [`Call`]: what one kind of call (chat completion, stream, embeddings)
//! tells the engine; everything else — the chain walk, the gate, the retry
//! loop, the settlement — is the engine's, written once.

use std::future::Future;

use pressure_core::{Backend, Priority};
use tokio::time::Instant;

use super::ledger::Ledger;
use super::models::ModelEntry;
use super::Engine;
use crate::pipeline::config::{ChainLevel, ModelKind};
use crate::pipeline::error::LlmError;
use crate::price::Money;
use crate::provider::{CallError, CallTag, ProviderClient, RateLimitHints};
use crate::reservation::Reservation;

/// One kind of call, driven through the chain by the engine.
pub(crate) trait Call<B: Backend>: Sync {
    /// The request as sent to one model level (prepared once per level).
    type Prepared: Send + Sync;
    /// A successful attempt, not yet settled.
    type Sent: Send;
    /// What the event answers with.
    type Output: Send;

    /// The kind of model (and use case) this call is for.
    const KIND: ModelKind;

    /// Refuses what no provider would take, before anything is touched.
    fn validate(&self) -> Result<(), LlmError> {
        Ok(())
    }

    /// The reservation of one attempt on `m` at `priority`: `Ok(Err(e))`
    /// when the request does not fit that model (the level is skipped; when
    /// it fits none, the event fails with the first such `e`), `Err` when
    /// the event cannot go on at all.
    fn plan(
        &self,
        engine: &Engine<B>,
        m: &ModelEntry,
        priority: Priority,
    ) -> Result<Result<Reservation, LlmError>, LlmError>;

    /// The request for `m` on `provider`, with what was reserved for it.
    fn prepare(&self, m: &ModelEntry, provider: &ProviderClient, reservation: &Reservation)
        -> Self::Prepared;

    /// Sends one attempt.
    fn send(
        &self,
        provider: &ProviderClient,
        prepared: &Self::Prepared,
        deadline: Instant,
        tag: &CallTag,
    ) -> impl Future<Output = Result<Self::Sent, CallError>> + Send;

    /// The rate-limit hints of a successful attempt's response.
    fn hints(sent: &Self::Sent) -> &RateLimitHints;

    /// Turns a successful attempt into the output, settling `ledger` now
    /// (the returned cost is the attempt's) or handing it to the output to
    /// settle when it ends (cost zero here).
    fn finish(
        &self,
        sent: Self::Sent,
        ledger: Ledger<B>,
    ) -> impl Future<Output = (Self::Output, Money)> + Send;

    /// A level without a model (`rules`, `manualQueue`): its answer, or
    /// `None` to go on with the next level.
    fn degraded(
        &self,
        engine: &Engine<B>,
        use_case: &str,
        level: &ChainLevel,
    ) -> impl Future<Output = Result<Option<Self::Output>, LlmError>> + Send {
        let _ = (engine, use_case, level);
        async { Ok(None) }
    }
}
