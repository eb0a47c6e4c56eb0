//! Header rewriting at the proxy boundary: hop-by-hop headers (RFC 9110
//! §7.6.1) are dropped both ways, and the request gains the
//! `X-Forwarded-*` headers and the upstream's `Host`.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use std::net::IpAddr;

/// `X-Forwarded-For`.
pub(crate) static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
/// `X-Forwarded-Proto`.
pub(crate) static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
/// `X-Forwarded-Host`.
pub(crate) static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Headers that describe one connection, never the message: they are not
/// forwarded.
static HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Which of the hop-by-hop headers a message carries (bit `i`:
/// `HOP_BY_HOP[i]`): looked at once, for the upgrade check and the strip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HopByHop(u16);

impl HopByHop {
    /// Those of `headers`.
    pub(crate) fn of(headers: &HeaderMap) -> Self {
        // Most messages carry none of them, and a `remove` hashes its
        // name: look at the (few) names present first.
        let mut present = 0;
        for name in headers.keys() {
            if let Some(i) = hop_by_hop_index(name) {
                present |= 1 << i;
            }
        }
        Self(present)
    }

    /// Whether `Connection` and `Upgrade` are both there (what a WebSocket
    /// upgrade needs).
    pub(crate) fn may_upgrade(self) -> bool {
        const BOTH: u16 = 1 | 1 << 8;
        self.0 & BOTH == BOTH
    }

    fn has(self, i: usize) -> bool {
        self.0 & (1 << i) != 0
    }
}

/// Removes the hop-by-hop headers, and every header that `Connection`
/// names, from `headers`.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    strip_present(headers, HopByHop::of(headers));
}

/// [`strip_hop_by_hop`], `present` being [`HopByHop::of`] `headers`.
pub(crate) fn strip_present(headers: &mut HeaderMap, present: HopByHop) {
    if present.0 == 0 {
        return;
    }
    // What `Connection` names beyond the hop-by-hop headers (removed
    // below anyway): usually nothing (`keep-alive`), so usually nothing to
    // allocate.
    if present.has(0) && connection_tokens(headers).any(is_other) {
        let named: Vec<HeaderName> = connection_tokens(headers)
            .filter(|token| is_other(token))
            .filter_map(|token| HeaderName::from_bytes(token.as_bytes()).ok())
            .collect();
        for name in &named {
            headers.remove(name);
        }
    }
    for (i, name) in HOP_BY_HOP.iter().enumerate() {
        if present.has(i) {
            headers.remove(name);
        }
    }
}

/// How a response header read by the exchange (`exchange.rs`) is kept
/// in the map it builds, so that the map comes out as
/// [`strip_hop_by_hop`] would leave it with no strip run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HopRule {
    /// Not hop-by-hop: kept.
    Keep,
    /// Hop-by-hop, and naming no other header: left out.
    Drop,
    /// A `Connection` that may name other headers: kept, and the map is
    /// stripped once built (rare: `keep-alive` is what upstreams send).
    StripAfter,
}

impl HopRule {
    /// The rule for a header `name` with `value`.
    pub(crate) fn of(name: &HeaderName, value: &[u8]) -> Self {
        match hop_by_hop_index(name) {
            None => Self::Keep,
            Some(0) => {
                let names_none = value.split(|b| *b == b',').all(|token| {
                    let token = token.trim_ascii();
                    token.is_empty() || token.eq_ignore_ascii_case(b"keep-alive")
                });
                if names_none {
                    Self::Drop
                } else {
                    Self::StripAfter
                }
            }
            Some(_) => Self::Drop,
        }
    }
}

/// The index of `name` in [`HOP_BY_HOP`], if it is there. The length and
/// the first byte pick the one candidate (most names have a length no
/// hop-by-hop name has), and one comparison decides (a header name is
/// lower case already).
#[inline]
fn hop_by_hop_index(name: &HeaderName) -> Option<usize> {
    let s = name.as_str();
    let i = candidate(s.len(), s.as_bytes().first().copied())?;
    (HOP_BY_HOP[i].as_str() == s).then_some(i)
}

/// The comma-separated tokens of the `Connection` headers, trimmed.
fn connection_tokens(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
}

/// Whether a `Connection` token names a header that is not hop-by-hop.
fn is_other(token: &str) -> bool {
    !token.is_empty() && token_index(token).is_none()
}

