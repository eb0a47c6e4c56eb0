//! [`ProviderClient`]: one OpenAI-compatible provider, called with explicit
//! per-phase timeouts.
//!
//! A provider of [`ProviderKind::Anthropic`] differs only on the wire: the
//! URL (`{baseUrl}/messages`), the key and version headers, the body
//! encoder and the answer / stream decoders are [`super::anthropic`]'s;
//! phases, pool, tags, rate-limit hints and error classification are shared.
//!
//! # Phases of one call
//!
//! | Phase | Bounded by | Error |
//! |---|---|---|
//! | wait for a connection slot | `poolWaitMs` (a semaphore of `maxConnections` permits) | `Timeout { PoolWait }` |
//! | DNS + TCP + TLS | `connectMs` (reqwest's connect timeout) | `Timeout { Connect }`; refused / DNS failure: `Connection` |
//! | hand the body to the connection | `writeMs`, from the moment the connection takes the body | `Timeout { Write }` |
//! | wait for the response head | `firstByteMs`, from the body written | `Timeout { FirstByte }` |
//! | each body chunk (stream chunk) | `readMs` between chunks | `Timeout { Read }` |
//! | everything above | the caller's `deadline` | `Timeout { Total }` |
//!
//! Each phase's timer is capped by the deadline; when the deadline is the
//! nearer of the two, the error says `Total`. "Written" is observed when the
//! HTTP connection has taken the whole request body (for bodies larger than
//! the socket buffers that means all but the last buffer are on the wire).
//!
//! A non-2xx answer's body is read (at most 64 KiB) and classified by
//! [`taxonomy::classify`]; a 2xx body that is not a completion (some
//! providers answer 200 with an `error` object) is classified the same way.

use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use reqwest::header::{
    HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE,
};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::{sleep_until, timeout_at, Instant};

use super::anthropic;
use super::body::{
    bound, error_chain, error_message, read_bounded, BodyStream, ResponseHead, ERROR_BODY_LIMIT,
};
use super::config::{ProviderConfig, ProviderKind, TimeoutsConfig};
use super::error::{CallError, ProviderError};
use super::local::LocalModel;
use super::ratelimit::RateLimitHints;
use super::stream::ChatStream;
use super::tag::CallTag;
use super::types::{ChatRequest, ChatResponse, Message, StreamOptions, Usage};
use crate::taxonomy::{self, ErrorKind, TimeoutPhase};

/// A client for one OpenAI-compatible provider. Cheap to clone (shared pool).
#[derive(Clone)]
pub struct ProviderClient {
    endpoint: Arc<Endpoint>,
}

/// What the clones of one [`ProviderClient`] share: where, how, and the pool.
struct Endpoint {
    name: String,
    kind: ProviderKind,
    url: reqwest::Url,
    /// The key header: `Authorization: Bearer <key>` or `x-api-key: <key>`.
    auth: Option<(HeaderName, HeaderValue)>,
    http: reqwest::Client,
    timeouts: TimeoutsConfig,
    pool: Arc<Semaphore>,
    /// The most connection slots ever in use at once.
    peak: AtomicUsize,
    /// Calls that found no free slot within `poolWaitMs`.
    pool_timeouts: AtomicU64,
    /// The in-process model of a `local` provider (loaded once, shared by
    /// every clone); `None` for a remote provider.
    local: Option<Arc<LocalModel>>,
}

/// How busy a provider's connection pool is: whether calls queue for a
/// connection (the pool is exhausted) or hung calls keep slots they should
/// have given back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Slots in use now.
    pub in_use: usize,
    /// The most slots in use at once since start.
    pub peak: usize,
    /// `maxConnections`.
    pub max: usize,
    /// Calls that waited `poolWaitMs` for a slot in vain.
    pub wait_timeouts: u64,
}

impl fmt::Debug for ProviderClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderClient")
            .field("name", &self.endpoint.name)
            .field("kind", &self.endpoint.kind)
            .field("url", &self.endpoint.url.as_str())
            .field("has_api_key", &self.endpoint.auth.is_some())
            .field("timeouts", &self.endpoint.timeouts)
            .finish()
    }
}

/// A successful non-streamed call.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The parsed answer.
    pub response: ChatResponse,
    /// The answer's `usage` (a copy of `response.usage`).
    pub usage: Option<Usage>,
    /// From the start of the call (including pool wait) to the response head.
    pub ttft: Duration,
    /// From the start of the call to the last body byte.
    pub total: Duration,
    /// The rate-limit hints of the response headers.
    pub ratelimit: RateLimitHints,
}

