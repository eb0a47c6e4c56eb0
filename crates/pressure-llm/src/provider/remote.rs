//! [`Remote`]: the HTTP side of a remote provider, built once with its
//! client — its [`Wire`], its endpoint URIs, the headers every call sends
//! and its pooled connections — so a call parses no URL and validates no
//! constant header.

use http::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, HOST};
use http::{Method, Request, Uri};

use super::config::ProviderConfig;
use super::error::ProviderError;
use super::native::passed_header;
use super::tag::CallTag;
use super::transport::{http_client, route_for, BodySignals, Http, TrackedBody};
use super::wire::Wire;

/// The HTTP client of a remote provider and what every call sends, built once.
pub(super) struct Remote {
    /// The wire format the provider speaks.
    pub(super) wire: &'static dyn Wire,
    pub(super) http: Http,
    /// `{baseUrl}/{chat path}`: `chat/completions`, `messages` or `responses`.
    pub(super) chat: Uri,
    /// `{baseUrl}/embeddings`, or why the provider has none.
    pub(super) embeddings: Result<Uri, String>,
    /// The wire's token-counting endpoint (`{baseUrl}/messages/count_tokens`
    /// of an Anthropic provider).
    pub(super) count_tokens: Option<Uri>,
    /// The headers of every call: `content-type`, the key header (when
    /// `apiKeyEnv` is set), the wire's fixed headers, and `Host` for an
    /// `http://` provider (only HTTP/1.1 there; over TLS hyper-util sets
    /// it, or HTTP/2's `:authority` carries it).
    headers: Vec<(HeaderName, HeaderValue)>,
    /// Whether the calls carry a key (`apiKeyEnv` set).
    pub(super) has_key: bool,
}

impl Remote {
    /// The remote side of the provider `cfg` on `wire`: its chat URL
    /// (`{baseUrl}/{chat path}`, returned beside it) validated — `http` or
    /// `https`, a host, no credentials — the key read from `apiKeyEnv`, the
    /// headers and the pooled client built (through the environment's
    /// proxy, if it names one).
    pub(super) fn new(
        cfg: &ProviderConfig,
        wire: &'static dyn Wire,
    ) -> Result<(Self, String), ProviderError> {
        let name = &cfg.name;
        let bad_url = |reason: String| ProviderError::InvalidBaseUrl {
            provider: name.clone(),
            url: cfg.settings.base_url.clone(),
            reason,
        };
        let base = cfg.settings.base_url.trim_end_matches('/');
        let url = format!("{base}/{}", wire.chat_path());
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
            return Err(ProviderError::NoConnections {
                provider: name.clone(),
            });
        }
        let mut headers = vec![(CONTENT_TYPE, HeaderValue::from_static("application/json"))];
        if let Some(key) = key_header(cfg, wire)? {
            headers.push(key);
        }
        let has_key = headers.len() > 1;
        headers.extend(wire.fixed_headers());
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
        let count_tokens = wire
            .count_tokens_path()
            .and_then(|path| format!("{base}/{path}").parse().ok());
        let http = http_client(name, &cfg.settings.timeouts, route_for(name, &chat))?;
        let remote = Self {
            wire,
            http,
            chat,
            embeddings,
            count_tokens,
            headers,
            has_key,
        };
        Ok((remote, url))
    }

    /// The POST of `body` to `uri` with the constant, tag and `passed`
    /// headers, and the signals of its body: the connection started writing
    /// it, and took all of it.
    pub(super) fn request(
        &self,
        uri: &Uri,
        body: Vec<u8>,
        streaming: bool,
        tag: &CallTag,
        passed: &[(String, String)],
    ) -> (Request<TrackedBody>, BodySignals) {
        let len = body.len();
        let (tracked, signals) = TrackedBody::new(body);
        let accept = if streaming {
            "text/event-stream"
        } else {
            "application/json"
        };
        let mut request = Request::new(tracked);
        *request.method_mut() = Method::POST;
        *request.uri_mut() = uri.clone();
        let headers: &mut HeaderMap = request.headers_mut();
        headers.reserve(self.headers.len() + 5);
        for (name, value) in &self.headers {
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
        (request, signals)
    }
}

/// The key header of `cfg` on `wire`, from the environment variable its
/// `apiKeyEnv` names (marked sensitive, so it is never logged); `None`
/// without `apiKeyEnv`.
fn key_header(
    cfg: &ProviderConfig,
    wire: &dyn Wire,
) -> Result<Option<(HeaderName, HeaderValue)>, ProviderError> {
    let Some(var) = &cfg.settings.api_key_env else {
        return Ok(None);
    };
    let missing = || ProviderError::MissingApiKey {
        provider: cfg.name.clone(),
        var: var.clone(),
    };
    let key = std::env::var(var).map_err(|_| missing())?;
    let (name, text) = wire.key_header(key.trim());
    let mut value = HeaderValue::from_str(&text).map_err(|_| missing())?;
    value.set_sensitive(true);
    Ok(Some((name, value)))
}

/// `{baseUrl}/embeddings`, from the client's `{baseUrl}/chat/completions`
/// (or `{baseUrl}/responses`); `Err` says why there is none. Built once,
/// with the client.
pub(super) fn embeddings_url(chat_url: &str) -> Result<Uri, String> {
    let base = chat_url
        .strip_suffix("/chat/completions")
        .or_else(|| chat_url.strip_suffix("/responses"))
        .ok_or_else(|| format!("the provider at {chat_url} has no OpenAI embeddings endpoint"))?;
    format!("{base}/embeddings")
        .parse()
        .map_err(|e| format!("embeddings URL: {e}"))
}