/// [`hop_by_hop_index`] of a `Connection` token, which may be in any case.
fn token_index(token: &str) -> Option<usize> {
    let i = candidate(token.len(), token.as_bytes().first().map(u8::to_ascii_lowercase))?;
    let name = HOP_BY_HOP[i].as_str();
    // Mostly written in lower case (`keep-alive`): compared as it is first.
    (token == name || token.eq_ignore_ascii_case(name)).then_some(i)
}

/// The one hop-by-hop name a name of `len` bytes starting with `first`
/// (lower case) can be.
#[inline]
fn candidate(len: usize, first: Option<u8>) -> Option<usize> {
    Some(match (len, first) {
        (10, Some(b'c')) => 0,
        (10, Some(b'k')) => 1,
        (16, _) => 2,
        (18, _) => 3,
        (19, _) => 4,
        (2, _) => 5,
        (7, Some(b't')) => 6,
        (17, _) => 7,
        (7, Some(b'u')) => 8,
        _ => return None,
    })
}

thread_local! {
    /// The last client address and its `X-Forwarded-For` value, per
    /// server thread: a keep-alive connection sends many requests from one
    /// address, and formatting an IP costs more than the rest of the
    /// header rewriting.
    static LAST_CLIENT: std::cell::RefCell<Option<(IpAddr, HeaderValue)>> =
        const { std::cell::RefCell::new(None) };
}

/// `ip` (canonical: an IPv4-mapped IPv6 address as IPv4) as a header value.
fn client_value(ip: IpAddr) -> Option<HeaderValue> {
    let ip = ip.to_canonical();
    LAST_CLIENT.with(|last| {
        let mut last = last.borrow_mut();
        if let Some((seen, value)) = last.as_ref() {
            if *seen == ip {
                return Some(value.clone());
            }
        }
        let value = HeaderValue::from_maybe_shared(bytes::Bytes::from(ip.to_string())).ok()?;
        *last = Some((ip, value.clone()));
        Some(value)
    })
}

/// Sets the forwarding headers of a request bound for an upstream whose
/// `Host` is `host`: `X-Forwarded-For` gains `client` (appended to what
/// earlier proxies wrote), `X-Forwarded-Proto` is `http`,
/// `X-Forwarded-Host` is the host the client asked for (`original_host`;
/// removed when unknown, so a client cannot plant one), and `Host` is the
/// upstream's authority.
#[cfg(test)]
pub(crate) fn set_forwarding(
    headers: &mut HeaderMap,
    client: Option<IpAddr>,
    original_host: Option<HeaderValue>,
    host: &HeaderValue,
) {
    Forwarding::of(headers, client, original_host, host, false).apply(headers);
}

/// The forwarding headers a request gets on its way upstream (see
/// `set_forwarding`), `X-Forwarded-Proto` `https` when the client came over
/// TLS. Made once, then either set in the request's header map (hyper's
/// exchange) or written with the request head in place of the request's
/// own (`exchange.rs`: no header map insert, four hashed inserts saved).
#[derive(Debug)]
pub(crate) struct Forwarding {
    /// `X-Forwarded-For`, when the client's address is known (else the
    /// request's own, if any, are kept).
    client: Option<HeaderValue>,
    https: bool,
    original_host: Option<HeaderValue>,
    host: HeaderValue,
}

impl Forwarding {
    /// The forwarding headers for a request with `headers`.
    pub(crate) fn of(
        headers: &HeaderMap,
        client: Option<IpAddr>,
        original_host: Option<HeaderValue>,
        host: &HeaderValue,
        https: bool,
    ) -> Self {
        let client = client.and_then(client_value).map(|ip| {
            let earlier: Vec<&[u8]> = headers
                .get_all(&X_FORWARDED_FOR)
                .iter()
                .map(|v| trim_ascii(v.as_bytes()))
                .filter(|v| !v.is_empty())
                .collect();
            if earlier.is_empty() {
                return ip;
            }
            let mut value: Vec<u8> = Vec::new();
            for e in earlier {
                value.extend_from_slice(e);
                value.extend_from_slice(b", ");
            }
            value.extend_from_slice(ip.as_bytes());
            HeaderValue::from_bytes(&value).unwrap_or(ip)
        });
        Self {
            client,
            https,
            original_host,
            host: host.clone(),
        }
    }

