//! [`Open`]: a streamed chat event, committed at the first output chunk of
//! a model level ([`Live`]; docs/architecture.md#the-llm-stack: "a streamed answer may fall back
//! only before its first byte reached the client").
//!
//! An attempt is the provider stream read up to its first chunk with
//! output (or its successful end); a failure before that retries and falls
//! back like a complete answer. From that chunk on, the attempt's
//! [`Ledger`] lives in the [`Live`] stream and is settled when it ends or is
//! dropped ([`AnswerStream`](crate::pipeline::AnswerStream)).

use std::collections::VecDeque;

use futures::StreamExt;
use pressure_core::Backend;

use crate::pipeline::answer::LlmReply;
use crate::pipeline::engine::{Call, Ledger, Target};
use crate::price::Money;
use crate::provider::{CallError, ChatChunk, ChatRequest, ChatStream, RateLimitHints};

/// A streamed chat event.
pub(crate) struct Open {
    pub(crate) req: ChatRequest,
}

/// What a streamed event is served with.
pub(crate) enum Streamed<B: Backend> {
    /// A complete reply (a `rules` or `manualQueue` level).
    Reply(LlmReply),
    /// A model level's stream.
    Live(Box<Live<B>>),
}

/// A provider stream read up to its first output chunk.
pub(crate) struct Opened {
    stream: ChatStream,
    /// The chunks read, to be replayed.
    buffered: VecDeque<ChatChunk>,
}

/// A model level's stream, committed at its first output chunk, with the
/// attempt's ledger to settle when it ends.
pub(crate) struct Live<B: Backend> {
    pub(crate) stream: ChatStream,
    /// Chunks read while opening, not yet yielded.
    pub(crate) buffered: VecDeque<ChatChunk>,
    pub(crate) ledger: Ledger<B>,
}

impl<B: Backend> Call<B> for Open {
    type Request = ChatRequest;
    type Sent = Opened;
    type Output = Streamed<B>;

    fn request(&self) -> &ChatRequest {
        &self.req
    }

    /// Opens a provider stream and reads it up to its first chunk with
    /// output (or its successful end).
    async fn send(&self, to: Target<'_>, prepared: &ChatRequest) -> Result<Opened, CallError> {
        let mut stream = to.provider.stream_tagged(prepared, to.deadline, to.tag).await?;
        let mut buffered = VecDeque::new();
        loop {
            match stream.next().await {
                Some(Ok(chunk)) => {
                    let output = chunk.has_output();
                    buffered.push_back(chunk);
                    if output {
                        break;
                    }
                }
                Some(Err(e)) => return Err(e),
                None => break,
            }
        }
        Ok(Opened { stream, buffered })
    }

    fn hints(sent: &Opened) -> &RateLimitHints {
        sent.stream.ratelimit()
    }

    async fn finish(&self, opened: Opened, ledger: Ledger<B>) -> (Streamed<B>, Money) {
        let live = Live {
            stream: opened.stream,
            buffered: opened.buffered,
            ledger,
        };
        (Streamed::Live(Box::new(live)), Money::ZERO)
    }

    fn degraded(answer: LlmReply) -> Streamed<B> {
        Streamed::Reply(answer)
    }
}
