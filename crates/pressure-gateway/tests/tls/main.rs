//! TLS end to end, with certificates made at test time (`rcgen`): the
//! gateway's listener over TLS (HTTP/1.1 and h2 by ALPN, the admin listener
//! too), a plain-HTTP client and a silent client on the TLS port, the
//! certificate swapped by a reload (and kept when the new one is bad), an
//! `https://` upstream verified with a private CA (and a 502 without it),
//! `check-config` refusals naming their JSON path, and a `rediss://`
//! backend against a TLS redis-server (skipped only when the redis-server
//! itself says it has no TLS; `PRESSURE_REQUIRE_REDIS_TLS=1` makes that a
//! failure).

mod client;
mod pki;
mod support;

use pki::{Ca, Scratch};
use pressure_gateway::config::{self, ConfigError};
use pressure_gateway::ServerTls;
use serde_json::{json, Value};
use std::time::Duration;
use support::{bounded, echo_proto, plain_get, read_until_closed, serve, tls_section, TlsGateway};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_listener_serves_http1_and_h2_by_alpn() {
    bounded(async {
        let scratch = Scratch::new();
        let ca = Ca::new("pressure test CA");
        let leaf = ca.leaf("gateway one");
        scratch.write_leaf("server", &leaf);
        let (up, _up_stop) = serve(echo_proto(), None).await;
        let gw = TlsGateway::start(&scratch, tls_section(up, json!({}))).await;

        let h1 = client::get(gw.addr, client::config(&ca.pem(), &[b"http/1.1"]), "/x")
            .await
            .expect("HTTP/1.1 over TLS");
        assert_eq!(h1.status, 200, "{h1:?}");
        assert_eq!(h1.alpn.as_deref(), Some(&b"http/1.1"[..]));
        assert_eq!(
            h1.body, "proto=https",
            "the upstream is told the client came over TLS"
        );
        assert_eq!(h1.cert, leaf.der);

        let h2 = client::get(gw.addr, client::config(&ca.pem(), &[b"h2", b"http/1.1"]), "/x")
            .await
            .expect("h2 over TLS");
        assert_eq!(h2.status, 200, "{h2:?}");
        assert_eq!(h2.alpn.as_deref(), Some(&b"h2"[..]));
        assert_eq!(h2.body, "proto=https");

        let admin = client::get(gw.admin, client::config(&ca.pem(), &[b"http/1.1"]), "/healthz")
            .await
            .expect("admin over TLS");
        assert_eq!(admin.status, 200, "{admin:?}");

        // A client that does not trust the CA is refused by its own check.
        let other = Ca::new("another CA");
        let refused = client::get(gw.addr, client::config(&other.pem(), &[b"http/1.1"]), "/x").await;
        assert!(refused.is_err(), "{refused:?}");
        gw.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_and_silent_clients_on_the_tls_port_are_closed() {
    bounded(async {
        let scratch = Scratch::new();
        let ca = Ca::new("pressure test CA");
        scratch.write_leaf("server", &ca.leaf("gateway"));
        let (up, _up_stop) = serve(echo_proto(), None).await;
        let timeouts = json!({ "headerReadMs": 400, "idleMs": 60000 });
        let gw = TlsGateway::start(&scratch, tls_section(up, timeouts)).await;

        // Plain HTTP: no HTTP answer, the connection closes.
        let mut plain = TcpStream::connect(gw.addr).await.expect("connect");
        plain
            .write_all(b"GET /x HTTP/1.1\r\nHost: gw\r\n\r\n")
            .await
            .expect("write");
        let (got, _) = read_until_closed(&mut plain, Duration::from_secs(5)).await;
        assert!(!got.starts_with(b"HTTP/"), "{:?}", String::from_utf8_lossy(&got));

        // Connects and never sends a ClientHello: closed by headerReadMs,
        // long before idleMs.
        let mut silent = TcpStream::connect(gw.addr).await.expect("connect");
        let (got, took) = read_until_closed(&mut silent, Duration::from_secs(5)).await;
        assert!(got.is_empty(), "{got:?}");
        assert!(took >= Duration::from_millis(300), "closed too early: {took:?}");

        // The listener still serves TLS clients.
        let ok = client::get(gw.addr, client::config(&ca.pem(), &[b"http/1.1"]), "/x")
            .await
            .expect("TLS after the bad clients");
        assert_eq!(ok.status, 200);
        gw.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_swaps_the_certificate_and_a_bad_one_keeps_the_old() {
    bounded(async {
        let scratch = Scratch::new();
        let ca = Ca::new("pressure test CA");
        let first = ca.leaf("first");
        scratch.write_leaf("server", &first);
        let (up, _up_stop) = serve(echo_proto(), None).await;
        let gw = TlsGateway::start(&scratch, tls_section(up, json!({}))).await;
        let cfg = client::config(&ca.pem(), &[b"http/1.1"]);
        let seen = client::get(gw.addr, cfg.clone(), "/x").await.expect("first");
        assert_eq!(seen.cert, first.der);

        // Same config file, new certificate files: a reload picks them up.
        let second = ca.leaf("second");
        scratch.write_leaf("server", &second);
        gw.gateway.reload().expect("reload with a good certificate");
        let seen = client::get(gw.addr, cfg.clone(), "/x").await.expect("second");
        assert_eq!(seen.cert, second.der, "a new connection sees the new certificate");

        // A certificate that does not parse: the reload is refused, naming
        // the JSON path, and the second certificate serves on.
        scratch.write(
            "server.crt",
            "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n",
        );
        let err = gw.gateway.reload().expect_err("a bad certificate is refused");
        assert_eq!(err.path, "gateway.tls.certFile", "{err}");
        // A key that belongs to another certificate: refused too.
        scratch.write("server.crt", &second.cert_pem);
        scratch.write("server.key", &first.key_pem);
        let err = gw.gateway.reload().expect_err("a mismatched key is refused");
        assert_eq!(err.path, "gateway.tls.keyFile", "{err}");
        let seen = client::get(gw.addr, cfg.clone(), "/x")
            .await
            .expect("after bad reloads");
        assert_eq!(seen.status, 200);
        assert_eq!(seen.cert, second.der, "the old certificate is kept");

        // Turning TLS off is a restart, not a reload.
        scratch.write("server.key", &second.key_pem);
        let mut plain: Value =
            serde_json::from_str(&std::fs::read_to_string(&gw.file).expect("read")).expect("json");
        plain["gateway"].as_object_mut().expect("section").remove("tls");
        std::fs::write(&gw.file, plain.to_string()).expect("write");
        let err = gw.gateway.reload().expect_err("tls off needs a restart");
        assert_eq!(err.path, "gateway.tls", "{err}");
        gw.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstream_is_verified_with_its_ca_file() {
    bounded(async {
        let scratch = Scratch::new();
        let ca = Ca::new("upstream CA");
        let leaf = ca.leaf("upstream");
        scratch.write_leaf("up", &leaf);
        scratch.write("up-ca.pem", &ca.pem());
        let up_tls = ServerTls::load(
            &config::ListenerTlsConfig {
                cert_file: scratch.path("up.crt").to_string_lossy().into_owned(),
                key_file: scratch.path("up.key").to_string_lossy().into_owned(),
            },
            scratch.dir(),
            "upstream",
        )
        .expect("upstream tls");
        let (up, _up_stop) = serve(echo_proto(), Some(up_tls)).await;

        let with_ca = TlsGateway::start(
            &scratch,
            json!({ "upstreams": { "secure": {
                "url": format!("https://{up}"), "pathPrefix": "/",
                "tls": { "caFile": "up-ca.pem" } } } }),
        )
        .await;
        let got = plain_get(with_ca.addr, "/x").await;
        assert!(got.starts_with("HTTP/1.1 200"), "{got}");
        assert!(got.ends_with("proto=http"), "{got}");
        with_ca.stop().await;

        // Without the CA the public roots do not know the upstream: 502 in
        // the gateway's error shape.
        let without = TlsGateway::start(
            &scratch,
            json!({ "upstreams": { "secure": { "url": format!("https://{up}"), "pathPrefix": "/" } } }),
        )
        .await;
        let got = plain_get(without.addr, "/x").await;
        assert!(got.starts_with("HTTP/1.1 502"), "{got}");
        let body = got.split("\r\n\r\n").nth(1).unwrap_or_default();
        let body: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {got}"));
        assert_eq!(body["error"]["type"], "upstream_unavailable", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("certificate"),
            "{body}"
        );
        without.stop().await;
    })
    .await;
}

/// `check-config` of `{"gateway": section}` written into `scratch`.
fn check(scratch: &Scratch, section: Value) -> Result<(), ConfigError> {
    let mut section = section;
    section["listen"] = json!("127.0.0.1:18080");
    let file = scratch.write("check.json", &json!({ "gateway": section }).to_string());
    config::load(&file).map(|_| ())
}

#[test]
fn check_config_refuses_tls_files_that_cannot_work() {
    let scratch = Scratch::new();
    let ca = Ca::new("CA");
    let leaf = ca.leaf("server");
    scratch.write_leaf("server", &leaf);
    scratch.write("ca.pem", &ca.pem());
    scratch.write("garbage.pem", "this is not PEM\n");
    let up = |tls: Value| json!({ "upstreams": { "api": { "url": "https://127.0.0.1:9443", "pathPrefix": "/", "tls": tls } } });
    let plain = json!({ "api": { "url": "http://127.0.0.1:9001", "pathPrefix": "/" } });

    // What works: relative names resolve against the config file's directory.
    check(&scratch, up(json!({ "caFile": "ca.pem" }))).expect("a good CA file");
    let mut ok = json!({ "tls": { "certFile": "server.crt", "keyFile": "server.key" } });
    ok["upstreams"] = plain.clone();
    check(&scratch, ok).expect("a good certificate");

    let cases: Vec<(Value, &str)> = vec![
        (
            up(json!({ "caFile": "garbage.pem" })),
            "gateway.upstreams.api.tls.caFile",
        ),
        (
            up(json!({ "caFile": "missing.pem" })),
            "gateway.upstreams.api.tls.caFile",
        ),
        (
            json!({ "upstreams": { "api": { "url": "http://127.0.0.1:9001", "pathPrefix": "/", "tls": { "caFile": "ca.pem" } } } }),
            "gateway.upstreams.api.tls",
        ),
        (
            json!({ "upstreams": plain.clone(), "tls": { "certFile": "garbage.pem", "keyFile": "server.key" } }),
            "gateway.tls.certFile",
        ),
        (
            json!({ "upstreams": plain.clone(), "tls": { "certFile": "server.crt", "keyFile": "ca.pem" } }),
            "gateway.tls.keyFile",
        ),
        (
            json!({ "upstreams": plain.clone(), "admin": { "tls": { "certFile": "server.crt" } } }),
            "gateway.admin.tls.keyFile",
        ),
        (
            json!({ "upstreams": plain.clone(), "backend": { "type": "redis", "url": "redis://127.0.0.1:6379", "tls": {} } }),
            "gateway.backend.tls",
        ),
        (
            json!({ "upstreams": plain.clone(), "backend": { "type": "redis", "url": "rediss://127.0.0.1:6379", "tls": { "caFile": "garbage.pem" } } }),
            "gateway.backend.tls.caFile",
        ),
        (
            json!({ "upstreams": plain.clone(), "backend": { "type": "redis", "url": "rediss://127.0.0.1:6379/#insecure" } }),
            "gateway.backend.url",
        ),
        (
            json!({ "upstreams": plain.clone(), "backend": { "type": "redis",
                    "clusterNodes": ["rediss://127.0.0.1:7000", "redis://127.0.0.1:7001"] } }),
            "gateway.backend.clusterNodes[1]",
        ),
        (
            json!({ "upstreams": {
                "api": { "url": "https://127.0.0.1:9443", "pathPrefix": "/a", "tls": { "caFile": "ca.pem" } },
                "b": { "url": "https://127.0.0.1:9443", "pathPrefix": "/b" } } }),
            "gateway.upstreams.b.tls",
        ),
    ];
    for (section, path) in cases {
        let err = check(&scratch, section.clone()).expect_err(&format!("refused: {section}"));
        assert_eq!(err.path, path, "{err} for {section}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_backend_enforces_limits_over_tls() {
    let scratch = Scratch::new();
    let ca = Ca::new("redis CA");
    scratch.write_leaf("redis", &ca.leaf("redis"));
    scratch.write("redis-ca.pem", &ca.pem());
    let files = pressure_testkit::TlsFiles {
        cert: scratch.path("redis.crt"),
        key: scratch.path("redis.key"),
        ca: scratch.path("redis-ca.pem"),
    };
    // Only a server that says it has no TLS is a skip (the testkit reads
    // its words, not the argument list); any other start error fails.
    let redis = match pressure_testkit::RedisServer::try_start_tls(&files) {
        Ok(r) => r,
        Err(e) if e.starts_with("this redis-server has no TLS") => {
            pressure_testkit::skip(
                "tls::rediss_backend_enforces_limits_over_tls",
                "PRESSURE_REQUIRE_REDIS_TLS",
                &e,
            );
            return;
        }
        Err(e) => panic!("the TLS redis-server did not start: {e}"),
    };
    bounded(async {
        let url = redis.url();
        assert!(url.starts_with("rediss://"), "{url}");

        // Without the CA the public roots do not know the server.
        let untrusted = pressure_redis::RedisConfig::new(url.clone());
        let err = pressure_redis::connect(&untrusted, Duration::from_secs(1))
            .await
            .err()
            .expect("an unknown CA is refused");
        assert!(err.to_string().to_lowercase().contains("certificate"), "{err}");

        // With it, limits are kept in that Redis: the second request within
        // the second is refused (an unusable store would be a 503 instead).
        let (up, _up_stop) = serve(echo_proto(), None).await;
        let gw = TlsGateway::start(
            &scratch,
            json!({
                "upstreams": { "echo": { "url": format!("http://{up}"), "pathPrefix": "/" } },
                "backend": { "type": "redis", "url": url, "timeoutMs": 1000,
                             "connectTimeoutMs": 2000, "tls": { "caFile": "redis-ca.pem" } },
                "pressure": { "perRoute": [{ "resource": "gateway:route:tls", "pathPrefix": "/",
                                             "limits": { "requestsPerMinute": 1 } }] },
            }),
        )
        .await;
        let status = gw.gateway.redis().expect("redis backend").status();
        assert!(status.healthy, "{status:?}");
        let first = plain_get(gw.addr, "/x").await;
        assert!(first.starts_with("HTTP/1.1 200"), "{first}");
        let second = plain_get(gw.addr, "/x").await;
        assert!(second.starts_with("HTTP/1.1 429"), "{second}");
        gw.stop().await;
    })
    .await;
}