    /// `X-Forwarded-Proto`'s value.
    fn proto(&self) -> HeaderValue {
        HeaderValue::from_static(if self.https { "https" } else { "http" })
    }

    /// Sets them in `headers`, replacing the request's own.
    pub(crate) fn apply(self, headers: &mut HeaderMap) {
        let proto = self.proto();
        if let Some(client) = self.client {
            headers.insert(X_FORWARDED_FOR.clone(), client);
        }
        headers.insert(X_FORWARDED_PROTO.clone(), proto);
        match self.original_host {
            Some(original) => {
                headers.insert(X_FORWARDED_HOST.clone(), original);
            }
            None => {
                headers.remove(&X_FORWARDED_HOST);
            }
        }
        headers.insert(header::HOST, self.host);
    }

    /// Whether a request header named `name` gives way to these.
    pub(crate) fn replaces(&self, name: &HeaderName) -> bool {
        let name = name.as_str();
        match name.len() {
            4 => name == "host",
            15 => self.client.is_some() && name == "x-forwarded-for",
            16 => name == "x-forwarded-host",
            17 => name == "x-forwarded-proto",
            _ => false,
        }
    }

    /// Writes them as header lines (`name: value\r\n`) into `out`.
    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        let mut line =
            |name: &str, value: &[u8]| crate::http::wire::write_header_line(out, name.as_bytes(), value);
        line("host", self.host.as_bytes());
        if let Some(client) = &self.client {
            line("x-forwarded-for", client.as_bytes());
        }
        line("x-forwarded-proto", if self.https { b"https" } else { b"http" });
        if let Some(original) = &self.original_host {
            line("x-forwarded-host", original.as_bytes());
        }
    }
}

fn trim_ascii(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |i| i + 1);
    &bytes[start..end]
}