/// The request as sent: the caller's fields with `stream` and `stream_options` set by the client.
#[derive(Serialize)]
struct Wire<'a> {
    model: &'a str,
    messages: &'a [Message],
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(flatten)]
    extra: &'a Map<String, Value>,
}

impl<'a> Wire<'a> {
    fn new(req: &'a ChatRequest, streaming: bool) -> Self {
        let stream_options = streaming.then(|| {
            let mut o = req.stream_options.clone().unwrap_or_default();
            o.include_usage = Some(true);
            o
        });
        Self {
            model: &req.model,
            messages: &req.messages,
            max_tokens: req.max_tokens,
            stream: streaming.then_some(true),
            stream_options,
            extra: &req.extra,
        }
    }
}

impl ProviderClient {
    /// Builds the client: validates the URL, reads the API key from its
    /// environment variable, sets the connect timeout and the pool size. A
    /// `local` provider loads its model from `modelDir` instead (once:
    /// every clone of the client shares it).
    pub fn new(cfg: ProviderConfig) -> Result<Self, ProviderError> {
        if cfg.settings.kind == ProviderKind::Local {
            return Self::new_local(cfg);
        }
        let name = cfg.name.clone();
        let bad_url = |reason: String| ProviderError::InvalidBaseUrl {
            provider: name.clone(),
            url: cfg.settings.base_url.clone(),
            reason,
        };
        let base = cfg.settings.base_url.trim_end_matches('/');
        let endpoint = match cfg.settings.kind {
            ProviderKind::OpenAi | ProviderKind::Local => "chat/completions",
            ProviderKind::Anthropic => "messages",
        };
        let url = reqwest::Url::parse(&format!("{base}/{endpoint}")).map_err(|e| bad_url(e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad_url("scheme must be http or https".into()));
        }
        if cfg.settings.timeouts.max_connections == 0 {
            return Err(ProviderError::NoConnections { provider: name });
        }
        let auth = match &cfg.settings.api_key_env {
            None => None,
            Some(var) => {
                let missing = || ProviderError::MissingApiKey {
                    provider: name.clone(),
                    var: var.clone(),
                };
                let key = std::env::var(var).map_err(|_| missing())?;
                let (name, text) = match cfg.settings.kind {
                    ProviderKind::OpenAi | ProviderKind::Local => {
                        (AUTHORIZATION, format!("Bearer {}", key.trim()))
                    }
                    ProviderKind::Anthropic => (
                        HeaderName::from_static(anthropic::API_KEY_HEADER),
                        key.trim().to_owned(),
                    ),
                };
                let mut value = HeaderValue::from_str(&text).map_err(|_| missing())?;
                value.set_sensitive(true);
                Some((name, value))
            }
        };
        let t = cfg.settings.timeouts;
        let http = http_client(&name, &t)?;
        Ok(Self {
            endpoint: Arc::new(Endpoint {
                name,
                kind: cfg.settings.kind,
                url,
                auth,
                http,
                timeouts: t,
                pool: Arc::new(Semaphore::new(t.max_connections as usize)),
                peak: AtomicUsize::new(0),
                pool_timeouts: AtomicU64::new(0),
                local: None,
            }),
        })
    }

    /// A `local` provider: its model loaded from `modelDir`, its URL
    /// `local:<modelDir>` (for logs), no key, no HTTP calls.
    fn new_local(cfg: ProviderConfig) -> Result<Self, ProviderError> {
        let name = cfg.name.clone();
        let dir = cfg.settings.model_dir.clone().unwrap_or_default();
        let url =
            reqwest::Url::parse(&format!("local:{dir}")).map_err(|e| ProviderError::InvalidBaseUrl {
                provider: name.clone(),
                url: format!("local:{dir}"),
                reason: e.to_string(),
            })?;
        let t = cfg.settings.timeouts;
        if t.max_connections == 0 {
            return Err(ProviderError::NoConnections { provider: name });
        }
        let model = LocalModel::load(&dir).map_err(|e| ProviderError::LocalModel {
            provider: name.clone(),
            error: e,
        })?;
        Ok(Self {
            endpoint: Arc::new(Endpoint {
                http: http_client(&name, &t)?,
                name,
                kind: ProviderKind::Local,
                url,
                auth: None,
                timeouts: t,
                pool: Arc::new(Semaphore::new(t.max_connections as usize)),
                peak: AtomicUsize::new(0),
                pool_timeouts: AtomicU64::new(0),
                local: Some(Arc::new(model)),
            }),
        })
    }

