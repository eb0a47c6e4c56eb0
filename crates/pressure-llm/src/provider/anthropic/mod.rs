//! Anthropic's Messages API behind the chat-completions interface
//! (`"kind": "anthropic"` on a provider, docs/architecture.md#what-openai-and-anthropic-clients-expect).
//!
//! The client stack above the provider speaks chat completions only
//! ([`ChatRequest`](super::ChatRequest), [`ChatResponse`](super::ChatResponse),
//! [`ChatChunk`](super::ChatChunk)); a provider of
//! [`ProviderKind::Anthropic`](super::ProviderKind::Anthropic) is translated
//! on the wire, both ways, by the modules here:
//!
//! * [`request`] — a chat request to a Messages request: system prompts to
//!   the top-level `system`, multi-part content (text, images as URL or
//!   base64 sources, PDF files as documents), assistant `tool_calls` to
//!   `tool_use` blocks, `role: tool` messages to `tool_result` blocks (one
//!   user turn per run of them), tools and `tool_choice`, `stop` to
//!   `stop_sequences`, and the mandatory `max_tokens` (the request's, else
//!   [`DEFAULT_MAX_TOKENS`]).
//! * [`response`] — a Messages answer to a `chat.completion`: text blocks
//!   to `content`, `tool_use` blocks to `tool_calls` (arguments as JSON
//!   text), `stop_reason` to `finish_reason`, `usage` to prompt / completion
//!   / total tokens.
//! * [`stream`] — Anthropic's server-sent events (`message_start`,
//!   `content_block_*`, `message_delta`, `message_stop`, `ping`, `error`) to
//!   `chat.completion.chunk` events, byte for byte in front of the ordinary
//!   [`ChatStream`](super::ChatStream): time to first token, the read
//!   timeout between chunks, the final usage and the output so far work
//!   unchanged, and so does the pipeline's rule that a stream falls back
//!   only before its first output chunk.
//! * [`wire`] — [`Anthropic`], the [`Wire`](super::wire::Wire) the
//!   provider client calls: the endpoint, the key and version headers, and
//!   the three translations above.
//! * [`error`] — Anthropic's error types and statuses, and how
//!   [`taxonomy::classify`](crate::taxonomy::classify) files them.
//!
//! The request goes to `{baseUrl}/messages` with `x-api-key` (from
//! `apiKeyEnv`) and `anthropic-version: 2023-06-01`; everything else about
//! the call (per-phase timeouts, the pool, `x-pressure-*` tags, rate-limit
//! hints from `anthropic-ratelimit-*` headers, error classification) is the
//! provider client's, shared with the OpenAI kind.
//!
//! # Token estimates for Claude models
//! The limiter reserves a call's prompt tokens before it is made. Claude's
//! tokenizer is not public (nothing can count Claude tokens offline; the
//! only exact count is Anthropic's own, in `usage` or its `count_tokens`
//! endpoint), so [`TokenCounter`](crate::tokens::TokenCounter) counts
//! `claude*` models with `cl100k_base`, flagged as an approximation by
//! [`Encoding::for_model`](crate::tokens::Encoding::for_model), plus
//! OpenAI's chat framing (3 tokens per message, 3 for the reply).
//!
//! The error bound, stated honestly: published comparisons of Claude 3.5
//! Sonnet with GPT-4o (`o200k_base`) report Claude counting about 16 % more
//! tokens on English prose, about 21 % more on maths and about 30 % more
//! on Python code. On this crate's fixture texts
//! (`tests/fixtures/anthropic/`: a support reply, Python code, tool-call
//! JSON) `cl100k_base` and `o200k_base` agree within 3 % (142 / 142, 230 /
//! 231, 86 / 88 tokens; checked by a test), so those ratios carry over:
//! **the estimate is low by up to about 30 % for English text and code**
//! (Claude's count ≈ 1.0–1.3 × ours), rarely high; other scripts, emoji and
//! newer Claude tokenizers are not covered by the bound and may differ
//! more. Tool definitions are not counted at all (for either kind).
//!
//! The error lasts one call: the reservation is reconciled to the `usage`
//! Anthropic reports (input plus cache-creation and cache-read tokens, and
//! output), and `anthropic-ratelimit-*` headers saying the quota is spent
//! hold the model until their reset, so a low estimate cannot run the fleet
//! into a 429 for longer than the calls in flight. A model's limits can be
//! configured about 25 % below Anthropic's to absorb the estimate's error up
//! front.

pub(super) mod error;
pub(super) mod request;
pub(super) mod response;
pub(super) mod stream;
mod wire;

pub(crate) use wire::Anthropic;

/// The tool through which a `response_format` of type `json_schema` is
/// asked of an Anthropic model (which has no JSON mode): the request
/// forces it with `tool_choice`, and its `tool_use` input comes back as
/// the message content, as JSON text ([`request`], [`response`],
/// [`stream`]). A caller's own tool of this name would be read the same
/// way; the name is chosen not to meet one.
pub(crate) const ANSWER_TOOL: &str = "pressure_response_format";

/// The `anthropic-version` header sent with every call.
pub(crate) const API_VERSION: &str = "2023-06-01";
/// The header carrying the API version.
pub(crate) const VERSION_HEADER: &str = "anthropic-version";
/// The header carrying the API key.
pub(crate) const API_KEY_HEADER: &str = "x-api-key";
