//! What one kind of call tells the engine; everything else — the chain
//! walk, the gate, the retry loop, the settlement — is the engine's,
//! written once.
//!
//! * [`Request`] — what depends on the request alone (chat or
//!   embeddings): its checks, the reservation of one level, the request
//!   sent to one model, the answer of a level without a model;
//! * [`Call`] — what depends on how it is sent (complete or streamed):
//!   one attempt, its rate-limit hints, and what a successful attempt
//!   leaves to settle.

use std::future::Future;

use pressure_core::Backend;
use tokio::time::Instant;

use super::ledger::Ledger;
use super::models::ModelEntry;
use super::Engine;
use crate::pipeline::config::{ChainLevel, ModelKind};
use crate::pipeline::error::LlmError;
use crate::price::Money;
use crate::provider::{CallError, CallTag, ChatResponse, ProviderClient, RateLimitHints};
use crate::reservation::Reservation;

/// Where one attempt goes: the provider, the event's deadline, and the
/// tag sent with it.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) provider: &'a ProviderClient,
    pub(crate) deadline: Instant,
    pub(crate) tag: &'a CallTag,
}

/// A request the engine can walk through a chain.
pub(crate) trait Request<B: Backend>: Sync {
    /// The request as sent to one model level (prepared once per level).
    type Prepared: Send + Sync;
    /// The answer of a level without a model.
    type Degraded: Send;

    /// The kind of model (and use case) the request is for.
    const KIND: ModelKind;

    /// Refuses what no provider would take, before anything is touched.
    fn validate(&self) -> Result<(), LlmError> {
        Ok(())
    }

    /// The reservation of one attempt on `m` (the engine sets the use
    /// case's priority on it): `Ok(Err(e))` when the request does not fit
    /// that model (the level is skipped; when it fits none, the event fails
    /// with the first such `e`), `Err` when the event cannot go on at all.
    fn plan(&self, engine: &Engine<B>, m: &ModelEntry) -> Result<Result<Reservation, LlmError>, LlmError>;

    /// The request for `m` on `provider`, with what was reserved for it.
    fn prepare(&self, m: &ModelEntry, provider: &ProviderClient, reservation: &Reservation)
        -> Self::Prepared;

    /// The text a `knn` level classifies (a chat request's last user
    /// message); `None`: the level is skipped.
    fn knn_query(&self) -> Option<String> {
        None
    }

    /// A `knn` level's answer as this request's answer (`None`: the
    /// request takes no such answer, the level is skipped).
    fn knn_answer(&self, answer: ChatResponse) -> Option<Self::Degraded> {
        let _ = answer;
        None
    }

    /// A level without a model (`rules`, `manualQueue`): its answer, or
    /// `None` to go on with the next level.
    fn degraded(
        &self,
        engine: &Engine<B>,
        use_case: &str,
        level: &ChainLevel,
    ) -> impl Future<Output = Result<Option<Self::Degraded>, LlmError>> + Send;
}

/// One way of sending a [`Request`], driven through the chain by the engine.
pub(crate) trait Call<B: Backend>: Sync {
    /// The request it sends.
    type Request: Request<B>;
    /// A successful attempt, not yet settled.
    type Sent: Send;
    /// What the event answers with.
    type Output: Send;

    /// The request.
    fn request(&self) -> &Self::Request;

    /// Sends one attempt of `prepared` to `to`.
    fn send(
        &self,
        to: Target<'_>,
        prepared: &<Self::Request as Request<B>>::Prepared,
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

    /// The output of a level without a model.
    fn degraded(answer: <Self::Request as Request<B>>::Degraded) -> Self::Output;

    /// Records what a successful attempt's output says on its span (the
    /// answering model, the tokens used), when it knows.
    fn trace_output(_output: &Self::Output, _span: &mut pressure_core::trace::Span) {}
}