    /// The in-process model of a `local` provider.
    pub fn local_model(&self) -> Option<&Arc<LocalModel>> {
        self.endpoint.local.as_ref()
    }

    /// The provider's configured name.
    pub fn name(&self) -> &str {
        &self.endpoint.name
    }
}

/// The HTTP client of a provider: its connect timeout and idle pool.
fn http_client(name: &str, t: &TimeoutsConfig) -> Result<reqwest::Client, ProviderError> {
    reqwest::Client::builder()
        .connect_timeout(t.connect())
        .pool_max_idle_per_host(t.max_connections as usize)
        .pool_idle_timeout(Duration::from_secs(90))
        .tcp_nodelay(true)
        .build()
        .map_err(|e| ProviderError::Client {
            provider: name.to_owned(),
            reason: error_chain(&e),
        })
}

impl ProviderClient {
    /// The endpoint URL (`{baseUrl}/chat/completions`, or `{baseUrl}/messages`
    /// for an Anthropic provider; `local:<modelDir>` for a local one).
    pub fn url(&self) -> &str {
        self.endpoint.url.as_str()
    }

    /// The wire format the provider speaks.
    pub fn kind(&self) -> ProviderKind {
        self.endpoint.kind
    }

    /// The request body in the provider's wire format; `Err` is a
    /// `BadRequest` naming the field at fault when there is one (nothing
    /// is sent).
    fn encode(&self, req: &ChatRequest, streaming: bool) -> Result<Vec<u8>, Box<CallError>> {
        match self.endpoint.kind {
            ProviderKind::OpenAi => serde_json::to_vec(&Wire::new(req, streaming))
                .map_err(|e| Box::new(CallError::refused(None, format!("serialising the request: {e}")))),
            ProviderKind::Anthropic => anthropic::request::encode(req, streaming)
                .map_err(|e| Box::new(CallError::refused(e.param, e.to_string()))),
            ProviderKind::Local => Err(Box::new(CallError::refused(
                None,
                format!(
                    "provider {} runs a local embedding model: it serves embeddings only",
                    self.endpoint.name
                ),
            ))),
        }
    }

    /// A non-streamed answer body as a chat completion.
    fn decode(&self, body: &[u8]) -> Result<ChatResponse, String> {
        match self.endpoint.kind {
            ProviderKind::OpenAi => serde_json::from_slice::<ChatResponse>(body).map_err(|e| e.to_string()),
            ProviderKind::Anthropic => anthropic::to_chat_response(body),
            ProviderKind::Local => Err("a local provider sends no chat completions".to_owned()),
        }
    }

    /// The configured timeouts.
    pub fn timeouts(&self) -> &TimeoutsConfig {
        &self.endpoint.timeouts
    }

    /// Connection slots free right now (of `maxConnections`).
    pub fn available_connections(&self) -> usize {
        self.endpoint.pool.available_permits()
    }

    /// The connection pool's use now and at its peak.
    pub fn pool_stats(&self) -> PoolStats {
        let max = self.endpoint.timeouts.max_connections as usize;
        PoolStats {
            in_use: max.saturating_sub(self.endpoint.pool.available_permits()),
            peak: self.endpoint.peak.load(Ordering::Relaxed),
            max,
            wait_timeouts: self.endpoint.pool_timeouts.load(Ordering::Relaxed),
        }
    }

    /// A non-streamed chat completion (`stream` and `stream_options` are
    /// removed from the request), bounded per phase and by `deadline`.
    pub async fn complete(&self, req: &ChatRequest, deadline: Instant) -> Result<Completion, CallError> {
        self.complete_tagged(req, deadline, &CallTag::default()).await
    }

    /// [`complete`](Self::complete), sending `tag` as `x-pressure-*` headers.
    pub async fn complete_tagged(
        &self,
        req: &ChatRequest,
        deadline: Instant,
        tag: &CallTag,
    ) -> Result<Completion, CallError> {
        let body = self.encode(req, false).map_err(|e| *e)?;
        let done = self
            .send(body, false, deadline, tag)
            .await?
            .read_all(self.endpoint.timeouts.read(), deadline)
            .await?;
        match self.decode(&done.bytes) {
            Ok(response) => Ok(Completion {
                usage: response.usage.clone(),
                response,
                ttft: done.first_byte,
                total: done.total,
                ratelimit: done.ratelimit,
            }),
            Err(e) => Err(done.undecodable("malformed completion", e)),
        }
    }

