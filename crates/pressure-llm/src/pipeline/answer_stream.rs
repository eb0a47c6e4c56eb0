//! [`AnswerStream`]: a streamed event (docs/architecture.md#the-llm-stack: "a streamed answer may fall
//! back only before its first byte reached the client").
//!
//! See [`AnswerStream`].

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt};
use pressure_core::{Backend, MemoryBackend};
use serde_json::Map;

use super::answer::{Degradation, LlmReply};
use super::calls::stream::{Live, Streamed};
use super::engine::{Served, Settlement};
use super::error::LlmError;
use super::fallback::{queued_response, QUEUED_MODEL};
use super::metrics::Metrics;
use crate::price::{Money, TokenUse};
use crate::provider::{ChatChunk, ChatResponse, ChunkChoice, CompletionHeader, Delta, Usage};
use crate::taxonomy::ErrorKind;
use crate::tokens::TokenCounter;

/// How a live stream ended.
enum End {
    Completed,
    Failed(ErrorKind),
    Dropped,
}

/// Where an [`AnswerStream`] is.
enum Phase<B: Backend> {
    /// Fixed chunks (a `rules` or `manualQueue` level).
    Ready(VecDeque<ChatChunk>),
    /// A model level's stream.
    Live(Box<Live<B>>),
    /// The provider stream ended: the reservation is being reconciled, then
    /// `last` (the error, if it failed) is yielded.
    Settling {
        reconcile: BoxFuture<'static, ()>,
        last: Option<LlmError>,
    },
    Done,
}

/// A streamed answer: a [`Stream`] of chunks, ending with an `Err` item if
/// the committed level failed mid-stream.
///
/// [`LlmClient::stream`](super::LlmClient::stream) walks the chain like
/// `complete` until a model level yields its first chunk carrying output
/// (chunks before it, such as a role-only delta, are held back and replayed).
/// A failure before that point retries and falls back exactly like `complete`;
/// nothing has reached the caller. From that chunk on the level is
/// *committed*: a later failure (read timeout, an `error` event such as
/// `overloaded_error`, a cut connection, the deadline) is yielded as the last
/// item, `Err(LlmError::Upstream { .. })`, and no other level is asked.
///
/// The limiter permit and the breaker permit live in the stream. When the
/// provider stream ends, before the last item (or the end) is yielded, the
/// stream
///
/// * reconciles the limiter reservation to the final `usage`, or — without
///   one, e.g. after a failure — to the input tokens plus the output generated
///   so far (counted with the model's tokenizer);
/// * records the breaker outcome: a success with the time to first token, or
///   the failure as `complete` classifies it;
/// * adds the attempt's price to the metrics (and, when it failed, to the
///   money spent on failed attempts, the "errors by type" and the failed
///   attempts by kind).
///
/// Dropping the stream early (the client went away) does not stop the
/// provider, which goes on generating and billing: on a spawned task the
/// provider's answer is read to its end (bounded by the read timeout
/// between chunks and the event's deadline), so the reservation and the
/// payer are reconciled to what the provider billed — its final usage, or
/// without one the input plus the output it sent — and the limiter holds
/// the call while the provider works on it. Then both permits are
/// released; the breaker records a completed answer as a success and
/// anything else as nothing (a cancelled call says nothing about the
/// provider). Without a tokio runtime it is settled at once, to the output
/// read so far.
///
/// A `rules` level answers as a one-chunk stream (the answer's text as one
/// delta); a `manualQueue` level likewise with [`queued_text`](super::fallback::queued_text)
/// as the delta and the ticket in the chunk's extra field `pressure_ticket`
/// (also [`AnswerStream::ticket`]).
///
/// Usage is yielded only when the caller asked for it
/// (`stream_options.include_usage: true`), as OpenAI does: then the last
/// chunk has no choices and carries the `usage`; otherwise no chunk carries
/// one, so a loop reading `chunk.choices[0]` never meets an empty chunk. The
/// provider is always asked for usage, to reconcile the reservation.
pub struct AnswerStream<B: Backend = MemoryBackend> {
    level: usize,
    degradation: Degradation,
    model: Option<String>,
    attempts: u32,
    spent: Money,
    failed_spent: Money,
    ticket: Option<String>,
    phase: Phase<B>,
    metrics: Arc<Metrics>,
    counter: TokenCounter,
    /// The caller asked for the usage chunk.
    include_usage: bool,
}

