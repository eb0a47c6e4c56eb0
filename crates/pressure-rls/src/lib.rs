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
//! Pieces: [`config`] (the YAML and its matching tree), [`RateLimiter`]
//! (one decision; see [`service`] for the exact rules: reserve then
//! refund across descriptors, failure modes), [`grpc`] (the tonic service
//! and a client), [`Server`] (the standalone `pressure rls`), [`metrics`].

pub mod config;
mod error;
pub mod grpc;
pub mod headers;
mod id;
pub mod metrics;
pub mod proto;
pub mod reload;
mod server;
pub mod service;

pub use config::Plan;
pub use error::{ConfigError, RlsError};
pub use grpc::{RateLimitClient, RateLimitServiceServer};
pub use id::resource_id;
pub use server::{admin_router, serve_grpc, Server, ServerOptions, DEFAULT_LISTEN};
pub use service::{DecisionError, RateLimiter};
