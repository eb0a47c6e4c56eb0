//! [`ProviderClient`]: one provider, called with explicit per-phase
//! timeouts, answering in chat completions whatever its wire.
//!
//! A provider is either remote or local ([`Backend`]). A remote one speaks
//! one [`Wire`] (chat completions, Anthropic's Messages or OpenAI's
//! Responses), which says what differs between them: the endpoint path,
//! the key and fixed headers, the body encoder and the answer and stream
//! decoders. The phases, the pool, the tags, the rate-limit hints and the
//! error classification are this file's, shared by every wire; how the
//! connections are opened (TLS, proxies, the connect timeout) is
//! [`super::transport`]'s, and what a remote provider builds once
//! ([`Remote`]: URIs, headers, the pooled client) is [`super::remote`]'s. A
//! local provider makes no HTTP calls: it answers embeddings in process
//! ([`LocalModel`]).
//!
//! # Phases of one call
//!
//! | Phase | Bounded by | Error |
//! |---|---|---|
//! | wait for a connection slot | `poolWaitMs` (a semaphore of `maxConnections` permits) | `Timeout { PoolWait }` |
//! | DNS + TCP + TLS | `connectMs` (a timer around the whole connect) | `Timeout { Connect }`; refused / DNS failure: `Connection` |
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
//!
//! The HTTP client is hyper 1 through hyper-util's pooling client, with
//! rustls; redirects are not followed (a `3xx` is an error answer like any
//! non-2xx).

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use std::future::Future;

use http::{HeaderMap, Uri};
use http_body_util::BodyExt;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{sleep_until, timeout_at, Instant};

use super::anthropic::Anthropic;
use super::body::{bound, error_message, read_bounded, BodyStream, ResponseHead, ERROR_BODY_LIMIT};
use super::config::{ProviderConfig, ProviderKind, TimeoutsConfig};
use super::error::{CallError, ProviderError};
use super::local::LocalModel;
use super::native::native_body;
use super::openai::OpenAi;
use super::ratelimit::{header_pairs, RateLimitHints};
use super::remote::Remote;
use super::responses::Responses;
use super::stream::ChatStream;
use super::tag::CallTag;
use super::transport::{send_error, BodySignals};
use super::types::{ChatRequest, ChatResponse, NativeRequest, NativeWire, Usage};
use super::wire::Wire;
use crate::taxonomy::{self, ErrorKind, TimeoutPhase};

/// A client for one provider. Cheap to clone (shared pool).
#[derive(Clone)]
pub struct ProviderClient {
    endpoint: Arc<Endpoint>,
}

/// What the clones of one [`ProviderClient`] share: where, how, and the pool.
struct Endpoint {
    name: String,
    kind: ProviderKind,
    /// The chat endpoint as configured (`local:<modelDir>` for a local provider).
    url: String,
    /// What answers the calls: a remote provider over HTTP, or a model in process.
    backend: Backend,
    timeouts: TimeoutsConfig,
    pool: Arc<Semaphore>,
    /// The most connection slots ever in use at once.
    peak: AtomicUsize,
    /// Calls that found no free slot within `poolWaitMs`.
    pool_timeouts: AtomicU64,
}

/// What answers a provider's calls: one or the other, never both.
enum Backend {
    /// A provider reached over HTTP, speaking its [`Wire`] (boxed: it is
    /// large, and built once per provider).
    Remote(Box<Remote>),
    /// The in-process model of a `local` provider (loaded once, shared by
    /// every clone of the client); it serves embeddings only.
    Local(Arc<LocalModel>),
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
            .field("has_api_key", &self.has_api_key())
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

impl ProviderClient {
    /// Builds the client: validates the URL, reads the API key from its
    /// environment variable, sets the connect timeout and the pool size. A
    /// `local` provider loads its model from `modelDir` instead (once:
    /// every clone of the client shares it).
    pub fn new(cfg: ProviderConfig) -> Result<Self, ProviderError> {
        let wire: &'static dyn Wire = match cfg.settings.kind {
            ProviderKind::OpenAi => &OpenAi,
            ProviderKind::Anthropic => &Anthropic,
            ProviderKind::OpenAiResponses => &Responses,
            ProviderKind::Local => return Self::new_local(cfg),
        };
        let (remote, url) = Remote::new(&cfg, wire)?;
        Ok(Self::with_backend(cfg, url, Backend::Remote(Box::new(remote))))
    }

