//! # pressure-gateway
//!
//! A reverse proxy that refuses what downstream cannot take before it
//! crosses the boundary: per-route and per-service limits before auth,
//! per-tenant limits after it, every permit released exactly once when the
//! response body ends or the client goes away.

pub mod backend;
pub mod config;