impl<B: Backend> std::fmt::Debug for AnswerStream<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnswerStream")
            .field("level", &self.level)
            .field("degradation", &self.degradation)
            .field("model", &self.model)
            .field("attempts", &self.attempts)
            .field("ticket", &self.ticket)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> AnswerStream<B> {
    pub(super) fn new(
        served: Served<Streamed<B>>,
        metrics: Arc<Metrics>,
        counter: TokenCounter,
        include_usage: bool,
    ) -> Self {
        let mut ticket = None;
        let phase = match served.output {
            Streamed::Live(live) => Phase::Live(live),
            Streamed::Reply(LlmReply::Completion(r)) => Phase::Ready(response_chunks(r)),
            Streamed::Reply(LlmReply::Queued { ticket: t }) => {
                let chunks = response_chunks(queued_response(QUEUED_MODEL, &t));
                ticket = Some(t);
                Phase::Ready(chunks)
            }
        };
        Self {
            level: served.level,
            degradation: served.degradation,
            model: served.model,
            attempts: served.attempts,
            spent: served.spent,
            failed_spent: served.failed_spent,
            ticket,
            phase,
            metrics,
            counter,
            include_usage,
        }
    }

    /// `chunk` as the caller gets it: without usage unless asked for; `None`
    /// when nothing is left of it (a usage-only chunk nobody asked for).
    fn shape(&self, mut chunk: ChatChunk) -> Option<ChatChunk> {
        if self.include_usage {
            return Some(chunk);
        }
        if chunk.choices.is_empty() && chunk.usage.is_some() && !chunk.extra.contains_key("pressure_ticket") {
            return None;
        }
        chunk.usage = None;
        Some(chunk)
    }

    /// Which kind of level serves the stream.
    pub fn degradation(&self) -> Degradation {
        self.degradation
    }

    /// Index of the chain level that serves the stream.
    pub fn level(&self) -> usize {
        self.level
    }

    /// `provider/model` for a model level.
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// Provider calls made (all levels, the streaming one included).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Money spent so far; the streaming attempt is added once it ended.
    pub fn spent(&self) -> Money {
        self.spent
    }

    /// Money spent on failed attempts (the streaming one, once it failed).
    pub fn failed_spent(&self) -> Money {
        self.failed_spent
    }

    /// The manual-queue ticket, if the request was queued.
    pub fn ticket(&self) -> Option<&str> {
        self.ticket.as_deref()
    }

    /// The HTTP status to answer with: 200, or 202 for a queued request.
    pub fn http_status(&self) -> u16 {
        if self.ticket.is_some() {
            202
        } else {
            200
        }
    }

    /// The prompt tokens the live attempt reserved (counted with its
    /// model's tokenizer), while it is live: what a dialect that announces
    /// the input before the answer (Anthropic's `message_start`) shows.
    pub fn reserved_input_tokens(&self) -> Option<u64> {
        match &self.phase {
            Phase::Live(live) => Some(live.ledger.reservation().input_tokens),
            _ => None,
        }
    }

    /// Time to first token of the model stream, while it is live.
    pub fn ttft(&self) -> Option<Duration> {
        match &self.phase {
            Phase::Live(live) => live.stream.ttft(),
            _ => None,
        }
    }

    /// Settles a live stream that ended: breaker, metrics, money (the
    /// attempt's [`Ledger`](super::engine::Ledger)); returns the
    /// reconciliation (and release) of the limiter permit.
    fn settle(&mut self, live: Live<B>, end: End) -> BoxFuture<'static, ()> {
        let failed = matches!(end, End::Failed(_));
        let (cost, reconcile) = settle(&self.counter, &self.metrics, live, end);
        self.spent = self.spent + cost;
        if failed {
            self.failed_spent = self.failed_spent + cost;
        }
        reconcile
    }
}

/// Settles a live stream that ended: breaker, metrics, money (the attempt's
/// [`Ledger`](super::engine::Ledger)); returns the attempt's cost and the
/// reconciliation (and release) of the limiter permit.
fn settle<B: Backend>(
    counter: &TokenCounter,
    metrics: &Metrics,
    live: Live<B>,
    end: End,
) -> (Money, BoxFuture<'static, ()>) {
    let Live { stream, ledger, .. } = live;
    let end = match end {
        // The provider had finished; only the caller stopped reading.
        End::Dropped if stream.is_done() && stream.error().is_none() => End::Completed,
        other => other,
    };
    let used = match stream.usage() {
        Some(u) => u.token_use(),
        None => {
            let text = stream.output_text();
            let generated = counter
                .count_text(ledger.model(), text)
                .unwrap_or_else(|_| u64::try_from(text.len().div_ceil(4)).unwrap_or(u64::MAX));
            TokenUse::plain(ledger.reservation().input_tokens, generated)
        }
    };
    let how = match end {
        End::Completed => Settlement::Answered {
            ttft: stream.ttft(),
            total: stream.total(),
        },
        End::Failed(kind) => {
            metrics.error(kind.label());
            Settlement::Failed(kind)
        }
        // A cancelled call says nothing about the provider's health.
        End::Dropped => Settlement::Cancelled,
    };
    drop(stream);
    ledger.close(how, used)
}

