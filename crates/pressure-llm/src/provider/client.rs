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
//! # The HTTP client
//!
//! hyper 1 through hyper-util's pooling client (idle connections kept 90 s,
//! at most `maxConnections` of them), TCP with `TCP_NODELAY` and keepalive,
//! TLS by rustls (ring) trusting the webpki roots, ALPN `h2` and `http/1.1`
//! for `https://` providers (HTTP/2 when the provider offers it), plain
//! HTTP/1.1 for `http://` ones. Everything that does not change between
//! calls is built once with the client: the endpoint URIs, the key header
//! (`Authorization: Bearer …` or Anthropic's `x-api-key`), Anthropic's
//! `anthropic-version`, `content-type`, and `Host` for `http://` providers,
//! so a call parses no URL and validates no constant header. Redirects are
//! not followed (a `3xx` is an error answer like any non-2xx). A provider
//! that the environment puts behind a proxy (`HTTPS_PROXY`, `HTTP_PROXY`,
//! `ALL_PROXY`, `NO_PROXY`, read when the client is built, as reqwest and
//! curl read them) is reached through a `CONNECT` tunnel of that proxy
//! (`http://` proxies, with the `user:pass@` of their URL as basic auth);
//! TLS to an `https://` provider runs inside the tunnel.

use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use std::convert::Infallible;
use std::future::Future;

use bytes::Bytes;
use http::header::{
    HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HOST,
};
use http::{Method, Request, Uri};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::proxy::matcher::{Intercept, Matcher};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
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
use super::ratelimit::{header_pairs, RateLimitHints};
use super::responses;
use super::stream::ChatStream;
use super::tag::CallTag;
use super::types::{ChatRequest, ChatResponse, Message, NativeRequest, NativeWire, StreamOptions, Usage};
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
    /// The chat endpoint as configured (`local:<modelDir>` for a local provider).
    url: String,
    /// The HTTP side of a remote provider; `None` for a local one.
    remote: Option<Remote>,
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

/// The HTTP client of a remote provider and what every call sends, built once.
struct Remote {
    http: Http,
    /// `{baseUrl}/chat/completions` (`{baseUrl}/messages` for Anthropic).
    chat: Uri,
    /// `{baseUrl}/embeddings`, or why the provider has none.
    embeddings: Result<Uri, String>,
    /// `{baseUrl}/messages/count_tokens` of an Anthropic provider.
    count_tokens: Option<Uri>,
    /// The headers of every call: `content-type`, the key header
    /// (`Authorization: Bearer <key>` or `x-api-key: <key>`), Anthropic's
    /// `anthropic-version`, and `Host` for an `http://` provider (only
    /// HTTP/1.1 there; over TLS hyper-util sets it, or HTTP/2's
    /// `:authority` carries it).
    headers: Vec<(HeaderName, HeaderValue)>,
}

