//! [`TokenCounter`]: counts prompt tokens with the model's BPE encoding.
//!
//! Encoders are process-wide and built lazily: the first count with an
//! encoding parses its embedded rank table (about 110 ms for `o200k_base`,
//! 35 ms for `cl100k_base` in a release build), every later count in any
//! thread reuses the same read-only `CoreBPE`. `tiktoken-rs` keeps one regex
//! clone per thread slot, so concurrent counts do not contend on a lock.
//! Call [`TokenCounter::preloaded`] at start-up to pay the load there and to
//! turn a broken table into a start-up error instead of a failed request.
//!
//! Counting is CPU work (roughly 25 ns per byte of English text and code in a
//! release build: 10 KB in about 0.25 ms with `o200k_base`, 0.4 ms with
//! `cl100k_base`), so large message bodies, which repeat across requests
//! (system prompts), are remembered in a small bounded cache keyed by a hash
//! of the text.
//!
//! Text is encoded as *ordinary* text: a special-token string such as
//! `<|endoftext|>` in a prompt counts as the plain characters it is made of,
//! which is how the provider treats user content too, and a prompt cannot
//! lower its own estimate by smuggling special tokens.

use super::encoding::{Encoding, ModelEncoding};
use super::TokenizerError;
use parking_lot::Mutex;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};
use tiktoken_rs::CoreBPE;

/// Tokens of framing per chat message (`<|start|>{role}<|message|>…<|end|>`),
/// from OpenAI's `num_tokens_from_messages` recipe for current models.
pub const TOKENS_PER_MESSAGE: u64 = 3;
/// Extra tokens when a message carries a `name` (besides the name's own).
pub const TOKENS_PER_NAME: u64 = 1;
/// Tokens priming the reply (`<|start|>assistant<|message|>`), once per request.
pub const REPLY_PRIMING_TOKENS: u64 = 3;

/// Texts longer than this are encoded in pieces: `fancy-regex` gives up on a
/// very long whitespace run (1 MB of spaces fails with `o200k_base`), and
/// `tiktoken-rs` turns that into a panic.
const MAX_PIECE_BYTES: usize = 32 * 1024;
/// Texts at least this long are remembered in the count cache.
const CACHE_MIN_BYTES: usize = 256;
/// Cache shards (a power of two).
const CACHE_SHARDS: usize = 16;
/// Default number of remembered texts over all shards.
const DEFAULT_CACHE_ENTRIES: usize = 4096;

/// The process-wide encoders, one slot per [`Encoding::ALL`] entry.
static ENCODERS: [OnceLock<Result<CoreBPE, TokenizerError>>; 2] = [OnceLock::new(), OnceLock::new()];

/// The shared encoder for `encoding`, built on first use.
fn encoder(encoding: Encoding) -> Result<&'static CoreBPE, TokenizerError> {
    ENCODERS[encoding.index()]
        .get_or_init(|| load(encoding))
        .as_ref()
        .map_err(Clone::clone)
}

/// Builds an encoder; `tiktoken-rs` unwraps inside its constructors, so a
/// panic is caught and reported as an error too.
fn load(encoding: Encoding) -> Result<CoreBPE, TokenizerError> {
    let built = catch_unwind(|| match encoding {
        Encoding::O200kBase => tiktoken_rs::o200k_base(),
        Encoding::Cl100kBase => tiktoken_rs::cl100k_base(),
    });
    let err = |reason: String| TokenizerError::Load {
        encoding: encoding.name(),
        reason,
    };
    match built {
        Ok(Ok(bpe)) => Ok(bpe),
        Ok(Err(e)) => Err(err(e.to_string())),
        Err(panic) => Err(err(panic_message(panic.as_ref()))),
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic while building the encoder".to_owned()
    }
}

/// One chat message as far as counting is concerned. Multi-part content
/// (an array of text parts) is counted by joining the text parts; images and
/// audio are not counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChatMessage<'a> {
    /// `system`, `user`, `assistant`, `tool`, …
    pub role: &'a str,
    /// The message text.
    pub content: &'a str,
    /// The optional participant name.
    pub name: Option<&'a str>,
}

impl<'a> ChatMessage<'a> {
    /// A message without a name.
    pub fn new(role: &'a str, content: &'a str) -> Self {
        Self {
            role,
            content,
            name: None,
        }
    }