/// A stream whose caller went away: the provider's answer is read to its
/// end (bounded by the read timeout between chunks and the event's
/// deadline, as any stream), so the attempt settles to what the provider
/// billed — its final usage — and the limiter holds the call for as long
/// as the provider works on it. Then it settles as [`settle`] does.
async fn settle_abandoned<B: Backend>(counter: TokenCounter, metrics: Arc<Metrics>, mut live: Live<B>) {
    while let Some(item) = live.stream.next().await {
        if item.is_err() {
            break;
        }
    }
    let (_, reconcile) = settle(&counter, &metrics, live, End::Dropped);
    reconcile.await;
}

impl<B: Backend> Stream for AnswerStream<B> {
    type Item = Result<ChatChunk, LlmError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            match &mut this.phase {
                Phase::Ready(chunks) => {
                    let Some(chunk) = chunks.pop_front() else {
                        this.phase = Phase::Done;
                        return Poll::Ready(None);
                    };
                    if let Some(chunk) = this.shape(chunk) {
                        return Poll::Ready(Some(Ok(chunk)));
                    }
                }
                Phase::Live(live) => {
                    if let Some(chunk) = live.buffered.pop_front() {
                        if let Some(chunk) = this.shape(chunk) {
                            return Poll::Ready(Some(Ok(chunk)));
                        }
                        continue;
                    }
                    let (end, last) = match live.stream.poll_next_unpin(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Some(Ok(chunk))) => {
                            if let Some(chunk) = this.shape(chunk) {
                                return Poll::Ready(Some(Ok(chunk)));
                            }
                            continue;
                        }
                        Poll::Ready(Some(Err(e))) => {
                            let err = LlmError::Upstream {
                                provider: live.ledger.provider().to_owned(),
                                model: live.ledger.model().to_owned(),
                                kind: e.kind.clone(),
                                status: e.status,
                                message: e.message,
                                param: e.param,
                            };
                            (End::Failed(e.kind), Some(err))
                        }
                        Poll::Ready(None) => (End::Completed, None),
                    };
                    let Phase::Live(live) = std::mem::replace(&mut this.phase, Phase::Done) else {
                        continue;
                    };
                    let reconcile = this.settle(*live, end);
                    this.phase = Phase::Settling { reconcile, last };
                }
                Phase::Settling { reconcile, last } => {
                    if reconcile.poll_unpin(cx).is_pending() {
                        return Poll::Pending;
                    }
                    let last = last.take();
                    this.phase = Phase::Done;
                    return Poll::Ready(last.map(Err));
                }
                Phase::Done => return Poll::Ready(None),
            }
        }
    }
}

impl<B: Backend> Drop for AnswerStream<B> {
    fn drop(&mut self) {
        let reconcile = match std::mem::replace(&mut self.phase, Phase::Done) {
            Phase::Live(live) => match tokio::runtime::Handle::try_current() {
                Ok(handle) => {
                    let abandoned = settle_abandoned(self.counter.clone(), Arc::clone(&self.metrics), *live);
                    handle.spawn(abandoned);
                    return;
                }
                Err(_) => self.settle(*live, End::Dropped),
            },
            Phase::Settling { reconcile, .. } => reconcile,
            Phase::Ready(_) | Phase::Done => return,
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(reconcile);
            }
            // No runtime: dropping the future drops the permit, which releases it.
            Err(_) => drop(reconcile),
        }
    }
}

/// A complete answer as a stream: one chunk with each choice's text as one
/// delta (and the answer's extra fields), then a usage-only chunk
/// (zero when the answer has none), which [`AnswerStream::shape`] drops
/// unless the caller asked for usage.
fn response_chunks(r: ChatResponse) -> VecDeque<ChatChunk> {
    let usage = r.usage.clone().unwrap_or(Usage {
        prompt_tokens: 0,
        completion_tokens: 0,
        total_tokens: 0,
        extra: Map::new(),
    });
    let tail = ChatChunk {
        header: chunk_header(&r.header),
        choices: Vec::new(),
        usage: Some(usage),
        extra: Map::new(),
    };
    VecDeque::from([response_chunk(r), tail])
}

/// The header of a stream chunk of the completion headed `h`.
fn chunk_header(h: &CompletionHeader) -> CompletionHeader {
    CompletionHeader {
        object: "chat.completion.chunk".to_owned(),
        ..h.clone()
    }
}

/// A complete answer as one chunk: each choice's text as one delta.
fn response_chunk(r: ChatResponse) -> ChatChunk {
    ChatChunk {
        header: chunk_header(&r.header),
        choices: r
            .choices
            .into_iter()
            .map(|c| ChunkChoice {
                index: c.index,
                delta: Delta {
                    role: Some(c.message.role.clone()),
                    content: Some(c.message.text()),
                    extra: Map::new(),
                },
                finish_reason: c.finish_reason,
                extra: Map::new(),
            })
            .collect(),
        usage: None,
        extra: r.extra,
    }
}
