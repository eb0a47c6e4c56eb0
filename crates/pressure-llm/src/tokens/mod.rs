//! Prompt token counting with a real tokenizer (`tiktoken-rs`, whose BPE
//! ranks are embedded in the binary: no download at run time).
//!
//! The broker reserves a call's input tokens before it is made (docs/architecture.md#the-llm-stack),
//! so the prompt is counted the way the provider will count it:
//! [`Encoding::for_model`] picks the encoding (`o200k_base` for the GPT-4o,
//! GPT-4.1, GPT-5 and `o` families and for unknown models, `cl100k_base` for
//! GPT-4, GPT-3.5 and `text-embedding-3`, `cl100k_base` as an approximation
//! for Anthropic's Claude), and [`TokenCounter::count_chat`] adds OpenAI's
//! per-message framing. An approximate count is corrected after the call by
//! reconciling with the response's `usage`.

mod counter;
mod encoding;

pub use counter::{
    AsChatMessage, ChatMessage, TokenCounter, REPLY_PRIMING_TOKENS, TOKENS_PER_MESSAGE, TOKENS_PER_NAME,
};
pub use encoding::{Encoding, ModelEncoding};

/// A tokenizer could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenizerError {
    /// The encoding's rank table could not be built (a corrupt embedded
    /// table or a bug in the tokenizer crate); the count cannot be made.
    #[error("cannot load the {encoding} tokenizer: {reason}")]
    Load {
        /// The encoding's name, e.g. `o200k_base`.
        encoding: &'static str,
        /// What went wrong.
        reason: String,
    },
}
