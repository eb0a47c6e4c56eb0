//! Which upstream serves a path: the longest `pathPrefix` that covers it on
//! a segment boundary (`/api/v1` covers `/api/v1` and `/api/v1/x`, not
//! `/api/v10`; `/` covers everything; a prefix ending in `/` covers what
//! starts with it).

use super::error::ProxyError;
use crate::settings::UpstreamConfig;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::Uri;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One upstream service: where it lives and which paths it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    name: String,
    path_prefix: String,
    base: Uri,
    scheme: Scheme,
    authority: Authority,
    /// `authority` as the `Host` header value the upstream is sent.
    host: http::HeaderValue,
    /// Path of the base URL without its trailing `/` (empty for none).
    base_path: String,
}

impl Upstream {
    /// Parses one configured upstream.
    pub fn new(name: &str, cfg: &UpstreamConfig) -> Result<Self, ProxyError> {
        let invalid_url = |reason: &str| ProxyError::InvalidUrl {
            upstream: name.to_owned(),
            url: cfg.url.clone(),
            reason: reason.to_owned(),
        };
        let base: Uri = cfg
            .url
            .parse()
            .map_err(|e: http::uri::InvalidUri| invalid_url(&e.to_string()))?;
        let scheme = base
            .scheme()
            .cloned()
            .ok_or_else(|| invalid_url("must be an absolute http:// or https:// URL"))?;
        if scheme != Scheme::HTTP && scheme != Scheme::HTTPS {
            return Err(invalid_url("only http:// and https:// upstreams are supported"));
        }
        let authority = base
            .authority()
            .cloned()
            .ok_or_else(|| invalid_url("must name a host"))?;
        if authority.as_str().contains('@') {
            return Err(invalid_url("must not carry credentials"));
        }
        if authority.host().is_empty() {
            return Err(invalid_url("must name a host"));
        }
        if base.query().is_some() {
            return Err(invalid_url("must not have a query"));
        }
        let host = http::HeaderValue::from_str(authority.as_str())
            .map_err(|_| invalid_url("its host is not a valid Host header"))?;
        let base_path = base.path().trim_end_matches('/').to_owned();

        let prefix = &cfg.path_prefix;
        if !prefix.starts_with('/') {
            return Err(ProxyError::InvalidPathPrefix {
                upstream: name.to_owned(),
                prefix: prefix.clone(),
                reason: "must start with /".to_owned(),
            });
        }
        if prefix.contains(['?', '#']) {
            return Err(ProxyError::InvalidPathPrefix {
                upstream: name.to_owned(),
                prefix: prefix.clone(),
                reason: "must be a path without query or fragment".to_owned(),
            });
        }
        Ok(Self {
            name: name.to_owned(),
            path_prefix: prefix.clone(),
            base,
            scheme,
            authority,
            host,
            base_path,
        })
    }

    /// The upstream's name (its key in `gateway.upstreams`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The path prefix it serves, as configured.
    pub fn path_prefix(&self) -> &str {
        &self.path_prefix
    }

    /// The parsed base URL.
    pub fn base_uri(&self) -> &Uri {
        &self.base
    }

    /// `host[:port]` of the base URL; the `Host` the upstream is sent.
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// The `Host` header value the upstream is sent (its authority).
    pub fn host(&self) -> &http::HeaderValue {
        &self.host
    }

    /// Whether this upstream's prefix covers `path`.
    pub fn matches(&self, path: &str) -> bool {
        prefix_matches(&self.path_prefix, path)
    }

    /// The request target sent to this upstream for a request whose target
    /// was `original`: origin-form (the connection already names the
    /// upstream), the base's path (if any) prepended to the request's path,
    /// the query kept; `/` when the request had none.
    pub(crate) fn origin_target(&self, original: Option<&PathAndQuery>) -> Result<Uri, http::Error> {
        let path_and_query = original.map_or("/", PathAndQuery::as_str);
        let path_and_query = match (self.base_path.is_empty(), path_and_query.starts_with('/')) {
            // The common case: nothing to prepend, nothing to build.
            (true, true) => original
                .cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/")),
            (_, true) => format!("{}{}", self.base_path, path_and_query).try_into()?,
            (_, false) => format!("{}/{}", self.base_path, path_and_query).try_into()?,
        };
        Ok(Uri::from(path_and_query))
    }

