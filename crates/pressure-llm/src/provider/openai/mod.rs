//! OpenAI's chat completions, the wire everything above the provider
//! client speaks (a provider of kind `openai`, the default: OpenAI,
//! Azure-style proxies, vLLM and every other OpenAI-compatible server).
//!
//! Nothing is translated: a chat request is sent with `stream` and
//! `stream_options.include_usage` set for a streamed call ([`request`]),
//! and the answers are read as they come.

pub(super) mod request;
mod wire;

pub(crate) use wire::OpenAi;
