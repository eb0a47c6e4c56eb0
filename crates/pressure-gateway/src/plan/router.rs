//! [`Router`]: the one decision per request — which upstream serves the
//! path, which resource the pre-auth layer charges, and whether the gateway
//! answers it itself (the OpenAI endpoints `POST /v1/chat/completions`,
//! `POST /v1/embeddings`, `GET /v1/models[/{id}]`, when `gateway.llm` is
//! set). Built once per plan.
//!
//! * The upstream is the one whose `pathPrefix` is the longest covering the
//!   path on a segment boundary (`/api/v1` covers `/api/v1` and `/api/v1/x`,
//!   not `/api/v10`; `/` covers everything).
//! * The resource is the longest matching `perRoute.pathPrefix`, else the
//!   `perService` limit **of that upstream** — never another upstream's —
//!   else none.

use crate::backend::AnyBackend;
use crate::http::proxy::{prefix_matches, Upstream, Upstreams};
use http::Method;
use pressure_core::ResourceHandle;
use std::sync::Arc;

/// Where a request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// Forwarded to the route's upstream (`404` without one).
    Proxy,
    /// `POST /v1/chat/completions`, answered by the LLM pipeline.
    ChatCompletions,
    /// `POST /v1/embeddings`, answered by the LLM pipeline.
    Embeddings,
    /// `GET /v1/models`: the use cases, answered by the gateway.
    Models,
    /// `GET /v1/models/{id}` (the id is `model_id` of the path).
    Model,
    /// `POST /v1/messages`: Anthropic's Messages API (Claude Code, the
    /// anthropic SDK), answered by the LLM pipeline.
    Messages,
    /// `POST /v1/messages/count_tokens`: a Messages request's input tokens.
    CountTokens,
    /// `POST /v1/responses`: OpenAI's Responses API (Codex CLI, the openai
    /// SDK's `responses`), answered by the LLM pipeline.
    Responses,
}

impl Endpoint {
    /// Whether the gateway answers it through its LLM client.
    pub fn is_llm(self) -> bool {
        !matches!(self, Self::Proxy)
    }
}

/// The decision for one request.
#[derive(Debug, Clone)]
pub struct Route {
    /// The upstream the proxy forwards to (none: `404`, unless the gateway
    /// answers itself).
    pub upstream: Option<Arc<Upstream>>,
    /// The resource the pre-auth layer charges.
    pub resource: Option<ResourceHandle<AnyBackend>>,
    /// Who answers.
    pub endpoint: Endpoint,
}

/// The path of the OpenAI chat endpoint.
pub(crate) const CHAT_COMPLETIONS_PATH: &str = "/v1/chat/completions";
/// The path of the OpenAI embeddings endpoint.
pub(crate) const EMBEDDINGS_PATH: &str = "/v1/embeddings";
/// The path of Anthropic's Messages endpoint.
pub(crate) const MESSAGES_PATH: &str = "/v1/messages";
/// The path of Anthropic's token counting endpoint.
pub(crate) const COUNT_TOKENS_PATH: &str = "/v1/messages/count_tokens";
/// The path of OpenAI's Responses endpoint.
pub(crate) const RESPONSES_PATH: &str = "/v1/responses";
/// The path of the OpenAI model list; `/v1/models/{id}` retrieves one.
pub(crate) const MODELS_PATH: &str = "/v1/models";

/// The `{id}` of `/v1/models/{id}` (non-empty; it may hold `/`, as a use
/// case name may), or `None` for any other path.
pub(crate) fn model_id(path: &str) -> Option<&str> {
    path.strip_prefix(MODELS_PATH)?
        .strip_prefix('/')
        .filter(|id| !id.is_empty())
}

