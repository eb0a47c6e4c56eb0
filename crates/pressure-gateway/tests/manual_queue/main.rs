//! The durable manual queue against a real Redis (the test binary's own
//! `redis-server` from `pressure-testkit`, or `PRESSURE_REDIS_URL`; the
//! tests FAIL when none can be had): push/list
//! order and content, drain with and without acknowledgement, and a gateway
//! on the redis backend parking a request whose primary fails.

use axum::routing::post;
use axum::{Json, Router};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use pressure_gateway::manual_queue::{stream_key, RedisManualQueue};
use pressure_gateway::Gateway;
use pressure_llm::pipeline::ManualQueue;
use pressure_llm::provider::ChatRequest;
use pressure_redis::RedisConfig;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;
use tokio::net::TcpListener;

fn redis_url() -> String {
    pressure_testkit::redis_url()
}

/// A Redis config with a key prefix of its own; panics when Redis does not answer.
async fn redis_config(test: &str) -> RedisConfig {
    let url = redis_url();
    let client = redis::Client::open(url.as_str()).expect("redis url");
    let mut conn = tokio::time::timeout(Duration::from_secs(2), client.get_multiplexed_async_connection())
        .await
        .unwrap_or_else(|_| panic!("no Redis answers at {url}"))
        .unwrap_or_else(|e| panic!("no Redis answers at {url}: {e}"));
    let _: String = redis::cmd("PING").query_async(&mut conn).await.expect("PING");
    // Random per call (no wall clock needed).
    let nanos = {
        use std::hash::{BuildHasher, Hasher};
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    };
    RedisConfig {
        url,
        key_prefix: format!("mqtest-{test}-{}-{nanos}", std::process::id()),
        ..RedisConfig::default()
    }
}

async fn cleanup(config: &RedisConfig) {
    let client = redis::Client::open(config.url.as_str()).expect("redis url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("connect");
    let _: i64 = redis::cmd("DEL")
        .arg(stream_key(&config.key_prefix))
        .query_async(&mut conn)
        .await
        .expect("DEL");
}

fn request(text: &str) -> ChatRequest {
    serde_json::from_value(json!({
        "model": "support",
        "messages": [ { "role": "user", "content": text } ]
    }))
    .expect("chat request")
}

async fn bounded<F: std::future::Future<Output = ()>>(test: F) {
    tokio::time::timeout(Duration::from_secs(30), test)
        .await
        .expect("test exceeded its time bound");
}

#[tokio::test]
async fn pushed_requests_are_listed_in_order() {
    bounded(async {
        let cfg = redis_config("list").await;
        let q = RedisManualQueue::new(&cfg);
        let mut tickets = Vec::new();
        for i in 0..3 {
            let t = q
                .push("support", &request(&format!("hello {i}")))
                .await
                .expect("push");
            assert!(t.starts_with("mq-"), "{t}");
            tickets.push(t);
        }
        let items = q.list(10).await.expect("list");
        assert_eq!(items.len(), 3);
        for (i, item) in items.iter().enumerate() {
            assert_eq!(item.ticket, tickets[i]);
            assert_eq!(item.use_case, "support");
            assert_eq!(item.request["messages"][0]["content"], format!("hello {i}"));
            assert_eq!(item.request["model"], "support");
            assert!(item.enqueued_at > 0);
        }
        assert_eq!(q.list(2).await.expect("list").len(), 2);
        assert_eq!(q.len().await.expect("len"), 3);
        cleanup(&cfg).await;
    })
    .await;
}

#[tokio::test]
async fn drain_with_ack_removes_and_without_ack_redelivers() {
    bounded(async {
        let cfg = redis_config("drain").await;
        let q = RedisManualQueue::new(&cfg);
        let mut tickets = Vec::new();
        for i in 0..3 {
            tickets.push(q.push("support", &request(&format!("m{i}"))).await.expect("push"));
        }
        // Acknowledged: gone from the stream.
        let drained = q.drain("worker", 2, true).await.expect("drain");
        assert_eq!(
            drained.iter().map(|i| &i.ticket).collect::<Vec<_>>(),
            vec![&tickets[0], &tickets[1]]
        );
        let left = q.list(10).await.expect("list");
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].ticket, tickets[2]);
        // Not acknowledged: still listed, delivered again to the same consumer.
        let peek = q.drain("worker", 5, false).await.expect("drain");
        assert_eq!(peek.len(), 1);
        assert_eq!(peek[0].ticket, tickets[2]);
        assert_eq!(q.list(10).await.expect("list").len(), 1);
        // Another consumer does not get it (pending on "worker").
        assert!(q.drain("other", 5, true).await.expect("drain").is_empty());
        let again = q.drain("worker", 5, true).await.expect("drain");
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].request["messages"][0]["content"], "m2");
        assert!(q.list(10).await.expect("list").is_empty());
        assert!(q.drain("worker", 5, true).await.expect("drain").is_empty());
        cleanup(&cfg).await;
    })
    .await;
}