    /// Whether the upstream is reached over TLS (`https://`).
    pub(crate) fn is_https(&self) -> bool {
        self.scheme == Scheme::HTTPS
    }

    /// The URI the connector dials for this upstream: its scheme and
    /// authority.
    pub(crate) fn dial_uri(&self) -> Uri {
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query("/")
            .build()
            .unwrap_or_else(|_| self.base.clone())
    }
}

/// All upstreams, ready to route paths.
#[derive(Debug, Clone, Default)]
pub struct Upstreams {
    /// Longest prefix first; among equals (impossible, duplicates are
    /// refused) name order.
    by_prefix: Vec<Arc<Upstream>>,
}

impl Upstreams {
    /// Parses `gateway.upstreams`; refuses bad URLs, bad prefixes and two
    /// upstreams with the same prefix.
    pub fn new(upstreams: &BTreeMap<String, UpstreamConfig>) -> Result<Self, ProxyError> {
        let mut by_prefix = Vec::with_capacity(upstreams.len());
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        for (name, cfg) in upstreams {
            if let Some(first) = seen.insert(&cfg.path_prefix, name) {
                return Err(ProxyError::DuplicatePathPrefix {
                    prefix: cfg.path_prefix.clone(),
                    first: first.to_owned(),
                    second: name.clone(),
                });
            }
            by_prefix.push(Arc::new(Upstream::new(name, cfg)?));
        }
        by_prefix.sort_by_key(|u| std::cmp::Reverse(u.path_prefix.len()));
        Ok(Self { by_prefix })
    }

    /// The upstream whose prefix is the longest one covering `path`.
    pub fn route(&self, path: &str) -> Option<&Arc<Upstream>> {
        self.by_prefix.iter().find(|u| u.matches(path))
    }

    /// Where [`route`](Self::route)'s upstream is in [`iter`](Self::iter)'s
    /// order: for a table kept beside this one (the plan's resources per
    /// upstream).
    pub(crate) fn position(&self, path: &str) -> Option<usize> {
        self.by_prefix.iter().position(|u| u.matches(path))
    }

    /// The upstream at `index` of [`iter`](Self::iter)'s order.
    pub(crate) fn at(&self, index: usize) -> Option<&Arc<Upstream>> {
        self.by_prefix.get(index)
    }

    /// Adds `upstream` in its place (longest prefix first, after those of
    /// the same length) and answers that place.
    pub(crate) fn insert(&mut self, upstream: Arc<Upstream>) -> usize {
        let len = upstream.path_prefix.len();
        let at = self.by_prefix.partition_point(|u| u.path_prefix.len() >= len);
        self.by_prefix.insert(at, upstream);
        at
    }

    /// The upstream named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Upstream>> {
        self.by_prefix.iter().find(|u| u.name == name)
    }

    /// All upstreams, longest prefix first.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Upstream>> {
        self.by_prefix.iter()
    }

    /// How many upstreams there are.
    pub fn len(&self) -> usize {
        self.by_prefix.len()
    }

    /// Whether there are none (every path is then `404`).
    pub fn is_empty(&self) -> bool {
        self.by_prefix.is_empty()
    }
}

