//! [`MockProvider`]: the mock's handle, its configuration and its axum
//! router (the provider endpoints and the `/mock/*` admin endpoints on the
//! same listener).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio::time::{Duration, Instant};

use crate::behaviour::{Behaviour, Phase, PRESETS};
use crate::decide::decide;
use crate::endpoint::chat::Chat;
use crate::endpoint::embeddings::Embeddings;
use crate::endpoint::messages::{count_tokens, Messages, COUNT_TOKENS_PATH};
use crate::endpoint::responses::Responses;
use crate::endpoint::Endpoint;
use crate::price::Price;
use crate::record::{Arrival, MockStats};
use crate::responder::{FillerResponder, Responder};
use crate::state::Shared;

/// How long [`MockProvider::shutdown`] waits for connections to close
/// before it abandons them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// How the mock starts: its behaviour, prices, text and randomness.
#[derive(Debug, Clone)]
pub struct MockConfig {
    /// The behaviour at start (validated by [`MockProvider::start`]).
    pub behaviour: Behaviour,
    /// Prices per model, for the bill in [`MockStats`].
    pub prices: BTreeMap<String, Price>,
    /// The price of models missing from `prices`.
    pub default_price: Price,
    /// Produces the answers' text.
    pub responder: Arc<dyn Responder>,
    /// Seeds the random draws (fault shares, latencies) for repeatable
    /// runs; `None` seeds from the OS.
    pub seed: Option<u64>,
}

impl Default for MockConfig {
    /// The `normal` preset, [`FillerResponder`], no per-model prices and a
    /// default price of $1 per 1M input and $4 per 1M output tokens.
    fn default() -> Self {
        Self {
            behaviour: Behaviour::single(Phase::normal("normal")),
            prices: BTreeMap::new(),
            default_price: Price::new(1_000_000, 4_000_000),
            responder: Arc::new(FillerResponder),
            seed: None,
        }
    }
}

/// Why the mock could not start.
#[derive(Debug, thiserror::Error)]
pub enum MockError {
    /// The start behaviour is invalid; the message names the JSON path.
    #[error("invalid mock behaviour: {0}")]
    InvalidBehaviour(String),
    /// The listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// A running mock provider. Dropping it stops the server (without waiting);
/// [`shutdown`](Self::shutdown) stops it and waits, boundedly.
#[derive(Debug)]
pub struct MockProvider {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: Option<JoinHandle<()>>,
}

impl MockProvider {
    /// Binds `addr` (port 0 picks a free port) and serves in a tokio task.
    pub async fn start(addr: SocketAddr, config: MockConfig) -> Result<Self, MockError> {
        config.behaviour.validate().map_err(MockError::InvalidBehaviour)?;
        let shared = Arc::new(Shared::new(
            config.behaviour,
            config.prices,
            config.default_price,
            config.responder,
            config.seed,
        ));
        // Build the tokenizers now rather than inside the first request.
        let _ = tokio::task::spawn_blocking(crate::tokens::preload).await;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| MockError::Bind { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| MockError::Bind { addr, source })?;
        let app = router(shared.clone());
        let stop = shared.shutdown_signal();
        let server = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stop).await {
                tracing::warn!(error = %e, "mock provider server ended with an error");
            }
        });
        Ok(Self {
            addr: local,
            shared,
            server: Some(server),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The API root for an OpenAI client (`{base_url}/chat/completions`,
    /// `{base_url}/responses`) and an Anthropic client (`{base_url}/messages`):
    /// `http://{addr}/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// When the mock started; [`Arrival::at_ms`] counts from here.
    pub fn started(&self) -> Instant {
        self.shared.started
    }

    /// Replaces the behaviour after [`Behaviour::validate`]; restarts the
    /// phase clock and forgets the quota of the previous behaviour.
    pub fn set_behaviour(&self, b: Behaviour) -> Result<(), String> {
        b.validate()?;
        self.shared.set_behaviour(b);
        Ok(())
    }

    /// The behaviour in force.
    pub fn behaviour(&self) -> Behaviour {
        (*self.shared.current().behaviour).clone()
    }

    /// When the current behaviour was set (its phase clock's zero).
    pub fn behaviour_set_at(&self) -> Instant {
        self.shared.current().set_at
    }

    /// The counters now.
    pub fn stats(&self) -> MockStats {
        self.shared.stats()
    }

    /// Every request since start or the last reset, in order.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.shared.arrivals()
    }

    /// Clears counters, arrivals, the quota logs and the prompt cache (the behaviour and its
    /// phase clock stay). Output billed later for a request received before
    /// the reset is dropped.
    pub fn reset(&self) {
        self.shared.reset();
    }

    /// Stops accepting, ends hanging and stalled answers, and waits at most
    /// a few seconds for connections to close.
    pub async fn shutdown(mut self) {
        self.shared.begin_shutdown();
        if let Some(mut server) = self.server.take() {
            if tokio::time::timeout(SHUTDOWN_GRACE, &mut server).await.is_err() {
                server.abort();
            }
        }
    }
}

impl Drop for MockProvider {
    fn drop(&mut self) {
        self.shared.begin_shutdown();
    }
}

/// Parses a [`Behaviour`] from JSON (unknown fields refused) and validates
/// it; the error names the JSON path (`phases[0].errorShare: ...`).
pub fn parse_behaviour(json: &[u8]) -> Result<Behaviour, String> {
    let de = &mut serde_json::Deserializer::from_slice(json);
    let b: Behaviour = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            e.inner().to_string()
        } else {
            format!("{path}: {}", e.inner())
        }
    })?;
    b.validate()?;
    Ok(b)
}

/// The message for an unknown preset name, listing [`PRESETS`].
pub fn unknown_scenario(name: &str) -> String {
    format!("unknown scenario {name:?}; presets: {}", PRESETS.join(", "))
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(Chat::ROUTE.path, post(decide::<Chat>))
        .route(Embeddings::ROUTE.path, post(decide::<Embeddings>))
        .route(Messages::ROUTE.path, post(decide::<Messages>))
        .route(COUNT_TOKENS_PATH, post(count_tokens))
        .route(Responses::ROUTE.path, post(decide::<Responses>))
        .route("/mock/stats", get(stats))
        .route("/mock/arrivals", get(arrivals))
        .route("/mock/behaviour", get(get_behaviour).put(put_behaviour))
        .route("/mock/scenario/{name}", put(put_scenario))
        .route("/mock/reset", post(reset))
        .with_state(shared)
}

async fn stats(State(shared): State<Arc<Shared>>) -> Json<MockStats> {
    Json(shared.stats())
}

async fn arrivals(State(shared): State<Arc<Shared>>) -> Json<Vec<Arrival>> {
    Json(shared.arrivals())
}

async fn get_behaviour(State(shared): State<Arc<Shared>>) -> Json<Behaviour> {
    Json((*shared.current().behaviour).clone())
}

fn admin_error(status: StatusCode, message: String) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

async fn put_behaviour(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    match parse_behaviour(&body) {
        Ok(b) => {
            shared.set_behaviour(b.clone());
            Json(b).into_response()
        }
        Err(message) => admin_error(StatusCode::BAD_REQUEST, message),
    }
}

async fn put_scenario(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> Response {
    match Behaviour::preset(&name) {
        Some(b) => {
            shared.set_behaviour(b.clone());
            Json(b).into_response()
        }
        None => admin_error(StatusCode::NOT_FOUND, unknown_scenario(&name)),
    }
}

async fn reset(State(shared): State<Arc<Shared>>) -> StatusCode {
    shared.reset();
    StatusCode::NO_CONTENT
}
