//! What an event answers with: [`Answer`] (chat), [`EmbeddingAnswer`],
//! and the [`Degradation`] of the level that served it.

use crate::price::Money;
use crate::provider::{ChatResponse, EmbeddingResponse};

/// Which kind of level served an answer; the `x-pressure-degradation` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Degradation {
    /// The first model level of the chain.
    Primary,
    /// A later model level: `Backup(1)` is the first backup.
    Backup(usize),
    /// A `knn` level: the label of the nearest labelled examples, by a
    /// local embedding model.
    Knn,
    /// A non-LLM handler.
    Rules,
    /// The request was parked in the manual queue.
    ManualQueue,
}

impl Degradation {
    /// The header value: `primary`, `backup`, `knn`, `rules` or `manual_queue`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Primary => "primary",
            Self::Backup(_) => "backup",
            Self::Knn => "knn",
            Self::Rules => "rules",
            Self::ManualQueue => "manual_queue",
        }
    }
}

/// What answered a chat event: a completion, or a manual-queue ticket.
#[derive(Debug, Clone, PartialEq)]
pub enum LlmReply {
    /// A chat completion (from a model or a rules handler).
    Completion(ChatResponse),
    /// The request was accepted into the manual queue.
    Queued {
        /// The ticket id.
        ticket: String,
    },
}

/// The result of one chat event.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The answer.
    pub reply: LlmReply,
    /// Index of the chain level that served it.
    pub level: usize,
    /// Which kind of level that was.
    pub degradation: Degradation,
    /// `provider/model` for a model level.
    pub model: Option<String>,
    /// Provider calls made (all levels).
    pub attempts: u32,
    /// Money spent on every attempt, the successful one included.
    pub spent: Money,
    /// Money spent on failed attempts.
    pub failed_spent: Money,
}

impl Answer {
    /// The completion, if this is not a manual-queue ticket.
    pub fn response(&self) -> Option<&ChatResponse> {
        match &self.reply {
            LlmReply::Completion(r) => Some(r),
            LlmReply::Queued { .. } => None,
        }
    }

    /// The manual-queue ticket, if any.
    pub fn ticket(&self) -> Option<&str> {
        match &self.reply {
            LlmReply::Queued { ticket } => Some(ticket),
            LlmReply::Completion(_) => None,
        }
    }

    /// The HTTP status to answer with: 200, or 202 for a queued request.
    pub fn http_status(&self) -> u16 {
        match self.reply {
            LlmReply::Completion(_) => 200,
            LlmReply::Queued { .. } => 202,
        }
    }
}

/// The answer of one embeddings event.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingAnswer {
    /// The provider's answer (vectors, model, usage).
    pub response: EmbeddingResponse,
    /// Index of the chain level that served it.
    pub level: usize,
    /// `Primary` or `Backup(n)`.
    pub degradation: Degradation,
    /// `provider/model` of that level.
    pub model: String,
    /// Provider calls made (all levels).
    pub attempts: u32,
    /// Money spent on every attempt, the successful one included.
    pub spent: Money,
    /// Money spent on failed attempts.
    pub failed_spent: Money,
}