#[tokio::test]
async fn a_gateway_on_redis_parks_in_the_durable_queue() {
    bounded(async {
        let cfg = redis_config("gateway").await;
        // A provider that always fails.
        let app = Router::new().route(
            "/v1/chat/completions",
            post(|| async {
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    Json(json!({"error": {"message": "mock failure", "type": "server_error"}})),
                )
            }),
        );
        let mock = TcpListener::bind("127.0.0.1:0").await.expect("bind mock");
        let mock_addr = mock.local_addr().expect("addr");
        let mock_task = tokio::spawn(async move {
            let _ = axum::serve(mock, app).await;
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind admin");
        let addr = listener.local_addr().expect("addr");
        let section = json!({
            "listen": addr.to_string(),
            "admin": { "listen": admin.local_addr().expect("addr").to_string() },
            "backend": { "type": "redis", "url": cfg.url, "keyPrefix": cfg.key_prefix },
            "upstreams": { "api": { "url": format!("http://{mock_addr}"), "pathPrefix": "/api" } },
            "llm": {
                "providers": { "mock": { "baseUrl": format!("http://{mock_addr}/v1") } },
                "models": [ { "provider": "mock", "model": "bad",
                              "context": { "contextTokens": 8192, "maxOutputTokens": 512 } } ],
                "useCases": {
                    "support": { "chain": [ { "model": "mock/bad" }, { "manualQueue": true } ],
                                 "retry": { "maxAttempts": 1 } }
                }
            }
        });
        let text = json!({ "gateway": section }).to_string();
        let config = pressure_gateway::config::parse_in(&text, Path::new("."))
            .unwrap_or_else(|e| panic!("invalid test config: {e}\n{text}"));
        let gateway = Gateway::build(config, Path::new("."))
            .await
            .expect("gateway builds");
        let serving = gateway.spawn(listener, admin);
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let body = json!({"model": "support", "messages": [ { "role": "user", "content": "help me" } ]});
        let req = Request::post(format!("http://{addr}/v1/chat/completions"))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("request");
        let resp = client.request(req).await.expect("gateway answers");
        let status = resp.status();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        let answer: Value = serde_json::from_slice(&bytes).expect("JSON");
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
        // A chat completion an SDK parses, whose id is the ticket.
        assert_eq!(answer["object"], "chat.completion");
        assert_eq!(answer["pressure"]["ticket"], answer["id"]);
        let ticket = answer["id"].as_str().expect("ticket").to_owned();
        assert!(ticket.starts_with("mq-"), "{ticket}");

        let q = RedisManualQueue::new(&cfg);
        let items = q.list(10).await.expect("list");
        assert_eq!(items.len(), 1, "{items:?}");
        assert_eq!(items[0].ticket, ticket);
        assert_eq!(items[0].use_case, "support");
        assert_eq!(items[0].request["messages"][0]["content"], "help me");

        serving.stop(Duration::from_secs(10)).await;
        mock_task.abort();
        cleanup(&cfg).await;
    })
    .await;
}
