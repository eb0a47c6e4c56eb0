//! The gateway's integration suites, one module each (the directories
//! beside this one), in one test binary: `cargo test -p pressure-gateway
//! --test suite <module>::` runs one suite. Each suite keeps to its own
//! servers, ports, Redis key prefixes and environment variable names, so
//! they run side by side in one process.

// Shared by several suites (each `use super::…`s them): the gateway and
// upstreams of `gateway/support.rs`, the decision API's harness.
#[path = "../decisions/harness.rs"]
#[allow(dead_code)]
mod harness;
#[path = "../gateway/support.rs"]
#[allow(dead_code)]
mod support;

#[path = "../admin/main.rs"]
mod admin;
#[path = "../api_keys/main.rs"]
mod api_keys;
#[path = "../auth/main.rs"]
mod auth;
#[path = "../budgets/main.rs"]
mod budgets;
#[path = "../config/main.rs"]
mod config;
#[path = "../decisions/main.rs"]
mod decisions;
#[path = "../exchange/main.rs"]
mod exchange;
#[path = "../forward_auth/main.rs"]
mod forward_auth;
#[path = "../gateway/main.rs"]
mod gateway;
#[path = "../in_place/main.rs"]
mod in_place;
#[path = "../llm/main.rs"]
mod llm;
#[path = "../manual_queue/main.rs"]
mod manual_queue;
#[path = "../nested/main.rs"]
mod nested;
#[path = "../outage/main.rs"]
mod outage;
#[path = "../overrides/main.rs"]
mod overrides;
#[path = "../pools/main.rs"]
mod pools;
#[path = "../proxy/main.rs"]
mod proxy;
#[path = "../redis_state/main.rs"]
mod redis_state;
#[path = "../routing/main.rs"]
mod routing;
#[path = "../runtime_keys/main.rs"]
mod runtime_keys;
#[path = "../shadow/main.rs"]
mod shadow;
#[path = "../timeouts/main.rs"]
mod timeouts;
#[path = "../tls/main.rs"]
mod tls;
#[path = "../traces/main.rs"]
mod traces;
#[path = "../traffic/main.rs"]
mod traffic;