    /// Sets the participant name.
    pub fn with_name(mut self, name: &'a str) -> Self {
        self.name = Some(name);
        self
    }
}

/// Anything [`TokenCounter::count_chat`] can read as a chat message:
/// [`ChatMessage`] and `(role, content)` pairs of `&str` or `String`.
pub trait AsChatMessage {
    /// The role, content and name to count.
    fn as_chat_message(&self) -> ChatMessage<'_>;
}

impl AsChatMessage for ChatMessage<'_> {
    fn as_chat_message(&self) -> ChatMessage<'_> {
        *self
    }
}

impl AsChatMessage for (&str, &str) {
    fn as_chat_message(&self) -> ChatMessage<'_> {
        ChatMessage::new(self.0, self.1)
    }
}

impl AsChatMessage for (String, String) {
    fn as_chat_message(&self) -> ChatMessage<'_> {
        ChatMessage::new(&self.0, &self.1)
    }
}

/// Counts prompt tokens per model. Cheap to clone: clones share the count
/// cache and the model overrides; all counters share the encoders.
#[derive(Debug, Clone)]
pub struct TokenCounter {
    overrides: Arc<HashMap<String, ModelEncoding>>,
    cache: Arc<CountCache>,
}

impl Default for TokenCounter {
    fn default() -> Self {
        Self::new()
    }
}

impl TokenCounter {
    /// A counter that loads encoders lazily, on the first count that needs
    /// them (a load failure is then that count's error).
    pub fn new() -> Self {
        Self {
            overrides: Arc::new(HashMap::new()),
            cache: Arc::new(CountCache::new(DEFAULT_CACHE_ENTRIES)),
        }
    }

    /// A counter whose `encodings` are built now; fails if one cannot be.
    pub fn preloaded(encodings: &[Encoding]) -> Result<Self, TokenizerError> {
        let counter = Self::new();
        counter.preload(encodings)?;
        Ok(counter)
    }

    /// Builds `encodings` now (idempotent; they are shared process-wide).
    pub fn preload(&self, encodings: &[Encoding]) -> Result<(), TokenizerError> {
        encodings.iter().try_for_each(|e| encoder(*e).map(drop))
    }

    /// Counts `model` (exact name, e.g. an Azure deployment) with `encoding`
    /// instead of the built-in table; the count is taken as exact.
    pub fn with_override(mut self, model: impl Into<String>, encoding: Encoding) -> Self {
        Arc::make_mut(&mut self.overrides).insert(model.into(), ModelEncoding::exact(encoding));
        self
    }

    /// Remembers at most about `entries` large texts (0 turns the cache off).
    pub fn with_cache_capacity(mut self, entries: usize) -> Self {
        self.cache = Arc::new(CountCache::new(entries));
        self
    }

    /// The encoding used for `model`: an override, else
    /// [`Encoding::for_model`].
    pub fn encoding_for(&self, model: &str) -> ModelEncoding {
        match self.overrides.get(model) {
            Some(e) => *e,
            None => Encoding::for_model(model),
        }
    }

    /// Tokens of `text` as `model` counts it (no chat framing).
    pub fn count_text(&self, model: &str, text: &str) -> Result<u64, TokenizerError> {
        self.count_with(self.encoding_for(model).encoding, text)
    }

    /// Tokens of `text` in `encoding`.
    pub fn count_with(&self, encoding: Encoding, text: &str) -> Result<u64, TokenizerError> {
        let bpe = encoder(encoding)?;
        Ok(self.count_cached(bpe, encoding, text))
    }

    /// Prompt tokens of a chat request, by OpenAI's `num_tokens_from_messages`
    /// recipe: per message [`TOKENS_PER_MESSAGE`] + tokens of the role and
    /// content (+ tokens of the name + [`TOKENS_PER_NAME`] when named), plus
    /// [`REPLY_PRIMING_TOKENS`] once. Tool definitions and tool calls are not
    /// included; count their JSON with [`count_text`](Self::count_text) and
    /// add it when a request carries them.
    pub fn count_chat<M: AsChatMessage>(&self, model: &str, messages: &[M]) -> Result<u64, TokenizerError> {
        let encoding = self.encoding_for(model).encoding;
        let bpe = encoder(encoding)?;
        let mut total = REPLY_PRIMING_TOKENS;
        for m in messages {
            let m = m.as_chat_message();
            total += TOKENS_PER_MESSAGE;
            total += self.count_cached(bpe, encoding, m.role);
            total += self.count_cached(bpe, encoding, m.content);
            if let Some(name) = m.name {
                total += self.count_cached(bpe, encoding, name) + TOKENS_PER_NAME;
            }
        }
        Ok(total)
    }

