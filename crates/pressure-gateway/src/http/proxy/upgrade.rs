//! WebSocket tunnelling: an HTTP/1.1 `Upgrade: websocket` request keeps its
//! `Upgrade` and `Connection: upgrade` headers on the way to the upstream
//! (they are hop-by-hop, so the proxy otherwise drops them); when the
//! upstream answers `101 Switching Protocols`, the `101` goes back to the
//! client with the upstream's `Upgrade` and `Connection: upgrade`, and a
//! spawned task splices the two upgraded connections byte for byte until
//! both directions are closed.
//!
//! Only `websocket` is tunnelled; other protocols named by `Upgrade` (such as
//! `h2c`) are dropped as before, and the request goes on as a plain one. A
//! request that asks for an upgrade on a connection that cannot be upgraded
//! (HTTP/2, or a service called without hyper's upgrade extension) is also
//! forwarded as a plain request.

use http::header::{self, HeaderMap, HeaderValue};
use http::Extensions;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

/// The protocol the proxy tunnels.
const WEBSOCKET: &str = "websocket";

/// An upgrade the client asked for and can carry out: the `Upgrade` value
/// to forward, and the client connection's pending upgrade.
#[derive(Debug)]
pub(crate) struct ClientUpgrade {
    protocol: HeaderValue,
    on_upgrade: OnUpgrade,
}

impl ClientUpgrade {
    /// The upgrade `headers` ask for, if it is a WebSocket one
    /// (`Connection` names `upgrade` and `Upgrade` is `websocket`, case
    /// insensitive) and `extensions` hold the client connection's pending
    /// upgrade, which is taken out of them.
    pub(crate) fn take(headers: &HeaderMap, extensions: &mut Extensions) -> Option<Self> {
        let protocol = websocket_upgrade(headers)?;
        let on_upgrade = extensions.remove::<OnUpgrade>()?;
        Some(Self { protocol, on_upgrade })
    }

    /// Puts `Connection: upgrade` and the requested `Upgrade` back on the
    /// request headers bound for the upstream (after the hop-by-hop headers
    /// were stripped).
    pub(crate) fn restore_request_headers(&self, headers: &mut HeaderMap) {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, self.protocol.clone());
    }

    /// Completes the upgrade after the upstream answered `101`: puts the
    /// upstream's `Upgrade` (the requested one if it sent none) and
    /// `Connection: upgrade` on the response headers bound for the client
    /// (after the hop-by-hop headers were stripped), and spawns the task
    /// that splices the client's connection with `upstream`'s once hyper has
    /// handed both over.
    pub(crate) fn tunnel(
        self,
        upstream_name: &str,
        upstream_protocol: Option<HeaderValue>,
        upstream: OnUpgrade,
        response_headers: &mut HeaderMap,
    ) {
        response_headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        response_headers.insert(header::UPGRADE, upstream_protocol.unwrap_or(self.protocol));
        let name = upstream_name.to_owned();
        let client = self.on_upgrade;
        tokio::spawn(async move {
            let (client, upstream) = match tokio::try_join!(client, upstream) {
                Ok(both) => both,
                Err(error) => {
                    tracing::debug!(upstream = name, %error, "upgrade did not complete");
                    return;
                }
            };
            let mut client = TokioIo::new(client);
            let mut upstream = TokioIo::new(upstream);
            match tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
                Ok((to_upstream, to_client)) => {
                    tracing::debug!(upstream = name, to_upstream, to_client, "tunnel closed");
                }
                Err(error) => {
                    tracing::debug!(upstream = name, %error, "tunnel failed");
                }
            }
        });
    }
}

/// The `Upgrade` value of a WebSocket upgrade request: `Connection` names
/// the `upgrade` token and `Upgrade` is `websocket`.
pub(crate) fn websocket_upgrade(headers: &HeaderMap) -> Option<HeaderValue> {
    let connection_upgrade = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"));
    if !connection_upgrade {
        return None;
    }
    let mut upgrades = headers.get_all(header::UPGRADE).iter();
    let value = upgrades.next()?;
    if upgrades.next().is_some() {
        return None;
    }
    let is_websocket = value
        .to_str()
        .ok()
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(WEBSOCKET));
    is_websocket.then(|| value.clone())
}

#[cfg(test)]
mod tests {
    use super::super::headers::test_map as map;
    use super::*;

    #[test]
    fn recognises_websocket_upgrades_only() {
        let ws = |pairs: &[(&str, &str)]| websocket_upgrade(&map(pairs));
        assert_eq!(
            ws(&[("connection", "Upgrade"), ("upgrade", "websocket")]).as_ref(),
            Some(&HeaderValue::from_static("websocket"))
        );
        assert!(ws(&[("connection", "keep-alive, UPGRADE"), ("upgrade", "WebSocket")]).is_some());
        assert!(ws(&[
            ("connection", "keep-alive"),
            ("connection", "upgrade"),
            ("upgrade", "websocket")
        ])
        .is_some());
        assert!(
            ws(&[("upgrade", "websocket")]).is_none(),
            "no Connection: upgrade"
        );
        assert!(ws(&[("connection", "upgrade")]).is_none(), "no Upgrade");
        assert!(ws(&[("connection", "upgrade"), ("upgrade", "h2c")]).is_none());
        assert!(ws(&[("connection", "upgrade"), ("upgrade", "websocket, h2c")]).is_none());
        assert!(ws(&[
            ("connection", "upgrade"),
            ("upgrade", "websocket"),
            ("upgrade", "h2c")
        ])
        .is_none());
        assert!(ws(&[("connection", "upgraded"), ("upgrade", "websocket")]).is_none());
    }

    #[test]
    fn no_client_upgrade_without_the_pending_upgrade() {
        let headers = map(&[("connection", "upgrade"), ("upgrade", "websocket")]);
        let mut extensions = Extensions::new();
        assert!(ClientUpgrade::take(&headers, &mut extensions).is_none());
    }
}