/// The endpoint the gateway answers itself for `method` and `path`.
fn llm_endpoint(method: &Method, path: &str) -> Option<Endpoint> {
    match (method, path) {
        (&Method::POST, CHAT_COMPLETIONS_PATH) => Some(Endpoint::ChatCompletions),
        (&Method::POST, EMBEDDINGS_PATH) => Some(Endpoint::Embeddings),
        (&Method::POST, MESSAGES_PATH) => Some(Endpoint::Messages),
        (&Method::POST, COUNT_TOKENS_PATH) => Some(Endpoint::CountTokens),
        (&Method::POST, RESPONSES_PATH) => Some(Endpoint::Responses),
        (&Method::GET, MODELS_PATH) => Some(Endpoint::Models),
        (&Method::GET, p) if model_id(p).is_some() => Some(Endpoint::Model),
        _ => None,
    }
}

/// One `perRoute` prefix.
#[derive(Debug, Clone)]
struct RouteEntry {
    prefix: String,
    resource: ResourceHandle<AnyBackend>,
}

/// Every route of a plan.
#[derive(Debug, Clone, Default)]
pub struct Router {
    /// Longest prefix first.
    routes: Vec<RouteEntry>,
    /// The upstreams: the one routing table, which the proxy on its own
    /// routes with too.
    upstreams: Upstreams,
    /// Each upstream's `perService` resource, in `upstreams`' order.
    services: Vec<Option<ResourceHandle<AnyBackend>>>,
    /// Whether the gateway serves the OpenAI endpoint.
    llm: bool,
}

impl Router {
    /// An empty router: every path is `404`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an upstream with its `perService` resource, if any.
    pub fn upstream(mut self, upstream: Arc<Upstream>, resource: Option<ResourceHandle<AnyBackend>>) -> Self {
        let at = self.upstreams.insert(upstream);
        self.services.insert(at, resource);
        self
    }

    /// Adds a `perRoute` limit on `prefix`.
    pub fn limit(mut self, prefix: &str, resource: ResourceHandle<AnyBackend>) -> Self {
        self.routes.push(RouteEntry {
            prefix: prefix.to_owned(),
            resource,
        });
        self.routes.sort_by_key(|e| std::cmp::Reverse(e.prefix.len()));
        self
    }

    /// Serves the OpenAI endpoint (`gateway.llm` is set).
    pub fn with_llm(mut self, on: bool) -> Self {
        self.llm = on;
        self
    }

    /// The decision for a request to `path` (already normalised).
    pub fn route(&self, method: &Method, path: &str) -> Route {
        let service = self.upstreams.position(path);
        let resource = self
            .routes
            .iter()
            .find(|e| prefix_matches(&e.prefix, path))
            .map(|e| e.resource.clone())
            .or_else(|| service.and_then(|i| self.services.get(i).cloned().flatten()));
        let endpoint = match self.llm {
            true => llm_endpoint(method, path).unwrap_or(Endpoint::Proxy),
            false => Endpoint::Proxy,
        };
        Route {
            upstream: service.and_then(|i| self.upstreams.at(i)).map(Arc::clone),
            resource,
            endpoint,
        }
    }