/// Whether `prefix` covers `path` on a segment boundary.
pub(crate) fn prefix_matches(prefix: &str, path: &str) -> bool {
    if prefix == "/" || path == prefix {
        return true;
    }
    path.starts_with(prefix) && (prefix.ends_with('/') || path.as_bytes().get(prefix.len()) == Some(&b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(entries: &[(&str, &str, &str)]) -> BTreeMap<String, UpstreamConfig> {
        entries
            .iter()
            .map(|(name, url, prefix)| {
                (
                    (*name).to_owned(),
                    UpstreamConfig {
                        url: (*url).to_owned(),
                        path_prefix: (*prefix).to_owned(),
                        tls: None,
                    },
                )
            })
            .collect()
    }

    fn routed<'a>(upstreams: &'a Upstreams, path: &str) -> Option<&'a str> {
        upstreams.route(path).map(|u| u.name())
    }

    #[test]
    fn longest_prefix_on_segment_boundaries() {
        let ups = Upstreams::new(&cfg(&[
            ("root", "http://127.0.0.1:1", "/"),
            ("v1", "http://127.0.0.1:2", "/api/v1"),
            ("hooks", "http://127.0.0.1:3", "/api/v1/webhooks/"),
        ]))
        .expect("valid");
        assert_eq!(routed(&ups, "/api/v1"), Some("v1"));
        assert_eq!(routed(&ups, "/api/v1/"), Some("v1"));
        assert_eq!(routed(&ups, "/api/v1/x"), Some("v1"));
        assert_eq!(routed(&ups, "/api/v10"), Some("root"));
        assert_eq!(routed(&ups, "/api/v1/webhooks"), Some("v1"));
        assert_eq!(routed(&ups, "/api/v1/webhooks/github"), Some("hooks"));
        assert_eq!(routed(&ups, "/"), Some("root"));
        assert_eq!(routed(&ups, "/other"), Some("root"));
    }

    #[test]
    fn no_match_without_root() {
        let ups = Upstreams::new(&cfg(&[("v1", "http://127.0.0.1:2", "/api/v1")])).expect("valid");
        assert_eq!(routed(&ups, "/api"), None);
        assert_eq!(routed(&ups, "/api/v10/x"), None);
        assert_eq!(routed(&ups, ""), None);
        assert_eq!(ups.get("v1").map(|u| u.path_prefix()), Some("/api/v1"));
    }

    #[test]
    fn origin_target_prepends_the_base_path() {
        let ups = Upstreams::new(&cfg(&[
            ("plain", "http://127.0.0.1:9001", "/a"),
            ("based", "http://up.internal:9002/base/", "/b"),
        ]))
        .expect("valid");
        let target = |u: &Upstream, pq: &'static str| {
            let pq = PathAndQuery::from_static(pq);
            u.origin_target(Some(&pq)).expect("uri").to_string()
        };
        let plain = ups.get("plain").expect("plain");
        assert_eq!(target(plain, "/a/x?y=1"), "/a/x?y=1");
        assert_eq!(plain.origin_target(None).expect("uri").to_string(), "/");
        assert_eq!(plain.authority().as_str(), "127.0.0.1:9001");
        assert_eq!(plain.dial_uri().to_string(), "http://127.0.0.1:9001/");
        assert!(!plain.is_https());
        let based = ups.get("based").expect("based");
        assert_eq!(target(based, "/b/x?y=1"), "/base/b/x?y=1");
        assert_eq!(target(based, "*"), "/base/*");
        assert_eq!(based.base_uri().path(), "/base/");
    }

    #[test]
    fn bad_config_is_refused() {
        for (url, prefix) in [
            ("ftp://127.0.0.1:1", "/"),
            ("127.0.0.1:1", "/"),
            ("/just/a/path", "/"),
            ("http://user:pw@127.0.0.1:1", "/"),
            ("http://127.0.0.1:1/?q=1", "/"),
            ("not a url", "/"),
            ("http://127.0.0.1:1", "api"),
            ("http://127.0.0.1:1", "/api?x"),
        ] {
            assert!(
                Upstreams::new(&cfg(&[("u", url, prefix)])).is_err(),
                "{url} {prefix} should be refused"
            );
        }
        let dup = Upstreams::new(&cfg(&[
            ("a", "http://127.0.0.1:1", "/x"),
            ("b", "http://127.0.0.1:2", "/x"),
        ]));
        assert_eq!(
            dup.expect_err("duplicate").to_string(),
            "gateway.upstreams.b.pathPrefix: \"/x\" is already the prefix of upstream a"
        );
    }
}