    /// A `local` provider: its model loaded from `modelDir`, its URL
    /// `local:<modelDir>` (for logs), no key, no HTTP calls.
    fn new_local(cfg: ProviderConfig) -> Result<Self, ProviderError> {
        let dir = cfg.settings.model_dir.clone().unwrap_or_default();
        let url = format!("local:{dir}");
        if cfg.settings.timeouts.max_connections == 0 {
            return Err(ProviderError::NoConnections { provider: cfg.name });
        }
        let model = LocalModel::load(&dir).map_err(|e| ProviderError::LocalModel {
            provider: cfg.name.clone(),
            error: e,
        })?;
        Ok(Self::with_backend(cfg, url, Backend::Local(Arc::new(model))))
    }

    /// The client of `cfg` answered by `backend`, with its pool of
    /// `maxConnections` slots.
    fn with_backend(cfg: ProviderConfig, url: String, backend: Backend) -> Self {
        let t = cfg.settings.timeouts;
        Self {
            endpoint: Arc::new(Endpoint {
                name: cfg.name,
                kind: cfg.settings.kind,
                url,
                backend,
                timeouts: t,
                pool: Arc::new(Semaphore::new(t.slots())),
                peak: AtomicUsize::new(0),
                pool_timeouts: AtomicU64::new(0),
            }),
        }
    }

    /// The in-process model of a `local` provider.
    pub fn local_model(&self) -> Option<&Arc<LocalModel>> {
        match &self.endpoint.backend {
            Backend::Local(model) => Some(model),
            Backend::Remote(_) => None,
        }
    }

    /// The provider's configured name.
    pub fn name(&self) -> &str {
        &self.endpoint.name
    }

    /// The endpoint URL (`{baseUrl}/chat/completions`, or `{baseUrl}/messages`
    /// for an Anthropic provider; `local:<modelDir>` for a local one).
    pub fn url(&self) -> &str {
        &self.endpoint.url
    }

    /// Whether the calls carry a key (`apiKeyEnv` set).
    fn has_api_key(&self) -> bool {
        matches!(&self.endpoint.backend, Backend::Remote(r) if r.has_key)
    }

    /// The HTTP side of the provider; a local one has none.
    fn remote(&self) -> Result<&Remote, Box<CallError>> {
        match &self.endpoint.backend {
            Backend::Remote(remote) => Ok(remote),
            Backend::Local(_) => Err(Box::new(CallError::transport(
                ErrorKind::BadRequest,
                format!("provider {} makes no HTTP calls", self.endpoint.name),
            ))),
        }
    }

    /// `{baseUrl}/embeddings`, or why the provider has none.
    pub(super) fn embeddings_uri(&self) -> Result<&Uri, String> {
        match &self.endpoint.backend {
            Backend::Remote(r) => r.embeddings.as_ref().map_err(Clone::clone),
            Backend::Local(_) => Err(format!(
                "the provider at {} has no OpenAI embeddings endpoint",
                self.endpoint.url
            )),
        }
    }

    /// The wire format the provider speaks.
    pub fn kind(&self) -> ProviderKind {
        self.endpoint.kind
    }

    /// The request body in the provider's wire format; `Err` is a
    /// `BadRequest` naming the field at fault when there is one (nothing
    /// is sent).
    fn encode(&self, req: &ChatRequest, streaming: bool) -> Result<Vec<u8>, Box<CallError>> {
        if let Some(native) = self.native_of(req) {
            return native_body(native, &req.model, streaming)
                .map_err(|e| Box::new(CallError::refused(None, format!("serialising the request: {e}"))));
        }
        match &self.endpoint.backend {
            Backend::Remote(r) => r.wire.encode(req, streaming),
            Backend::Local(_) => Err(Box::new(CallError::refused(
                None,
                format!(
                    "provider {} runs a local embedding model: it serves embeddings only",
                    self.endpoint.name
                ),
            ))),
        }
    }