    /// A streamed chat completion (`stream: true`, `stream_options.include_usage:
    /// true`). Returns once the response head arrived; the [`ChatStream`] then
    /// enforces `readMs` between chunks and the `deadline`, and holds the
    /// connection slot until it ends or is dropped.
    pub async fn stream(&self, req: &ChatRequest, deadline: Instant) -> Result<ChatStream, CallError> {
        self.stream_tagged(req, deadline, &CallTag::default()).await
    }

    /// [`stream`](Self::stream), sending `tag` as `x-pressure-*` headers.
    pub async fn stream_tagged(
        &self,
        req: &ChatRequest,
        deadline: Instant,
        tag: &CallTag,
    ) -> Result<ChatStream, CallError> {
        let body = self.encode(req, true).map_err(|e| *e)?;
        let mut sent = self.send(body, true, deadline, tag).await?;
        if self.endpoint.kind == ProviderKind::Anthropic {
            sent.body = anthropic::stream::translate_body(sent.body);
        }
        Ok(ChatStream::new(sent, self.endpoint.timeouts.read(), deadline))
    }

    /// Pool wait, connect, write, first byte; a non-2xx answer becomes a classified error.
    async fn send(
        &self,
        body: Vec<u8>,
        streaming: bool,
        deadline: Instant,
        tag: &CallTag,
    ) -> Result<ResponseHead, CallError> {
        self.send_to(self.endpoint.url.clone(), body, streaming, deadline, tag)
            .await
    }

    /// A connection slot, within `poolWaitMs` and the deadline.
    pub(super) async fn slot(
        &self,
        started: Instant,
        deadline: Instant,
    ) -> Result<OwnedSemaphorePermit, CallError> {
        let t = &self.endpoint.timeouts;
        let (at, phase) = bound(TimeoutPhase::PoolWait, t.pool_wait(), deadline);
        match timeout_at(at, self.endpoint.pool.clone().acquire_owned()).await {
            Ok(Ok(permit)) => {
                let max = t.max_connections as usize;
                let in_use = max.saturating_sub(self.endpoint.pool.available_permits());
                self.endpoint.peak.fetch_max(in_use, Ordering::Relaxed);
                Ok(permit)
            }
            Ok(Err(_)) => Err(CallError::transport(ErrorKind::Other, "connection pool closed")),
            Err(_) => {
                self.endpoint.pool_timeouts.fetch_add(1, Ordering::Relaxed);
                Err(CallError::timeout(
                    phase,
                    format!(
                        "no free connection to {} within {} ms",
                        self.endpoint.name,
                        elapsed_ms(started)
                    ),
                ))
            }
        }
    }

    /// The POST of `body` to `url` with the key, version and tag headers,
    /// and the signals of its body: the connection started writing it, and
    /// took all of it.
    fn request(
        &self,
        url: reqwest::Url,
        body: Vec<u8>,
        streaming: bool,
        tag: &CallTag,
    ) -> (
        reqwest::RequestBuilder,
        oneshot::Receiver<()>,
        oneshot::Receiver<()>,
    ) {
        let (started_tx, started_rx) = oneshot::channel();
        let (written_tx, written_rx) = oneshot::channel();
        let len = body.len();
        let tracked = TrackedBody {
            data: Some(Bytes::from(body)),
            started: Some(started_tx),
            written: Some(written_tx),
        };
        let accept = if streaming {
            "text/event-stream"
        } else {
            "application/json"
        };
        let mut builder = self
            .endpoint
            .http
            .post(url)
            .header(CONTENT_TYPE, "application/json")
            .header(CONTENT_LENGTH, len)
            .header(ACCEPT, accept)
            .body(reqwest::Body::wrap_stream(tracked));
        if let Some((name, value)) = &self.endpoint.auth {
            builder = builder.header(name.clone(), value.clone());
        }
        if self.endpoint.kind == ProviderKind::Anthropic {
            builder = builder.header(anthropic::VERSION_HEADER, anthropic::API_VERSION);
        }
        for (name, value) in tag.headers() {
            builder = builder.header(name, value);
        }
        (builder, started_rx, written_rx)
    }

