//! A chat request through the engine ([`Request`] for [`ChatRequest`]:
//! its reservation, the request sent to one model, the `rules` and
//! `manualQueue` levels), and [`Complete`]: a chat event answered whole.

use pressure_core::Backend;

use crate::pipeline::answer::LlmReply;
use crate::pipeline::config::{ChainLevel, ModelKind};
use crate::pipeline::engine::{Call, Engine, Ledger, ModelEntry, Request, Target};
use crate::pipeline::error::LlmError;
use crate::price::{Money, TokenUse};
use crate::provider::{
    CallError, ChatRequest, ChatResponse, Completion, Message, ProviderClient, ProviderKind, RateLimitHints,
    Usage,
};
use crate::reservation::Reservation;

impl<B: Backend> Request<B> for ChatRequest {
    type Prepared = ChatRequest;
    type Degraded = LlmReply;

    const KIND: ModelKind = ModelKind::Chat;

    /// The prompt counted with the model's tokenizer, the output cap (else
    /// the model's default); a request that overflows the context window
    /// does not fit the level, nor one carrying content only its own wire
    /// can carry ([`NativeRequest::native_only`](crate::provider::NativeRequest))
    /// to a provider of another wire.
    fn plan(&self, engine: &Engine<B>, m: &ModelEntry) -> Result<Result<Reservation, LlmError>, LlmError> {
        if let Some(native) = self.native.as_deref() {
            if let Some(param) = &native.native_only {
                let wire = engine
                    .providers
                    .get(&m.provider)
                    .and_then(ProviderClient::native_wire);
                if wire != Some(native.wire) {
                    return Ok(Err(LlmError::NativeOnly {
                        param: param.clone(),
                        wire: native.wire.as_str(),
                    }));
                }
            }
        }
        let messages: Vec<(String, String)> =
            self.messages.iter().map(|m| (m.role.clone(), m.text())).collect();
        let input = engine.counter.count_chat(&m.model, &messages)?;
        let max_tokens = self.max_output_tokens().map(u64::from);
        Ok(Reservation::for_request(input, max_tokens, &m.context).map_err(LlmError::ContextLength))
    }

    /// The request with its `model` set; to an Anthropic provider, which
    /// requires `max_tokens`, the output reserved for the call when the
    /// request named none.
    fn prepare(&self, m: &ModelEntry, provider: &ProviderClient, reservation: &Reservation) -> ChatRequest {
        let mut call = self.clone();
        call.model = m.model.clone();
        if provider.kind() == ProviderKind::Anthropic && call.max_output_tokens().is_none() {
            call.max_tokens = u32::try_from(reservation.output_tokens).ok();
        }
        call
    }

    /// The last user message.
    fn knn_query(&self) -> Option<String> {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == "user")
            .map(Message::text)
            .filter(|t| !t.trim().is_empty())
    }

    fn knn_answer(&self, answer: ChatResponse) -> Option<LlmReply> {
        Some(LlmReply::Completion(answer))
    }

    /// A `rules` handler's answer (none: go on), or a `manualQueue` ticket.
    async fn degraded(
        &self,
        engine: &Engine<B>,
        use_case: &str,
        level: &ChainLevel,
    ) -> Result<Option<LlmReply>, LlmError> {
        match level {
            ChainLevel::Rules(name) => {
                let Some(handler) = engine.handlers.get(name) else {
                    tracing::warn!(use_case, rules = %name, "no handler registered for rules level; skipped");
                    return Ok(None);
                };
                Ok(handler.handle(self).map(LlmReply::Completion))
            }
            ChainLevel::ManualQueue(_) => {
                let ticket = engine.queue.push(use_case, self).await?;
                Ok(Some(LlmReply::Queued { ticket }))
            }
            // The walk runs model and knn levels itself.
            ChainLevel::Model(_) | ChainLevel::Pool(_) | ChainLevel::Knn(_) => Ok(None),
        }
    }
}

/// A chat event answered whole.
pub(crate) struct Complete {
    pub(crate) req: ChatRequest,
}

impl<B: Backend> Call<B> for Complete {
    type Request = ChatRequest;
    type Sent = Completion;
    type Output = LlmReply;

    fn request(&self) -> &ChatRequest {
        &self.req
    }

    async fn send(&self, to: Target<'_>, prepared: &ChatRequest) -> Result<Completion, CallError> {
        to.provider.complete_tagged(prepared, to.deadline, to.tag).await
    }

    fn hints(sent: &Completion) -> &RateLimitHints {
        &sent.ratelimit
    }

    /// Settled at once, to the answer's `usage` (without one, to what was
    /// reserved).
    async fn finish(&self, done: Completion, ledger: Ledger<B>) -> (LlmReply, Money) {
        let r = *ledger.reservation();
        let used = done
            .usage
            .as_ref()
            .map_or(TokenUse::plain(r.input_tokens, r.output_tokens), Usage::token_use);
        let cost = ledger.answered(done.ttft, done.total, used).await;
        (LlmReply::Completion(done.response), cost)
    }

    fn degraded(answer: LlmReply) -> LlmReply {
        answer
    }

    fn trace_output(output: &LlmReply, span: &mut pressure_core::trace::Span) {
        if let LlmReply::Completion(resp) = output {
            span.set("gen_ai.response.model", resp.header.model.clone());
            if let Some(u) = &resp.usage {
                span.set("gen_ai.usage.input_tokens", u.prompt_tokens);
                span.set("gen_ai.usage.output_tokens", u.completion_tokens);
            }
        }
    }
}
