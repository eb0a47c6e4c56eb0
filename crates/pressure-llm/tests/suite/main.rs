//! The LLM stack's integration suites, one module each (the directories
//! beside this one), in one test binary: `cargo test -p pressure-llm
//! --test suite <module>::` runs one suite. Each suite keeps to its own
//! servers, ports and environment variable names, so they run side by
//! side in one process (provider_proxy, which sets the process's
//! `HTTP_PROXY`, is a binary of its own).

// Shared by several suites (each `use super::support`), which allow
// `unwrap` in test code as it does.
#[path = "../support/mod.rs"]
#[allow(clippy::unwrap_used)]
mod support;

#[path = "../anthropic/main.rs"]
mod anthropic;
#[path = "../breaker/main.rs"]
mod breaker;
#[path = "../fleet_breaker/main.rs"]
mod fleet_breaker;
#[path = "../local_model/main.rs"]
mod local_model;
#[path = "../payer/main.rs"]
mod payer;
#[path = "../pipeline/main.rs"]
mod pipeline;
#[path = "../pipeline_extra/main.rs"]
mod pipeline_extra;
#[path = "../pipeline_stream/main.rs"]
mod pipeline_stream;
#[path = "../pool/main.rs"]
mod pool;
#[path = "../provider/main.rs"]
mod provider;
#[path = "../retry/main.rs"]
mod retry;
#[path = "../tokens/main.rs"]
mod tokens;