    fn count_cached(&self, bpe: &CoreBPE, encoding: Encoding, text: &str) -> u64 {
        if text.len() < CACHE_MIN_BYTES || !self.cache.enabled() {
            return count_pieces(bpe, text);
        }
        let key = self.cache.key(encoding, text);
        if let Some(n) = self.cache.get(key) {
            return n;
        }
        let n = count_pieces(bpe, text);
        self.cache.put(key, n);
        n
    }
}

/// Counts `text`, splitting it first when it is long. A cut is made only at
/// an ASCII space between two non-whitespace characters: no pre-tokenizer
/// piece of `o200k_base` or `cl100k_base` crosses such a place, so the count
/// is the same as for the whole text. A run of [`MAX_PIECE_BYTES`] without
/// such a place (one endless word or whitespace run) is cut anywhere, which
/// may shift the count by a token per cut.
fn count_pieces(bpe: &CoreBPE, text: &str) -> u64 {
    let mut rest = text;
    let mut total = 0;
    while rest.len() > MAX_PIECE_BYTES {
        let cut = cut_point(rest, MAX_PIECE_BYTES);
        total += encode_len(bpe, &rest[..cut]);
        rest = &rest[cut..];
    }
    total + encode_len(bpe, rest)
}

/// Where to cut `s` (longer than `max`): the last exact place in
/// `(max/2, max]`, else the last char boundary at or below `max`.
fn cut_point(s: &str, max: usize) -> usize {
    let bytes = s.as_bytes();
    let not_ws = |c: Option<char>| c.is_some_and(|c| !c.is_whitespace());
    let mut i = max;
    while i > max / 2 {
        if bytes[i] == b' ' && not_ws(s[..i].chars().next_back()) && not_ws(s[i + 1..].chars().next()) {
            return i;
        }
        i -= 1;
    }
    let mut i = max;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Token count of one piece. `tiktoken-rs` panics if the regex engine gives
/// up; that is caught and answered with a safe over-estimate (one token per
/// byte) rather than failing the request.
fn encode_len(bpe: &CoreBPE, text: &str) -> u64 {
    match catch_unwind(AssertUnwindSafe(|| bpe.encode_ordinary(text).len())) {
        Ok(n) => u64::try_from(n).unwrap_or(u64::MAX),
        Err(_) => {
            tracing::warn!(
                bytes = text.len(),
                "tokenizer gave up on a text; counting one token per byte"
            );
            u64::try_from(text.len()).unwrap_or(u64::MAX)
        }
    }
}

/// Remembered counts of large texts: `hash(encoding, text) → count`,
/// sharded, each shard cleared when full (no eviction bookkeeping on the
/// hot path). A 64-bit hash with a per-process random key, plus the length in
/// the key, makes a wrong answer from a collision practically impossible.
/// `(hash, byte length)` of a remembered text.
type CacheKey = (u64, usize);
/// One lock's worth of remembered counts.
type Shard = Mutex<HashMap<CacheKey, u64>>;

#[derive(Debug)]
struct CountCache {
    hasher: RandomState,
    per_shard: usize,
    shards: Box<[Shard]>,
}

impl CountCache {
    fn new(entries: usize) -> Self {
        let per_shard = entries.div_ceil(CACHE_SHARDS);
        let shards = if per_shard == 0 { 0 } else { CACHE_SHARDS };
        Self {
            hasher: RandomState::new(),
            per_shard,
            shards: (0..shards).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    fn enabled(&self) -> bool {
        !self.shards.is_empty()
    }

    fn key(&self, encoding: Encoding, text: &str) -> CacheKey {
        (self.hasher.hash_one((encoding.index(), text)), text.len())
    }

    fn shard(&self, key: CacheKey) -> &Shard {
        &self.shards[(key.0 as usize) & (CACHE_SHARDS - 1)]
    }

    fn get(&self, key: CacheKey) -> Option<u64> {
        self.shard(key).lock().get(&key).copied()
    }

    fn put(&self, key: CacheKey, count: u64) {
        let mut shard = self.shard(key).lock();
        if shard.len() >= self.per_shard {
            shard.clear();
        }
        shard.insert(key, count);
    }
}