    /// [`send`](Self::send) to another endpoint of the provider (e.g.
    /// `{baseUrl}/embeddings`), with the same pool, timeouts and key.
    pub(crate) async fn send_to(
        &self,
        url: reqwest::Url,
        body: Vec<u8>,
        streaming: bool,
        deadline: Instant,
        tag: &CallTag,
    ) -> Result<ResponseHead, CallError> {
        let started = Instant::now();
        let t = &self.endpoint.timeouts;

        let permit = self.slot(started, deadline).await?;

        let len = body.len();
        let (builder, started_rx, written_rx) = self.request(url, body, streaming, tag);
        let fut = builder.send();
        tokio::pin!(fut);

        let total_timeout = |what: &str| {
            CallError::timeout(
                TimeoutPhase::Total,
                format!("deadline passed {what} after {} ms", elapsed_ms(started)),
            )
        };
        // Connect: bounded by reqwest's connect timeout, and by the deadline here.
        let early = tokio::select! {
            biased;
            r = &mut fut => Some(r),
            _ = started_rx => None,
            _ = sleep_until(deadline) => return Err(total_timeout("while connecting")),
        };
        let result = match early {
            Some(r) => r,
            None => {
                let (at, phase) = bound(TimeoutPhase::Write, t.write(), deadline);
                let written = tokio::select! {
                    biased;
                    r = &mut fut => Some(r),
                    _ = written_rx => None,
                    _ = sleep_until(at) => {
                        return Err(CallError::timeout(
                            phase,
                            format!("request body ({len} bytes) not written after {} ms", elapsed_ms(started)),
                        ))
                    }
                };
                match written {
                    Some(r) => r,
                    None => {
                        let (at, phase) = bound(TimeoutPhase::FirstByte, t.first_byte(), deadline);
                        match timeout_at(at, &mut fut).await {
                            Ok(r) => r,
                            Err(_) => {
                                return Err(CallError::timeout(
                                    phase,
                                    format!("no response head after {} ms", elapsed_ms(started)),
                                ))
                            }
                        }
                    }
                }
            }
        };
        let response = result.map_err(|e| send_error(&e, t))?;
        let first_byte = started.elapsed();
        let status = response.status().as_u16();
        let headers = header_pairs(response.headers());
        let ratelimit = RateLimitHints::from_pairs(&headers);
        let mut body: BodyStream = Box::pin(response.bytes_stream());

        if !(200..300).contains(&status) {
            let raw = read_bounded(&mut body, ERROR_BODY_LIMIT, t.read(), deadline).await;
            let text = String::from_utf8_lossy(&raw);
            let kind = taxonomy::classify(status, &headers, &text);
            tracing::debug!(provider = %self.endpoint.name, status, kind = kind.label(), "provider error response");
            return Err(CallError {
                kind,
                status: Some(status),
                message: error_message(&text, status),
                ratelimit,
                param: None,
            });
        }
        Ok(ResponseHead {
            status,
            headers,
            ratelimit,
            body,
            permit,
            started,
            first_byte,
        })
    }
}

/// Maps a failure of sending the request (before any response head).
fn send_error(e: &reqwest::Error, t: &TimeoutsConfig) -> CallError {
    let chain = error_chain(e);
    if e.is_timeout() {
        // The only timeout configured inside reqwest is the connect timeout.
        CallError::timeout(
            TimeoutPhase::Connect,
            format!("connect timed out after {} ms: {chain}", t.connect_ms),
        )
    } else if e.is_builder() {
        CallError::transport(ErrorKind::BadRequest, chain)
    } else {
        // Refused, reset, DNS failure, TLS failure, closed before the head.
        CallError::transport(ErrorKind::Connection, chain)
    }
}

/// Header (name, value) pairs; values that are not UTF-8 are skipped.
fn header_pairs(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str().to_owned(), v.to_owned())))
        .collect()
}

fn elapsed_ms(since: Instant) -> u128 {
    since.elapsed().as_millis()
}

/// The request body, signalling when the connection first polls it (it is
/// ready to write) and when it has taken all of it (or dropped it).
struct TrackedBody {
    data: Option<Bytes>,
    started: Option<oneshot::Sender<()>>,
    written: Option<oneshot::Sender<()>>,
}

impl Stream for TrackedBody {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(tx) = self.started.take() {
            let _ = tx.send(());
        }
        if let Some(data) = self.data.take() {
            return Poll::Ready(Some(Ok(data)));
        }
        if let Some(tx) = self.written.take() {
            let _ = tx.send(());
        }
        Poll::Ready(None)
    }
}

impl Drop for TrackedBody {
    fn drop(&mut self) {
        // A length-delimited body may be dropped once its bytes are taken,
        // without being polled to its end.
        if self.data.is_none() {
            if let Some(tx) = self.written.take() {
                let _ = tx.send(());
            }
        }
    }
}
