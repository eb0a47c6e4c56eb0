//! The prompt cache the mock pretends to keep, so that a gateway can be
//! tested on cache pricing.
//!
//! An endpoint that reads a cacheable prefix in a request hands the
//! decision step a [`CacheProbe`]: the prefix's key (a hash of the model
//! and the prefix), its tokens and its [`CacheKind`]. [`PromptCache::use_of`]
//! looks the key up in a bounded set ([`CAPACITY`] keys, the oldest
//! forgotten first) and says how the prefix is billed ([`CacheUse`]):
//!
//! * [`CacheKind::Explicit`] (Anthropic's `cache_control`): first sight
//!   writes the prefix (`cache_creation_input_tokens`), later sights read it
//!   (`cache_read_input_tokens`);
//! * [`CacheKind::Automatic`] (OpenAI's automatic caching): first sight
//!   costs nothing extra (OpenAI charges no write), later sights read it
//!   (`cached_tokens`).
//!
//! The set is cleared by a reset (`POST /mock/reset`), not by a new
//! behaviour.

use std::collections::{HashSet, VecDeque};

use crate::key::key_of;
use crate::tokens::{prefix_key, Counted};

/// The most prefixes the mock remembers.
pub(crate) const CAPACITY: usize = 10_000;

/// OpenAI caches prompts of at least this many tokens.
pub(crate) const AUTO_MIN_TOKENS: u64 = 1_024;
/// OpenAI's cached prefix grows in steps of this many tokens.
pub(crate) const AUTO_STEP_TOKENS: u64 = 128;

/// Whose caching rules a prefix follows; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CacheKind {
    /// Anthropic's `cache_control` breakpoints: writes are billed.
    Explicit,
    /// OpenAI's automatic prefix caching: only reads show.
    Automatic,
}

/// A cacheable prefix of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CacheProbe {
    /// A hash of the model and the prefix.
    pub(crate) key: u64,
    /// The prefix's tokens (at most the request's input tokens).
    pub(crate) tokens: u64,
    pub(crate) kind: CacheKind,
}

/// How a request's input tokens split between the cache classes; the
/// rest of its input is uncached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CacheUse {
    /// Tokens written to the cache (billed at the cache-write price).
    pub(crate) write: u64,
    /// Tokens read from the cache (billed at the cache-read price).
    pub(crate) read: u64,
}

/// The bounded set of prefix keys; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct PromptCache {
    keys: HashSet<u64>,
    /// Insertion order, for evicting the oldest.
    order: VecDeque<u64>,
}

impl PromptCache {
    /// How `probe`'s prefix is billed now; remembers it for later requests.
    pub(crate) fn use_of(&mut self, probe: Option<CacheProbe>) -> CacheUse {
        let Some(p) = probe.filter(|p| p.tokens > 0) else {
            return CacheUse::default();
        };
        if self.keys.contains(&p.key) {
            return CacheUse {
                write: 0,
                read: p.tokens,
            };
        }
        if self.order.len() >= CAPACITY {
            if let Some(old) = self.order.pop_front() {
                self.keys.remove(&old);
            }
        }
        self.keys.insert(p.key);
        self.order.push_back(p.key);
        match p.kind {
            CacheKind::Explicit => CacheUse {
                write: p.tokens,
                read: 0,
            },
            CacheKind::Automatic => CacheUse::default(),
        }
    }

    /// Forgets every prefix.
    pub(crate) fn clear(&mut self) {
        self.keys.clear();
        self.order.clear();
    }
}

/// OpenAI's automatically cached prefix of a prompt of `input` tokens:
/// `floor(input / 128) * 128` when the prompt has at least 1024 tokens,
/// else none.
pub(crate) fn automatic_prefix(input: u64) -> Option<u64> {
    (input >= AUTO_MIN_TOKENS).then(|| input / AUTO_STEP_TOKENS * AUTO_STEP_TOKENS)
}

/// OpenAI's automatic cache probe of a prompt of `input` tokens: its
/// [`automatic_prefix`], keyed by `prompt_cache_key` when the request gives
/// one (with the prefix length), else by the prompt's first tokens
/// ([`prefix_key`]).
pub(crate) fn automatic_probe(
    model: &str,
    messages: &[Counted<'_>],
    input: u64,
    prompt_cache_key: Option<&str>,
) -> Option<CacheProbe> {
    let tokens = automatic_prefix(input)?;
    let key = match prompt_cache_key {
        Some(k) => key_of([
            model.as_bytes(),
            b"prompt_cache_key",
            k.as_bytes(),
            &tokens.to_le_bytes(),
        ]),
        None => prefix_key(model, messages, tokens),
    };
    Some(CacheProbe {
        key,
        tokens,
        kind: CacheKind::Automatic,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(key: u64, kind: CacheKind) -> Option<CacheProbe> {
        Some(CacheProbe {
            key,
            tokens: 10,
            kind,
        })
    }

    #[test]
    fn explicit_writes_then_reads_automatic_only_reads() {
        let mut c = PromptCache::default();
        assert_eq!(
            c.use_of(probe(1, CacheKind::Explicit)),
            CacheUse { write: 10, read: 0 }
        );
        assert_eq!(
            c.use_of(probe(1, CacheKind::Explicit)),
            CacheUse { write: 0, read: 10 }
        );
        assert_eq!(c.use_of(probe(2, CacheKind::Automatic)), CacheUse::default());
        assert_eq!(
            c.use_of(probe(2, CacheKind::Automatic)),
            CacheUse { write: 0, read: 10 }
        );
        assert_eq!(c.use_of(None), CacheUse::default());
        c.clear();
        assert_eq!(c.use_of(probe(1, CacheKind::Explicit)).write, 10);
    }

    #[test]
    fn the_oldest_key_is_forgotten_first() {
        let mut c = PromptCache::default();
        for k in 0..=u64::try_from(CAPACITY).unwrap() {
            c.use_of(probe(k, CacheKind::Explicit));
        }
        assert_eq!(c.use_of(probe(0, CacheKind::Explicit)).write, 10, "evicted");
        assert_eq!(c.use_of(probe(5, CacheKind::Explicit)).read, 10, "kept");
    }

    #[test]
    fn prefixes_step_by_128() {
        assert_eq!(automatic_prefix(1_023), None);
        assert_eq!(automatic_prefix(1_024), Some(1_024));
        assert_eq!(automatic_prefix(1_300), Some(1_280));
    }
}