    /// A non-streamed answer body as a chat completion; for a request sent
    /// natively, with the provider's own answer kept beside it.
    fn decode(&self, body: &[u8], native: Option<NativeWire>) -> Result<ChatResponse, String> {
        let mut response = match &self.endpoint.backend {
            Backend::Remote(r) => r.wire.decode(body)?,
            Backend::Local(_) => return Err("a local provider sends no chat completions".to_owned()),
        };
        if let Some(wire) = native {
            let raw: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
            response.native = Some((wire, Arc::new(raw)));
        }
        Ok(response)
    }

    /// The agent's own request, when this provider speaks its wire: it is
    /// sent as it came ([`native_body`]), and answered as it comes.
    fn native_of<'r>(&self, req: &'r ChatRequest) -> Option<&'r NativeRequest> {
        let native = req.native.as_deref()?;
        (self.native_wire() == Some(native.wire)).then_some(native)
    }

    /// The agent dialect this provider speaks natively, if any.
    pub fn native_wire(&self) -> Option<NativeWire> {
        match &self.endpoint.backend {
            Backend::Remote(r) => r.wire.native(),
            Backend::Local(_) => None,
        }
    }
    /// The input tokens of an agent's Messages request as an Anthropic
    /// provider counts them (`POST {baseUrl}/messages/count_tokens`, the
    /// request's body with `model` (the provider's) set and the fields a
    /// count does not take left out; its `anthropic-version`/`-beta`
    /// passed); `None` when this provider cannot count it (another wire, no
    /// native request).
    pub async fn count_tokens(
        &self,
        req: &ChatRequest,
        model: &str,
        deadline: Instant,
    ) -> Option<Result<u64, CallError>> {
        let native = self.native_of(req)?;
        let uri = self.remote().ok()?.count_tokens.as_ref()?;
        let mut body = native.body.clone();
        for field in [
            "max_tokens",
            "stream",
            "temperature",
            "top_p",
            "top_k",
            "stop_sequences",
            "metadata",
        ] {
            body.remove(field);
        }
        body.insert("model".into(), Value::String(model.to_owned()));
        let body = match serde_json::to_vec(&body) {
            Ok(b) => b,
            Err(e) => {
                return Some(Err(CallError::refused(
                    None,
                    format!("serialising the request: {e}"),
                )))
            }
        };
        let counted = async {
            let done = self
                .send_with(uri, body, false, deadline, &CallTag::default(), &native.headers)
                .await?
                .read_all(self.endpoint.timeouts.read(), deadline)
                .await?;
            serde_json::from_slice::<Value>(&done.bytes)
                .ok()
                .and_then(|v| v.get("input_tokens").and_then(Value::as_u64))
                .ok_or_else(|| done.undecodable("malformed count", "no input_tokens".to_owned()))
        };
        Some(counted.await)
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
        let max = self.endpoint.timeouts.slots();
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
        let native = self.native_of(req);
        let done = self
            .send(body, false, deadline, tag, native)
            .await?
            .read_all(self.endpoint.timeouts.read(), deadline)
            .await?;
        match self.decode(&done.bytes, native.map(|n| n.wire)) {
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
        let native = self.native_of(req);
        let mut sent = self.send(body, true, deadline, tag, native).await?;
        if let Backend::Remote(r) = &self.endpoint.backend {
            sent.body = r.wire.translate_stream(sent.body, native.is_some());
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
        native: Option<&NativeRequest>,
    ) -> Result<ResponseHead, CallError> {
        let chat = &self.remote().map_err(|e| *e)?.chat;
        let passed = native.map_or(&[][..], |n| n.headers.as_slice());
        self.send_with(chat, body, streaming, deadline, tag, passed).await
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
                let max = t.slots();
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

    /// [`send`](Self::send) to another endpoint of the provider (e.g.
    /// `{baseUrl}/embeddings`), with the same pool, timeouts and key.
    pub(crate) async fn send_to(
        &self,
        uri: &Uri,
        body: Vec<u8>,
        streaming: bool,
        deadline: Instant,
        tag: &CallTag,
    ) -> Result<ResponseHead, CallError> {
        self.send_with(uri, body, streaming, deadline, tag, &[]).await
    }

    /// [`send_to`](Self::send_to) with the headers an agent's native
    /// request passes on ([`passed_header`]).
    async fn send_with(
        &self,
        uri: &Uri,
        body: Vec<u8>,
        streaming: bool,
        deadline: Instant,
        tag: &CallTag,
        passed: &[(String, String)],
    ) -> Result<ResponseHead, CallError> {
        let started = Instant::now();
        let t = &self.endpoint.timeouts;

        let remote = self.remote().map_err(|e| *e)?;
        let permit = self.slot(started, deadline).await?;

        let len = body.len();
        let (request, signals) = remote.request(uri, body, streaming, tag, passed);
        let phases = Phases {
            timeouts: t,
            started,
            deadline,
        };
        let response = phases.head(remote.http.request(request), signals, len).await?;
        let first_byte = started.elapsed();
        let status = response.status().as_u16();
        let (parts, incoming) = response.into_parts();
        let headers = parts.headers;
        let ratelimit = RateLimitHints::from_header_map(&headers);
        // The data frames as a stream (trailers skipped).
        let body: BodyStream = Box::pin(incoming.into_data_stream());

        if !(200..300).contains(&status) {
            return Err(self
                .error_answer(status, &headers, ratelimit, body, deadline)
                .await);
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

    /// The classified error of a non-2xx answer, from its status, headers
    /// and body (read within [`ERROR_BODY_LIMIT`], the read timeout and the
    /// deadline).
    async fn error_answer(
        &self,
        status: u16,
        headers: &HeaderMap,
        ratelimit: RateLimitHints,
        mut body: BodyStream,
        deadline: Instant,
    ) -> CallError {
        let raw = read_bounded(
            &mut body,
            ERROR_BODY_LIMIT,
            self.endpoint.timeouts.read(),
            deadline,
        )
        .await;
        let text = String::from_utf8_lossy(&raw);
        let kind = taxonomy::classify(status, &header_pairs(headers), &text);
        tracing::debug!(provider = %self.endpoint.name, status, kind = kind.label(), "provider error response");
        CallError {
            kind,
            status: Some(status),
            message: error_message(&text, status),
            ratelimit,
            param: None,
        }
    }
}

/// The timers of one call's phases up to the response head: each phase's
/// own timeout, capped by the deadline.
struct Phases<'a> {
    timeouts: &'a TimeoutsConfig,
    started: Instant,
    deadline: Instant,
}

impl Phases<'_> {
    /// The response of `sending` (a request whose body of `len` bytes
    /// raises `signals`), its phases bounded one after the other: the
    /// connect (by the connector's timer, and by the deadline here), the
    /// write (`writeMs` from the connection starting to take the body), the
    /// first byte (`firstByteMs` from the body taken).
    async fn head<R>(
        &self,
        sending: impl Future<Output = Result<R, hyper_util::client::legacy::Error>>,
        signals: BodySignals,
        len: usize,
    ) -> Result<R, CallError> {
        let (started, deadline, t) = (self.started, self.deadline, self.timeouts);
        tokio::pin!(sending);
        let total_timeout = |what: &str| {
            CallError::timeout(
                TimeoutPhase::Total,
                format!("deadline passed {what} after {} ms", elapsed_ms(started)),
            )
        };
        // Connect: bounded by the connector's timer, and by the deadline here.
        let early = tokio::select! {
            biased;
            r = &mut sending => Some(r),
            _ = signals.started => None,
            _ = sleep_until(deadline) => return Err(total_timeout("while connecting")),
        };
        let result = match early {
            Some(r) => r,
            None => {
                let (at, phase) = bound(TimeoutPhase::Write, t.write(), deadline);
                let written = tokio::select! {
                    biased;
                    r = &mut sending => Some(r),
                    _ = signals.written => None,
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
                        match timeout_at(at, &mut sending).await {
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
        result.map_err(|e| send_error(&e, t))
    }
}

/// Milliseconds since `since`, for messages.
fn elapsed_ms(since: Instant) -> u128 {
    since.elapsed().as_millis()
}