/// The pooled hyper client of one provider.
type Http = Client<TimedConnector, TrackedBody>;

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
            ProviderKind::OpenAiResponses => "responses",
        };
        let url = format!("{base}/{endpoint}");
        let chat: Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad_url(e.to_string()))?;
        let https = match chat.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("https") => true,
            Some(s) if s.eq_ignore_ascii_case("http") => false,
            _ => return Err(bad_url("scheme must be http or https".into())),
        };
        let Some(authority) = chat.authority().cloned() else {
            return Err(bad_url("no host".into()));
        };
        if authority.as_str().contains('@') {
            return Err(bad_url(
                "credentials in the URL are not supported (use apiKeyEnv)".into(),
            ));
        }
        if cfg.settings.timeouts.max_connections == 0 {
            return Err(ProviderError::NoConnections { provider: name });
        }
        let mut headers = vec![(CONTENT_TYPE, HeaderValue::from_static("application/json"))];
        if let Some(var) = &cfg.settings.api_key_env {
            let missing = || ProviderError::MissingApiKey {
                provider: name.clone(),
                var: var.clone(),
            };
            let key = std::env::var(var).map_err(|_| missing())?;
            let (name, text) = match cfg.settings.kind {
                ProviderKind::OpenAi | ProviderKind::OpenAiResponses | ProviderKind::Local => {
                    (AUTHORIZATION, format!("Bearer {}", key.trim()))
                }
                ProviderKind::Anthropic => (
                    HeaderName::from_static(anthropic::API_KEY_HEADER),
                    key.trim().to_owned(),
                ),
            };
            let mut value = HeaderValue::from_str(&text).map_err(|_| missing())?;
            value.set_sensitive(true);
            headers.push((name, value));
        }
        if cfg.settings.kind == ProviderKind::Anthropic {
            headers.push((
                HeaderName::from_static(anthropic::VERSION_HEADER),
                HeaderValue::from_static(anthropic::API_VERSION),
            ));
        }
        if !https {
            // What hyper-util would set per call: the host, and the port
            // unless it is the scheme's default.
            let host = match authority.port_u16() {
                Some(80) | None => authority.host().to_owned(),
                Some(_) => authority.as_str().to_owned(),
            };
            let value = HeaderValue::from_str(&host).map_err(|e| bad_url(e.to_string()))?;
            headers.push((HOST, value));
        }
        let embeddings = embeddings_url(&url);
        let count_tokens = match cfg.settings.kind {
            ProviderKind::Anthropic => format!("{url}/count_tokens").parse().ok(),
            _ => None,
        };
        let t = cfg.settings.timeouts;
        let http = http_client(&name, &t, route_for(&name, &chat))?;
        Ok(Self {
            endpoint: Arc::new(Endpoint {
                name,
                kind: cfg.settings.kind,
                url,
                remote: Some(Remote {
                    http,
                    chat,
                    embeddings,
                    count_tokens,
                    headers,
                }),
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
        let url = format!("local:{dir}");
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
                name,
                kind: ProviderKind::Local,
                url,
                remote: None,
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

/// The HTTP client of a provider: its connect timeout and idle pool, with
/// the TCP settings reqwest used before (keepalive 15 s, 3 probes 15 s
/// apart, a 30 s user timeout on Linux), reaching it by `route`.
fn http_client(name: &str, t: &TimeoutsConfig, route: Option<Intercept>) -> Result<Http, ProviderError> {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(t.connect()));
    tcp.set_keepalive(Some(Duration::from_secs(15)));
    tcp.set_keepalive_interval(Some(Duration::from_secs(15)));
    tcp.set_keepalive_retries(Some(3));
    #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
    tcp.set_tcp_user_timeout(Some(Duration::from_secs(30)));
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| ProviderError::Client {
            provider: name.to_owned(),
            reason: error_chain(&e),
        })?
        .with_root_certificates(rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        })
        .with_no_client_auth();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(Route::new(tcp, route));
    let connector = TimedConnector {
        inner: https,
        timeout: t.connect(),
    };
    Ok(Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(t.max_connections as usize)
        .build(connector))
}

/// The proxy the environment names for `uri` (`HTTPS_PROXY` / `HTTP_PROXY`
/// by the URI's scheme, else `ALL_PROXY`, unless `NO_PROXY` excludes its
/// host: the variables reqwest, used before, and curl read), when it is an
/// `http://` proxy the client can tunnel through. A proxy of another scheme
/// (`https://`, `socks5://`) is not supported: the provider is reached
/// directly, with a warning that says so.
fn route_for(name: &str, uri: &Uri) -> Option<Intercept> {
    let intercept = Matcher::from_env().intercept(uri)?;
    if intercept.uri().scheme() == Some(&http::uri::Scheme::HTTP) {
        tracing::info!(provider = %name, proxy = %intercept.uri(), "provider calls go through a proxy (CONNECT)");
        Some(intercept)
    } else {
        tracing::warn!(
            provider = %name,
            proxy = %intercept.uri(),
            "only http:// proxies are supported: provider calls connect directly"
        );
        None
    }
}

/// How a provider's connections are opened: directly, or through a
/// `CONNECT` tunnel of an HTTP proxy (TLS, for an `https://` provider, then
/// runs inside the tunnel, end to end with the provider).
#[derive(Clone)]
enum Route {
    Direct(HttpConnector),
    Tunnel(Tunnel<HttpConnector>),
}

impl Route {
    fn new(tcp: HttpConnector, proxy: Option<Intercept>) -> Self {
        match proxy {
            None => Self::Direct(tcp),
            Some(p) => {
                let tunnel = Tunnel::new(p.uri().clone(), tcp);
                Self::Tunnel(match p.basic_auth() {
                    Some(auth) => tunnel.with_auth(auth.clone()),
                    None => tunnel,
                })
            }
        }
    }
}

impl tower::Service<Uri> for Route {
    type Response = TokioIo<tokio::net::TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            Self::Direct(c) => tower::Service::<Uri>::poll_ready(c, cx).map_err(Into::into),
            Self::Tunnel(t) => tower::Service::<Uri>::poll_ready(t, cx).map_err(Into::into),
        }
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        match self {
            Self::Direct(c) => {
                let connecting = tower::Service::<Uri>::call(c, dst);
                Box::pin(async move { connecting.await.map_err(Into::into) })
            }
            Self::Tunnel(t) => {
                // The tunnel asks for port 443 when the URI names none; an
                // `http://` provider's default is 80.
                let dst = match (dst.port_u16(), dst.scheme_str(), dst.host()) {
                    (None, Some("http"), Some(host)) => {
                        Uri::try_from(format!("http://{host}:80")).unwrap_or(dst)
                    }
                    _ => dst,
                };
                let connecting = tower::Service::<Uri>::call(t, dst);
                Box::pin(async move { connecting.await.map_err(Into::into) })
            }
        }
    }
}