    /// Every resource the router charges.
    pub fn resources(&self) -> impl Iterator<Item = &ResourceHandle<AnyBackend>> {
        self.routes
            .iter()
            .map(|e| &e.resource)
            .chain(self.services.iter().flatten())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Broker;
    use crate::settings::UpstreamConfig;
    use pressure_core::{Limits, MemoryBackend, ResourceBroker};

    fn upstream(name: &str, prefix: &str) -> Arc<Upstream> {
        let cfg = UpstreamConfig {
            url: "http://127.0.0.1:1".into(),
            path_prefix: prefix.into(),
            tls: None,
        };
        Arc::new(Upstream::new(name, &cfg).expect("valid upstream"))
    }

    fn broker() -> Broker {
        ResourceBroker::builder(AnyBackend::Memory(MemoryBackend::new())).build()
    }

    fn handle(b: &Broker, id: &str) -> ResourceHandle<AnyBackend> {
        b.register_limit(id, Limits::default().requests_per_second(1))
            .expect("register");
        b.resource(id).expect("registered")
    }

    #[test]
    fn prefixes_match_on_segments() {
        assert!(prefix_matches("/api/v1", "/api/v1"));
        assert!(prefix_matches("/api/v1", "/api/v1/x"));
        assert!(!prefix_matches("/api/v1", "/api/v10"));
        assert!(prefix_matches("/api/", "/api/x"));
        assert!(prefix_matches("/", "/anything"));
    }

    /// The regression of the probe: `/api` (no perService) is never charged
    /// to the `/` upstream's limit.
    #[test]
    fn a_service_limit_charges_only_its_own_upstream() {
        let b = broker();
        let web = handle(&b, "gateway:service:web");
        let router = Router::new()
            .upstream(upstream("api", "/api"), None)
            .upstream(upstream("web", "/"), Some(web));
        let api = router.route(&Method::GET, "/api/orders");
        assert_eq!(api.upstream.as_ref().map(|u| u.name()), Some("api"));
        assert!(
            api.resource.is_none(),
            "charged {:?}",
            api.resource.map(|r| r.id().to_owned())
        );
        let home = router.route(&Method::GET, "/index.html");
        assert_eq!(home.upstream.as_ref().map(|u| u.name()), Some("web"));
        assert_eq!(
            home.resource.as_ref().map(|r| r.id()),
            Some("gateway:service:web")
        );
    }

    #[test]
    fn the_longest_route_wins_over_the_service() {
        let b = broker();
        let svc = handle(&b, "gateway:service:api");
        let hooks = handle(&b, "gateway:route:hooks");
        let deep = handle(&b, "gateway:route:deep");
        let router = Router::new()
            .upstream(upstream("api", "/api"), Some(svc))
            .limit("/api/hooks", hooks)
            .limit("/api/hooks/github", deep);
        let id = |p: &str| router.route(&Method::GET, p).resource.map(|r| r.id().to_owned());
        assert_eq!(id("/api/hooks/github/x").as_deref(), Some("gateway:route:deep"));
        assert_eq!(id("/api/hooks/stripe").as_deref(), Some("gateway:route:hooks"));
        assert_eq!(id("/api/hooksx").as_deref(), Some("gateway:service:api"));
        assert_eq!(id("/other"), None);
        assert!(router.route(&Method::GET, "/other").upstream.is_none());
    }

    #[test]
    fn the_chat_endpoint_only_with_llm_and_post() {
        let router = Router::new().upstream(upstream("api", "/"), None);
        assert_eq!(
            router.route(&Method::POST, CHAT_COMPLETIONS_PATH).endpoint,
            Endpoint::Proxy
        );
        let router = router.with_llm(true);
        let r = router.route(&Method::POST, CHAT_COMPLETIONS_PATH);
        assert_eq!(r.endpoint, Endpoint::ChatCompletions);
        assert_eq!(
            router.route(&Method::GET, CHAT_COMPLETIONS_PATH).endpoint,
            Endpoint::Proxy
        );
    }

    #[test]
    fn embeddings_and_models_only_with_llm() {
        let plain = Router::new().upstream(upstream("api", "/"), None);
        let llm = plain.clone().with_llm(true);
        let cases = [
            (Method::POST, "/v1/embeddings", Endpoint::Embeddings),
            (Method::GET, "/v1/embeddings", Endpoint::Proxy),
            (Method::GET, "/v1/models", Endpoint::Models),
            (Method::POST, "/v1/models", Endpoint::Proxy),
            (Method::GET, "/v1/models/support", Endpoint::Model),
            (Method::GET, "/v1/models/", Endpoint::Proxy),
            (Method::GET, "/v1/modelsx", Endpoint::Proxy),
        ];
        for (method, path, want) in cases {
            assert_eq!(llm.route(&method, path).endpoint, want, "{method} {path}");
            assert_eq!(
                plain.route(&method, path).endpoint,
                Endpoint::Proxy,
                "{method} {path}"
            );
        }
        assert_eq!(model_id("/v1/models/a/b"), Some("a/b"));
        assert_eq!(model_id("/v1/models"), None);
    }
}
