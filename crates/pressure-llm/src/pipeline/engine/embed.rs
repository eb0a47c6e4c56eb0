//! [`Embed`]: an embeddings event, through the same layers as a chat
//! completion (docs/architecture.md#what-openai-and-anthropic-clients-expect).
//!
//! It lives with the engine rather than beside the chat calls
//! (`pipeline::calls`) because the engine makes embeddings calls of its
//! own: a `knn` level embeds the request's text through it (`knn`).
//!
//! * the request is checked first ([`EmbeddingRequest::validate`]): a
//!   request OpenAI would refuse fails with a 400 before any call;
//! * each level reserves **one request and the input tokens** (no output
//!   tokens: embeddings produce none); an input longer than a level's
//!   `maxInputTokens` does not fit it, and when it fits none the event
//!   fails with [`LlmError::InputTooLong`];
//! * the attempt is `POST {baseUrl}/embeddings`, reconciled to the answer's
//!   `usage.prompt_tokens`; a failure costs its input tokens.
//!
//! Embedding chains hold model levels only (configuration validation
//! refuses `rules` and `manualQueue` there), so the answer is always a
//! model's: `Primary` or `Backup(n)`.

use std::convert::Infallible;

use pressure_core::Backend;

use super::{Call, Engine, Ledger, ModelEntry, Request, Target};
use crate::pipeline::config::{ChainLevel, ModelKind};
use crate::pipeline::error::LlmError;
use crate::price::{Money, TokenUse};
use crate::provider::{
    CallError, EmbeddingCompletion, EmbeddingRequest, EmbeddingResponse, InputItem, ProviderClient,
    RateLimitHints,
};
use crate::reservation::Reservation;

/// An embeddings event.
pub(crate) struct Embed {
    pub(crate) req: EmbeddingRequest,
}

impl<B: Backend> Request<B> for EmbeddingRequest {
    type Prepared = EmbeddingRequest;
    type Degraded = Infallible;

    const KIND: ModelKind = ModelKind::Embedding;

    fn validate(&self) -> Result<(), LlmError> {
        EmbeddingRequest::validate(self).map_err(LlmError::InvalidEmbedding)
    }

    /// Tokens of each input, counted with the model's tokenizer (token-id
    /// inputs count their ids), against the level's `maxInputTokens`.
    fn plan(&self, engine: &Engine<B>, m: &ModelEntry) -> Result<Result<Reservation, LlmError>, LlmError> {
        let counts = self
            .input
            .items()
            .into_iter()
            .map(|item| match item {
                InputItem::Text(t) => engine.counter.count_text(&m.model, t),
                InputItem::Tokens(ids) => Ok(u64::try_from(ids.len()).unwrap_or(u64::MAX)),
            })
            .collect::<Result<Vec<u64>, _>>()?;
        let over = m.max_input_tokens.and_then(|max| {
            counts
                .iter()
                .position(|&n| n > max)
                .map(|index| LlmError::InputTooLong {
                    index,
                    tokens: counts[index],
                    max,
                })
        });
        Ok(match over {
            Some(e) => Err(e),
            None => Ok(Reservation::new(counts.iter().sum(), 0)),
        })
    }

    fn prepare(&self, m: &ModelEntry, _: &ProviderClient, _: &Reservation) -> EmbeddingRequest {
        let mut call = self.clone();
        call.model = m.model.clone();
        call
    }

    /// Embedding chains hold model levels only.
    async fn degraded(&self, _: &Engine<B>, _: &str, _: &ChainLevel) -> Result<Option<Infallible>, LlmError> {
        Ok(None)
    }
}

impl<B: Backend> Call<B> for Embed {
    type Request = EmbeddingRequest;
    type Sent = EmbeddingCompletion;
    type Output = EmbeddingResponse;

    fn request(&self) -> &EmbeddingRequest {
        &self.req
    }

    async fn send(
        &self,
        to: Target<'_>,
        prepared: &EmbeddingRequest,
    ) -> Result<EmbeddingCompletion, CallError> {
        to.provider.embed_tagged(prepared, to.deadline, to.tag).await
    }

    fn hints(sent: &EmbeddingCompletion) -> &RateLimitHints {
        &sent.ratelimit
    }

    async fn finish(&self, done: EmbeddingCompletion, ledger: Ledger<B>) -> (EmbeddingResponse, Money) {
        let input = ledger.reservation().input_tokens;
        let prompt = done.response.usage.as_ref().map_or(input, |u| u.prompt_tokens);
        let cost = ledger
            .answered(done.ttft, done.total, TokenUse::plain(prompt, 0))
            .await;
        (done.response, cost)
    }

    fn degraded(answer: Infallible) -> EmbeddingResponse {
        match answer {}
    }
}