/// An error of the connector (boxed, as hyper-util expects).
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The connector bounded by `connectMs` as a whole (DNS, TCP and TLS), as
/// reqwest's connect timeout was.
#[derive(Clone)]
struct TimedConnector {
    inner: HttpsConnector<Route>,
    timeout: Duration,
}

/// Connecting took longer than `connectMs`.
#[derive(Debug)]
struct ConnectTimedOut;

impl fmt::Display for ConnectTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("connect timed out")
    }
}

impl std::error::Error for ConnectTimedOut {}

impl tower::Service<Uri> for TimedConnector {
    type Response = MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        tower::Service::<Uri>::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let connecting = tower::Service::<Uri>::call(&mut self.inner, dst);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, connecting).await {
                Ok(r) => r,
                Err(_) => Err(Box::new(ConnectTimedOut) as BoxError),
            }
        })
    }
}

impl ProviderClient {
    /// The endpoint URL (`{baseUrl}/chat/completions`, or `{baseUrl}/messages`
    /// for an Anthropic provider; `local:<modelDir>` for a local one).
    pub fn url(&self) -> &str {
        &self.endpoint.url
    }

    /// Whether the calls carry a key (`apiKeyEnv` set).
    fn has_api_key(&self) -> bool {
        self.endpoint.remote.as_ref().is_some_and(|r| {
            r.headers
                .iter()
                .any(|(n, _)| *n == AUTHORIZATION || n.as_str() == anthropic::API_KEY_HEADER)
        })
    }

    /// The HTTP side of the provider; a local one has none.
    fn remote(&self) -> Result<&Remote, Box<CallError>> {
        self.endpoint.remote.as_ref().ok_or_else(|| {
            Box::new(CallError::transport(
                ErrorKind::BadRequest,
                format!("provider {} makes no HTTP calls", self.endpoint.name),
            ))
        })
    }