/// A header map of `(name, value)` pairs, repeats kept, for the proxy's unit tests.
#[cfg(test)]
pub(crate) fn test_map(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in pairs {
        headers.append(
            HeaderName::from_bytes(name.as_bytes()).expect("name"),
            HeaderValue::from_str(value).expect("value"),
        );
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::test_map as map;
    use super::*;

    #[test]
    fn hop_by_hop_index_follows_the_list() {
        for (i, name) in HOP_BY_HOP.iter().enumerate() {
            assert_eq!(hop_by_hop_index(name), Some(i), "{name}");
        }
        assert_eq!(hop_by_hop_index(&header::HOST), None);
        assert_eq!(hop_by_hop_index(&HeaderName::from_static("x-connection")), None);
        // Names of a hop-by-hop name's length (and first byte) are not it.
        for name in [
            "user-agent",
            "keep-alives",
            "content-language",
            "x-forwarded-host",
            "if-modified-since",
            "referer",
            "tracing",
            "upgrades",
            "ts",
            "www-authenticate-x",
            "proxy-authorizatio",
        ] {
            assert_eq!(hop_by_hop_index(&HeaderName::from_static(name)), None, "{name}");
        }
    }

    #[test]
    fn connection_tokens_are_read_in_any_case() {
        for token in [
            "keep-alive",
            "KEEP-ALIVE",
            "Upgrade",
            "TE",
            "Transfer-Encoding",
            "close",
        ] {
            let hop = token != "close";
            assert_eq!(!is_other(token), hop, "{token}");
        }
        for token in ["X-Custom", "keep-alives", "tE2", "Upgraded", "Content-Language"] {
            assert!(is_other(token), "{token}");
        }
        assert!(!is_other(""));
    }

    #[test]
    fn an_upgrade_needs_connection_and_upgrade() {
        let both = map(&[("connection", "upgrade"), ("upgrade", "websocket"), ("host", "a")]);
        assert!(HopByHop::of(&both).may_upgrade());
        assert!(!HopByHop::of(&map(&[("upgrade", "websocket")])).may_upgrade());
        assert!(!HopByHop::of(&map(&[("connection", "upgrade")])).may_upgrade());
        assert_eq!(
            HopByHop::of(&map(&[("host", "a"), ("accept", "*/*")])),
            HopByHop(0)
        );
    }

    #[test]
    fn strips_listed_and_connection_named_headers() {
        let mut headers = map(&[
            ("connection", "X-Custom, keep-alive"),
            ("connection", "x-other"),
            ("keep-alive", "timeout=5"),
            ("x-custom", "1"),
            ("x-other", "2"),
            ("te", "trailers"),
            ("trailer", "x-sum"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-authorization", "Basic x"),
            ("proxy-authenticate", "Basic"),
            ("proxy-connection", "keep-alive"),
            ("x-kept", "3"),
            ("content-length", "4"),
        ]);
        strip_hop_by_hop(&mut headers);
        let mut left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["content-length", "x-kept"]);
    }

    /// The header lines of `headers`, sorted (`name: value`).
    fn lines(headers: &HeaderMap) -> Vec<String> {
        let mut lines: Vec<String> = headers
            .iter()
            .map(|(n, v)| format!("{}: {}", n, v.to_str().expect("ascii")))
            .collect();
        lines.sort();
        lines
    }

    /// Written with the head (`exchange.rs`), the forwarding headers give
    /// the upstream the same lines as set in the map (hyper's exchange).
    #[test]
    fn forwarding_written_is_forwarding_applied() {
        let upstream = HeaderValue::from_static("10.0.0.9:9001");
        let client: IpAddr = "192.0.2.1".parse().expect("ip");
        let requests: [&[(&str, &str)]; 4] = [
            &[("host", "gw.example"), ("accept", "*/*")],
            &[
                ("x-forwarded-for", "203.0.113.7"),
                ("x-forwarded-for", "198.51.100.2"),
                ("x-forwarded-proto", "https"),
                ("x-forwarded-host", "evil.example"),
                ("host", "gw.example"),
                ("x-other", "1"),
            ],
            &[("x-forwarded-for", "203.0.113.7")],
            &[],
        ];
        for pairs in requests {
            for client in [None, Some(client)] {
                for original in [None, Some(HeaderValue::from_static("gw.example"))] {
                    for https in [false, true] {
                        let headers = map(pairs);
                        let forwarding = Forwarding::of(&headers, client, original.clone(), &upstream, https);
                        let mut written = Vec::new();
                        for (name, value) in &headers {
                            if !forwarding.replaces(name) {
                                written.push(format!("{}: {}", name, value.to_str().expect("ascii")));
                            }
                        }
                        let mut out = Vec::new();
                        forwarding.write(&mut out);
                        written.extend(
                            String::from_utf8(out)
                                .expect("ascii")
                                .split_terminator("\r\n")
                                .map(str::to_owned),
                        );
                        written.sort();
                        let mut applied = headers.clone();
                        forwarding.apply(&mut applied);
                        assert_eq!(
                            written,
                            lines(&applied),
                            "{pairs:?} {client:?} {original:?} {https}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn forwarding_headers() {
        let upstream = HeaderValue::from_static("10.0.0.9:9001");
        let mut headers = map(&[
            ("x-forwarded-for", "203.0.113.7"),
            ("x-forwarded-for", " 198.51.100.2 "),
            ("x-forwarded-proto", "https"),
            ("host", "gw.example"),
        ]);
        let client: IpAddr = "::ffff:192.0.2.1".parse().expect("ip");
        set_forwarding(
            &mut headers,
            Some(client),
            Some(HeaderValue::from_static("gw.example")),
            &upstream,
        );
        assert_eq!(headers[&X_FORWARDED_FOR], "203.0.113.7, 198.51.100.2, 192.0.2.1");
        assert_eq!(headers.get_all(&X_FORWARDED_FOR).iter().count(), 1);
        assert_eq!(headers[&X_FORWARDED_PROTO], "http");
        assert_eq!(headers[&X_FORWARDED_HOST], "gw.example");
        assert_eq!(headers[header::HOST], "10.0.0.9:9001");

        // The cached value of the last client is not carried to another.
        let mut other = map(&[]);
        let second: IpAddr = "192.0.2.2".parse().expect("ip");
        set_forwarding(&mut other, Some(second), None, &upstream);
        assert_eq!(other[&X_FORWARDED_FOR], "192.0.2.2");
        let mut again = map(&[]);
        set_forwarding(&mut again, Some(client), None, &upstream);
        assert_eq!(again[&X_FORWARDED_FOR], "192.0.2.1");

        let mut planted = map(&[("x-forwarded-host", "evil.example")]);
        set_forwarding(&mut planted, None, None, &upstream);
        assert!(planted.get(&X_FORWARDED_HOST).is_none());
        assert!(planted.get(&X_FORWARDED_FOR).is_none());
    }
}
