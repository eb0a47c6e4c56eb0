//! # pressure-gateway
//!
//! A reverse proxy that refuses what downstream cannot take before it
//! crosses the boundary: per-route and per-service limits before auth,
//! per-tenant limits after it, every permit released exactly once when the
//! response body ends or the client goes away.

pub mod admin;
pub mod app;
pub mod backend;
pub mod body_limit;
pub mod config;
pub mod demo_upstream;
pub mod layers;
pub mod llm;
pub mod manual_queue;
pub mod metrics;
pub mod permits;
pub mod proxy;
pub mod routes;
pub mod server;

pub use app::{run, Gateway, GatewayError, GatewayService, Serving};
