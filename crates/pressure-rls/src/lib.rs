//! # pressure-rls
//!
//! Envoy's rate limit service
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`) on
//! pressure's broker. Istio, Contour, Emissary and Gloo delegate global
//! limits to such a service; a user of envoyproxy/ratelimit points Envoy
//! here with the YAML files they already have and gets:
//!
//! * **exact sliding windows**: no interval of one unit ever admits more
//!   than `requests_per_unit` (a fixed window admits up to 2N across an
//!   edge);
//! * **denials that consume nothing**: a refused request counts on no
//!   descriptor (upstream increments every descriptor of a refused call);
//! * the same memory or Redis / Redis Cluster backend, failure modes and
//!   lazily bounded counters as the rest of pressure.
//!
//! Pieces: [`Plan`] (the YAML files and their matching tree, `config/`),
//! [`RateLimiter`] (one decision, `service.rs`, which states the exact
//! rules: reserve then refund across descriptors, failure modes),
//! [`RateLimitServiceServer`] and [`RateLimitClient`] (the tonic service and
//! a client), [`Server`] (the standalone `pressure rls`), [`Metrics`]
//! (upstream's counters in Prometheus text), [`proto`] (the wire messages)
//! and [`reload`] (files re-read on SIGHUP or a change).

#![warn(unreachable_pub)]

mod config;
mod counters;
mod error;
mod grpc;
mod headers;
mod id;
mod metrics;
pub mod proto;
pub mod reload;
mod server;
mod service;

pub use config::Plan;
pub use error::{ConfigError, RlsError};
pub use grpc::{RateLimitClient, RateLimitServiceServer};
pub use id::{resource_id, MAX_ID_BYTES, MAX_LABEL_BYTES};
pub use metrics::Metrics;
pub use server::{admin_router, serve_grpc, serve_grpc_traced, Server, ServerOptions, DEFAULT_LISTEN};
pub use service::{DecisionError, RateLimiter};
