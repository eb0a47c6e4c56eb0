//! # pressure-llm
//!
//! The building blocks of the LLM client stack (DESIGN §6), outer to inner:
//! total deadline → fallback chain → retry (with its money budget) → circuit
//! breaker → limiter reservation → per-attempt timeouts. This crate starts
//! with the policy pieces that decide *whether* to call: the error taxonomy,
//! the retry policy with backoff, jitter, `retry-after` and a money budget,
//! and the circuit breaker per (provider, model). The provider client and
//! the OpenAI-compatible endpoint build on them.
pub mod breaker;

pub mod pipeline;
pub mod price;
pub mod provider;
pub mod reservation;
pub mod retry;
pub mod taxonomy;
pub mod tokens;
