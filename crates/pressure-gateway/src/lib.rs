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
//! ([`manual_queue`]), the OpenAI endpoint's headers ([`openai`]) and the
//! demo upstream ([`demo_upstream`]).

#![warn(unreachable_pub)]

mod access_log;
mod admin;
mod agents;
mod auth;
pub mod backend;
mod charged;
pub mod config;
mod decisions;
pub mod demo_upstream;
mod gateway;
mod layers;
mod llm_layer;
pub mod manual_queue;
mod metrics;
pub mod openai;
mod overrides;
mod path;
mod permits;
mod plan;
mod proxy;
mod rejection;
mod reload;
mod resources;
mod rls;
mod run;
mod server;
mod stamp;
mod tls;
mod watched_body;
mod when_woken;

pub use admin::{router as admin_router, AdminState, Control as AdminControl};
pub use backend::{AnyBackend, Broker};
pub use gateway::{Gateway, GatewayError, GatewayFuture, GatewayService, Serving};
/// The request path's tower layers, outermost first (DESIGN §5: usable by
/// any axum/hyper app too; the inner ones read the route the route layer
/// puts in the request).
pub use layers::{
    body_limit::BodyLimitLayer, pre_auth::PreAuthLayer, release::ReleaseFuture, release::ReleaseLayer,
    release::ReleaseService, route::PlanCell, route::RouteFuture, route::RouteLayer, route::RouteService,
    tenant::TenantLayer, BodyService, Outcome, RejectingService, Step, StepFuture, Stepped,
};
pub use metrics::{GatewayMetrics, Layer};
pub use openai::Llm;
pub use plan::{Endpoint, Plan, Route, Router, TenantPolicy};
pub use proxy::{Proxy, ProxyError, ProxyService, Upstream, Upstreams};
pub use rejection::{Dialect, Rejection};
pub use reload::ReloadOutcome;
pub use run::{run, RunOptions};
pub use server::{serve, serve_with, Drained, HttpService, ServeOptions};
pub use tls::ServerTls;
