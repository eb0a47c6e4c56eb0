//! # pressure-gateway
//!
//! A reverse proxy that refuses what downstream cannot take before it
//! crosses the boundary: per-route and per-service limits before auth,
//! per-tenant limits after it, every permit released exactly once when the
//! response body ends or the client goes away.
//!
//! The request path: a config becomes a [`Plan`] (router, tenant policy,
//! LLM client, bounds) in one pass that is also its validation; the layers
//! read the plan of their request, route it once, and return refusals as
//! [`Rejection`] values rendered in one place. [`Gateway`] holds the current
//! plan and swaps it on reload; [`run`] is the process (signals, drain,
//! reload). The decision listener opens the same broker to callers outside
//! the proxy: a decision API and forward auth for nginx, Caddy and Traefik.
//!
//! The public surface: [`config`] (the config's types, loading and
//! checking, its schema and reference), the [`Gateway`] and what it hands
//! out (its [`Plan`], [`Broker`], [`GatewayMetrics`], admin router, serve
//! options), the proxy on its own ([`ProxyService`]), the servers
//! ([`serve`], [`serve_with`]), the manual queue in Redis
//! ([`manual_queue`]) and the OpenAI endpoint's headers ([`openai`]).

#![warn(unreachable_pub)]

mod access_log;
mod admin;
mod agents;
mod answer;
mod auth;
pub mod backend;
mod charged;
/// The gateway config: its types, schema and reference (the data, in
/// `settings/`), and its loading, which is its validation: a config loads
/// when its plan builds (`plan/load.rs`).
pub mod config {
    pub use crate::plan::{check, load, parse, parse_in, read, validate, CheckedConfig};
    pub use crate::settings::*;
}
mod decisions;
mod drain;
mod gateway;
mod http;
mod layers;
pub mod manual_queue;
mod metrics;
pub mod openai;
mod otel;
mod path;
mod permits;
mod plan;
mod proxy_service;
mod rejection;
mod resources;
mod rls;
mod run;
mod settings;

pub use admin::{router as admin_router, AdminState, Control as AdminControl};
pub use auth::TenantPolicy;
pub use backend::{AnyBackend, Broker};
pub use drain::Serving;
pub use gateway::{Gateway, GatewayError, GatewayFuture, GatewayService};
pub use http::proxy::{
    BodyPolicy, ForwardRequest, ProxyClient, ProxyError, ProxyFailure, Upstream, UpstreamFailure, Upstreams,
};
pub use http::server::{serve, serve_with, Drained, HttpService, ServeOptions};
pub use http::tls::ServerTls;
/// The request path's tower layers, outermost first (docs/architecture.md#the-gateway: usable by
/// any axum/hyper app too; the inner ones read the route the route layer
/// puts in the request).
pub use layers::{
    body_limit::BodyLimitLayer, pre_auth::PreAuthLayer, release::ReleaseFuture, release::ReleaseLayer,
    release::ReleaseService, route::RouteFuture, route::RouteLayer, route::RouteService, tenant::TenantLayer,
    BodyService, Outcome, RejectingService, Step, StepFuture, Stepped,
};
pub use metrics::{GatewayMetrics, Layer};
pub use openai::Llm;
pub use plan::reload::ReloadOutcome;
pub use plan::{Endpoint, Plan, PlanCell, Route, Router};
pub use proxy_service::{Proxy, ProxyService};
pub use rejection::{Dialect, Rejection};
pub use run::{run, RunOptions};
