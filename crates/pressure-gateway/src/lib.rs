//! # pressure-gateway
//!
//! A reverse proxy that refuses what downstream cannot take before it
//! crosses the boundary: per-route and per-service limits before auth,
//! per-tenant limits after it, every permit released exactly once when the
//! response body ends or the client goes away.
//!
//! The request path: a validated config becomes a [`plan::Plan`] (router,
//! tenant policy, LLM client, bounds); the [`layers`] read the plan of their
//! request, route it once, and return refusals as [`rejection::Rejection`]
//! values rendered in one place. [`Gateway`] holds the current plan and
//! swaps it on reload; [`run`] is the process (signals, drain, reload).
//! The [`decisions`] listener opens the same broker to callers outside the
//! proxy: a decision API and forward auth for nginx, Caddy and Traefik.

pub mod access_log;
pub mod admin;
pub mod backend;
pub mod charged;
pub mod config;
pub mod decisions;
pub mod demo_upstream;
pub mod denial_log;
mod gateway;
pub mod layers;
pub mod manual_queue;
pub mod metrics;
pub mod openai;
pub mod path;
pub mod permits;
pub mod plan;
pub mod proxy;
pub mod rejection;
pub mod reload;
pub mod resources;
pub mod rls;
mod run;
pub mod server;
pub mod tls;

pub use gateway::{Gateway, GatewayError, GatewayService, Serving};
pub use run::{run, RunOptions};
