//! Token counts as the provider counts them, with `tiktoken-rs` directly
//! (the mock shares no code with the client it is tested against).
//!
//! The encoding of a model is `tiktoken`'s own table
//! ([`tiktoken_rs::tokenizer::get_tokenizer`]); a model it does not know is
//! counted with `cl100k_base` when its name starts with `claude` (Anthropic
//! publishes no tokenizer) and `o200k_base` otherwise. A chat prompt adds
//! OpenAI's framing (`num_tokens_from_messages` in OpenAI's cookbook): 3
//! tokens per message, 1 more for a `name`, 3 priming the reply.

use std::panic::{catch_unwind, AssertUnwindSafe};

use tiktoken_rs::tokenizer::{get_tokenizer, Tokenizer};
use tiktoken_rs::CoreBPE;

/// Framing tokens of each chat message.
const PER_MESSAGE: u64 = 3;
/// Extra tokens of a message that carries a `name`.
const PER_NAME: u64 = 1;
/// Tokens priming the reply, once per prompt.
pub(crate) const REPLY_PRIMING: u64 = 3;

/// One message of a chat prompt, as counted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counted<'a> {
    pub(crate) role: &'a str,
    pub(crate) text: &'a str,
    pub(crate) name: Option<&'a str>,
}

fn tokenizer_of(model: &str) -> Tokenizer {
    get_tokenizer(model).unwrap_or(if model.starts_with("claude") {
        Tokenizer::Cl100kBase
    } else {
        Tokenizer::O200kBase
    })
}

fn bpe(model: &str) -> Option<&'static CoreBPE> {
    let tokenizer = tokenizer_of(model);
    // The singletons unwrap inside; a broken table is a count by estimate.
    catch_unwind(|| tiktoken_rs::bpe_for_tokenizer(tokenizer).ok())
        .ok()
        .flatten()
}

/// Builds the two common encoders now rather than inside a first request.
pub(crate) fn preload() {
    let _ = bpe("gpt-4o");
    let _ = bpe("gpt-4");
}

/// Tokens of `text` with `bpe`; if the tokenizer gives up (a pathological
/// text), one per byte.
fn encoded(bpe: &CoreBPE, text: &str) -> u64 {
    catch_unwind(AssertUnwindSafe(|| count(bpe.encode_ordinary(text).len()))).unwrap_or(count(text.len()))
}

/// A length (tokens, bytes) as a token count; saturating, never wrapping.
fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Tokens of `text` as `model` counts it (about four bytes a token when no
/// tokenizer can be had).
pub(crate) fn count_text(model: &str, text: &str) -> u64 {
    match bpe(model) {
        Some(bpe) => encoded(bpe, text),
        None => count(text.len()).div_ceil(4),
    }
}

/// A key of the first `n` tokens of a prompt's messages (each message's
/// role and text, in order, as one text): two prompts that begin with the
/// same `n` tokens share it. Without a tokenizer, the first `4 n` bytes.
pub(crate) fn prefix_key(model: &str, messages: &[Counted<'_>], n: u64) -> u64 {
    let mut text = String::new();
    for m in messages {
        text.push_str(m.role);
        text.push('\n');
        text.push_str(m.text);
        text.push('\n');
    }
    let take = usize::try_from(n).unwrap_or(usize::MAX);
    let ids: Vec<u8> = match bpe(model) {
        Some(bpe) => catch_unwind(AssertUnwindSafe(|| bpe.encode_ordinary(&text)))
            .unwrap_or_default()
            .into_iter()
            .take(take)
            .flat_map(|id| id.to_le_bytes())
            .collect(),
        None => text.bytes().take(take.saturating_mul(4)).collect(),
    };
    crate::key::key_of([model.as_bytes(), b"prefix", &n.to_le_bytes(), &ids])
}

/// Prompt tokens of a chat prompt, framing included.
pub(crate) fn count_prompt(model: &str, messages: &[Counted<'_>]) -> u64 {
    let Some(bpe) = bpe(model) else {
        return messages.iter().map(|m| count(m.text.len()) / 4 + 4).sum::<u64>() + REPLY_PRIMING;
    };
    messages.iter().fold(REPLY_PRIMING, |total, m| {
        let name = m.name.map_or(0, |n| encoded(bpe, n) + PER_NAME);
        total + PER_MESSAGE + encoded(bpe, m.role) + encoded(bpe, m.text) + name
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_follow_tiktoken_then_the_vendor() {
        assert_eq!(tokenizer_of("gpt-4o-mini"), Tokenizer::O200kBase);
        assert_eq!(tokenizer_of("text-embedding-3-small"), Tokenizer::Cl100kBase);
        assert_eq!(tokenizer_of("claude-sonnet-4"), Tokenizer::Cl100kBase);
        assert_eq!(tokenizer_of("some-other-model"), Tokenizer::O200kBase);
    }

    #[test]
    fn a_prompt_adds_the_framing() {
        let text = count_text("gpt-4o", "hello world");
        assert_eq!(text, 2);
        let one = Counted {
            role: "user",
            text: "hello world",
            name: None,
        };
        assert_eq!(count_prompt("gpt-4o", &[one]), 3 + 3 + 1 + 2);
        let named = Counted {
            name: Some("bob"),
            ..one
        };
        assert_eq!(count_prompt("gpt-4o", &[named]), 3 + 3 + 1 + 2 + 1 + 1);
    }
}
