//! The decision listener of a [`TestGateway`]: bound on `127.0.0.1:0`
//! before the gateway is built (its address goes into
//! `gateway.decisions.listen`), served beside the proxy and admin
//! listeners, stopped by the test.

use super::support::{Reply, TestGateway};
use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use pressure_gateway::Serving;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;

/// A gateway with its decision listener.
pub(crate) struct Decisions {
    pub(crate) gw: TestGateway,
    pub(crate) addr: SocketAddr,
    serving: Option<Serving>,
}

impl Decisions {
    /// Starts the gateway of `section` (its `decisions` object, if any, is
    /// kept; `listen` is filled in).
    pub(crate) async fn start(mut section: Value) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind decisions");
        let addr = listener.local_addr().expect("decisions addr");
        if section.get("decisions").is_none() {
            section["decisions"] = json!({});
        }
        section["decisions"]["listen"] = json!(addr.to_string());
        let gw = TestGateway::start(section).await;
        let serving = gw.gateway().spawn_decisions(listener);
        Self {
            gw,
            addr,
            serving: Some(serving),
        }
    }

    /// `POST path` with a JSON `body` (sent as is when it is a string) and
    /// `headers`, body read.
    pub(crate) async fn post(&self, path: &str, body: &Value, headers: &[(&str, &str)]) -> Reply {
        let bytes = match body {
            Value::String(s) => Bytes::from(s.clone()),
            Value::Null => Bytes::new(),
            other => Bytes::from(other.to_string()),
        };
        let mut b =
            Request::post(format!("http://{}{path}", self.addr)).header("content-type", "application/json");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let req = b.body(Full::new(bytes)).expect("request");
        Reply::read(self.gw.send(req).await).await
    }

    /// `POST /v1/acquire` with `body`.
    pub(crate) async fn acquire(&self, body: Value) -> Reply {
        self.post("/v1/acquire", &body, &[]).await
    }

    /// `POST /v1/permits/{id}/{action}`, no body.
    pub(crate) async fn permit(&self, id: &str, action: &str) -> Reply {
        self.post(&format!("/v1/permits/{id}/{action}"), &Value::Null, &[])
            .await
    }

    /// Stops the decision listener, then the gateway.
    pub(crate) async fn stop(mut self) {
        if let Some(s) = self.serving.take() {
            assert!(
                s.stop(Duration::from_secs(5)).await,
                "the decision listener did not stop"
            );
        }
        self.gw.stop().await;
    }
}

/// A gateway section with one upstream (never called) and the given
/// `pressure.resources`.
pub(crate) fn with_resources(resources: Value) -> Value {
    json!({
        "upstreams": { "app": { "url": "http://127.0.0.1:9", "pathPrefix": "/" } },
        "pressure": { "resources": resources },
    })
}

/// The permit id of a granted acquisition (checked to be 128 bits in hex).
pub(crate) fn permit_of(reply: &Reply) -> String {
    assert_eq!(reply.status, 200, "{:?}", reply.json());
    let body = reply.json();
    assert_eq!(body["allowed"], true);
    let id = body["permit"]
        .as_str()
        .unwrap_or_else(|| panic!("no permit in {body}"));
    assert_eq!(id.len(), 32, "{id}");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    id.to_owned()
}