    /// `{baseUrl}/embeddings`, or why the provider has none.
    pub(super) fn embeddings_uri(&self) -> Result<&Uri, String> {
        match &self.endpoint.remote {
            Some(r) => r.embeddings.as_ref().map_err(Clone::clone),
            None => Err(format!(
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
        match self.endpoint.kind {
            ProviderKind::OpenAi => serde_json::to_vec(&Wire::new(req, streaming))
                .map_err(|e| Box::new(CallError::refused(None, format!("serialising the request: {e}")))),
            ProviderKind::Anthropic => anthropic::request::encode(req, streaming)
                .map_err(|e| Box::new(CallError::refused(e.param, e.to_string()))),
            ProviderKind::OpenAiResponses => responses::request::encode(req, streaming)
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

    /// A non-streamed answer body as a chat completion; for a request sent
    /// natively, with the provider's own answer kept beside it.
    fn decode(&self, body: &[u8], native: Option<NativeWire>) -> Result<ChatResponse, String> {
        let mut response = match self.endpoint.kind {
            ProviderKind::OpenAi => {
                serde_json::from_slice::<ChatResponse>(body).map_err(|e| e.to_string())?
            }
            ProviderKind::Anthropic => anthropic::to_chat_response(body)?,
            ProviderKind::OpenAiResponses => responses::response::to_chat_response(body)?,
            ProviderKind::Local => return Err("a local provider sends no chat completions".to_owned()),
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
        match self.endpoint.kind {
            ProviderKind::Anthropic => Some(NativeWire::Messages),
            ProviderKind::OpenAiResponses => Some(NativeWire::Responses),
            ProviderKind::OpenAi | ProviderKind::Local => None,
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
        match self.endpoint.kind {
            ProviderKind::Anthropic => {
                sent.body = anthropic::stream::translate_body(sent.body, native.is_some());
            }
            ProviderKind::OpenAiResponses => {
                sent.body = responses::stream::translate_body(sent.body, native.is_some());
            }
            ProviderKind::OpenAi | ProviderKind::Local => {}
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

    /// The POST of `body` to `uri` with the key, version and tag headers,
    /// and the signals of its body: the connection started writing it, and
    /// took all of it.
    fn request(
        remote: &Remote,
        uri: &Uri,
        body: Vec<u8>,
        streaming: bool,
        tag: &CallTag,
        passed: &[(String, String)],
    ) -> (Request<TrackedBody>, oneshot::Receiver<()>, oneshot::Receiver<()>) {
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
        let mut request = Request::new(tracked);
        *request.method_mut() = Method::POST;
        *request.uri_mut() = uri.clone();
        let headers: &mut HeaderMap = request.headers_mut();
        headers.reserve(remote.headers.len() + 5);
        for (name, value) in &remote.headers {
            headers.insert(name.clone(), value.clone());
        }
        headers.insert(CONTENT_LENGTH, HeaderValue::from(len));
        headers.insert(ACCEPT, HeaderValue::from_static(accept));
        for (name, value) in tag.headers() {
            headers.insert(name, value);
        }
        for (name, value) in passed {
            if let Some((name, value)) = passed_header(name, value) {
                headers.insert(name, value);
            }
        }
        (request, started_rx, written_rx)
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
        let (request, started_rx, written_rx) = Self::request(remote, uri, body, streaming, tag, passed);
        let fut = remote.http.request(request);
        tokio::pin!(fut);

        let total_timeout = |what: &str| {
            CallError::timeout(
                TimeoutPhase::Total,
                format!("deadline passed {what} after {} ms", elapsed_ms(started)),
            )
        };
        // Connect: bounded by the connector's timer, and by the deadline here.
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
        let (parts, incoming) = response.into_parts();
        let headers = parts.headers;
        let ratelimit = RateLimitHints::from_header_map(&headers);
        // The data frames as a stream (trailers skipped).
        let mut body: BodyStream = Box::pin(incoming.into_data_stream());

        if !(200..300).contains(&status) {
            let raw = read_bounded(&mut body, ERROR_BODY_LIMIT, t.read(), deadline).await;
            let text = String::from_utf8_lossy(&raw);
            let kind = taxonomy::classify(status, &header_pairs(&headers), &text);
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

/// The headers of an agent's request that reach a provider of its own wire:
/// Anthropic's `anthropic-version` and `anthropic-beta` (the features a
/// request relies on), valid as HTTP; never a credential or anything else.
pub(crate) const PASSED_HEADERS: [&str; 2] = ["anthropic-version", "anthropic-beta"];

/// `name: value` as a header to pass on, if it is one of
/// [`PASSED_HEADERS`] and valid.
fn passed_header(name: &str, value: &str) -> Option<(HeaderName, HeaderValue)> {
    let known = PASSED_HEADERS.iter().find(|h| h.eq_ignore_ascii_case(name))?;
    let value = HeaderValue::from_str(value).ok()?;
    Some((HeaderName::from_static(known), value))
}

/// The agent's own body with the provider's `model` and the call's
/// `stream` set; every other field as it came.
fn native_body(native: &NativeRequest, model: &str, streaming: bool) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&NativeBody {
        body: &native.body,
        model,
        streaming,
    })
}

/// The agent's body as [`native_body`] writes it, serialised in place (no
/// copy of a prompt that may be megabytes).
struct NativeBody<'a> {
    body: &'a Map<String, Value>,
    model: &'a str,
    streaming: bool,
}

impl Serialize for NativeBody<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("model", self.model)?;
        if self.streaming {
            map.serialize_entry("stream", &true)?;
        }
        for (k, v) in self.body {
            if k != "model" && k != "stream" {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
}

/// Maps a failure of sending the request (before any response head).
fn send_error(e: &hyper_util::client::legacy::Error, t: &TimeoutsConfig) -> CallError {
    let chain = error_chain(e);
    if is_timeout(e) {
        // The only timeout inside the client is the connect timeout.
        CallError::timeout(
            TimeoutPhase::Connect,
            format!("connect timed out after {} ms: {chain}", t.connect_ms),
        )
    } else {
        // Refused, reset, DNS failure, TLS failure, closed before the head.
        CallError::transport(ErrorKind::Connection, chain)
    }
}

/// Whether a timer ended the connect: the connector's, the TCP connect's
/// (`connectMs` per address), or the system's (`ETIMEDOUT`).
fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(err) = source {
        if err.is::<ConnectTimedOut>() {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::TimedOut {
                return true;
            }
        }
        if err
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_timeout)
        {
            return true;
        }
        source = err.source();
    }
    false
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

impl Body for TrackedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(tx) = self.started.take() {
            let _ = tx.send(());
        }
        if let Some(data) = self.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if let Some(tx) = self.written.take() {
            let _ = tx.send(());
        }
        Poll::Ready(None)
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
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

/// `{baseUrl}/embeddings`, from the client's `{baseUrl}/chat/completions`;
/// `Err` says why there is none. Built once, with the client.
pub(super) fn embeddings_url(chat_url: &str) -> Result<http::Uri, String> {
    let base = chat_url
        .strip_suffix("/chat/completions")
        .or_else(|| chat_url.strip_suffix("/responses"))
        .ok_or_else(|| format!("the provider at {chat_url} has no OpenAI embeddings endpoint"))?;
    format!("{base}/embeddings")
        .parse()
        .map_err(|e| format!("embeddings URL: {e}"))
}
