//! The provider client behind the HTTP proxy its environment names
//! (`HTTP_PROXY` and friends, as reqwest and curl read them): calls go
//! through a `CONNECT` tunnel with the proxy URL's credentials, `NO_PROXY`
//! exempts a host, and a proxy that refuses the tunnel is a connection
//! error. Its own test binary: it sets the process's proxy variables.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::post;
use axum::{Json, Router};
use pressure_llm::provider::{
    ChatRequest, Message, ProviderClient, ProviderConfig, ProviderSettings, TimeoutsConfig,
};
use pressure_llm::taxonomy::ErrorKind;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// One `CONNECT` the proxy saw: its target and `Proxy-Authorization`.
#[derive(Debug, Clone, PartialEq)]
struct Tunnelled {
    target: String,
    auth: Option<String>,
}

/// A provider answering every chat completion with the same completion.
async fn provider() -> String {
    let app = Router::new().route(
        "/v1/chat/completions",
        post(|| async {
            Json(json!({
                "id": "c1", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "via"},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
            }))
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/v1")
}

/// A `CONNECT` proxy on 127.0.0.1 that records each tunnel and then
/// relays bytes both ways, or refuses every tunnel with 403.
async fn proxy(refuse: bool) -> (String, Arc<Mutex<Vec<Tunnelled>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let mut reader = BufReader::new(client);
                let mut line = String::new();
                reader.read_line(&mut line).await.unwrap();
                let target = line.split_whitespace().nth(1).unwrap_or_default().to_owned();
                let mut auth = None;
                loop {
                    let mut header = String::new();
                    reader.read_line(&mut header).await.unwrap();
                    let header = header.trim_end();
                    if header.is_empty() {
                        break;
                    }
                    if let Some((name, value)) = header.split_once(':') {
                        if name.eq_ignore_ascii_case("proxy-authorization") {
                            auth = Some(value.trim().to_owned());
                        }
                    }
                }
                log.lock().unwrap().push(Tunnelled {
                    target: target.clone(),
                    auth,
                });
                let mut client = reader.into_inner();
                if refuse {
                    let _ = client
                        .write_all(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")
                        .await;
                    return;
                }
                let mut upstream = TcpStream::connect(&target).await.unwrap();
                client
                    .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                    .await
                    .unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    (addr.to_string(), seen)
}

fn client(base: &str) -> ProviderClient {
    ProviderClient::new(ProviderConfig {
        name: "behind-proxy".into(),
        settings: ProviderSettings {
            kind: Default::default(),
            model_dir: None,
            base_url: base.into(),
            api_key_env: None,
            timeouts: TimeoutsConfig {
                connect_ms: 2_000,
                write_ms: 2_000,
                first_byte_ms: 2_000,
                read_ms: 2_000,
                pool_wait_ms: 2_000,
                max_connections: 4,
            },
        },
    })
    .unwrap()
}

fn request() -> ChatRequest {
    ChatRequest::new("m", vec![Message::new("user", "Hi")])
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

fn set_proxy(url: &str, no_proxy: &str) {
    for name in [
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
        "HTTPS_PROXY",
        "https_proxy",
    ] {
        std::env::remove_var(name);
    }
    std::env::set_var("HTTP_PROXY", url);
    std::env::set_var("NO_PROXY", no_proxy);
    std::env::remove_var("no_proxy");
}

#[tokio::test]
async fn calls_go_through_the_proxy_the_environment_names() {
    let base = provider().await;
    let provider_addr = base
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_owned();

    // Through the proxy, with the credentials of its URL as basic auth; a
    // second call reuses the tunnelled connection.
    let (proxy_addr, tunnels) = proxy(false).await;
    set_proxy(&format!("http://alice:secret@{proxy_addr}"), "");
    let c = client(&base);
    for _ in 0..2 {
        let done = c.complete(&request(), far()).await.unwrap();
        assert_eq!(done.response.choices[0].message.text(), "via");
    }
    assert_eq!(
        *tunnels.lock().unwrap(),
        vec![Tunnelled {
            target: provider_addr.clone(),
            auth: Some("Basic YWxpY2U6c2VjcmV0".into()),
        }]
    );

    // NO_PROXY exempts the provider's host: a client built now connects
    // directly.
    set_proxy(&format!("http://{proxy_addr}"), "127.0.0.1");
    let direct = client(&base);
    let done = direct.complete(&request(), far()).await.unwrap();
    assert_eq!(done.response.choices[0].message.text(), "via");
    assert_eq!(tunnels.lock().unwrap().len(), 1, "no tunnel for an exempt host");

    // A proxy that refuses the tunnel: the call fails as a connection
    // error (retryable, like a refused connection), never reaching the
    // provider on its own.
    let (refusing, refused) = proxy(true).await;
    set_proxy(&format!("http://{refusing}"), "");
    let err = client(&base).complete(&request(), far()).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Connection, "{err:?}");
    assert_eq!(
        refused.lock().unwrap().len(),
        1,
        "the refusing proxy was asked once"
    );
}
