//! JWT authentication end to end, over real sockets: a gateway built with
//! `Gateway::build` from a config JSON naming its bound `127.0.0.1:0`
//! listeners, the demo upstream behind it, and a hyper client. Every case
//! runs for HS256 (the secret in an environment variable named per test) and
//! for RS256 (the test-only key pair in `tests/auth/fixtures/`).
//!
//! Each refused request is checked exactly: `401`, `WWW-Authenticate:
//! Bearer`, a JSON body of `"type":"unauthorized"` — never a `500` — and
//! `pressure_gateway_unauthorized_total` on the admin listener's `/metrics`
//! counts it under its reason.

use bytes::Bytes;
use http::{header, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use pressure_gateway::Gateway;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Upper bound on any one test.
const TEST_BOUND: Duration = Duration::from_secs(30);

/// `auth.jwt.leewaySecs` of every gateway here.
const LEEWAY_SECS: u64 = 30;

/// Audience and issuer of the gateways that require them.
const AUDIENCE: &str = "pressure-api";
const ISSUER: &str = "https://auth.example.test";

/// Serialises setting environment variables with reading them (config
/// validation and `Gateway::build` read the secret): tests run on several
/// threads at once.
static ENV_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn bounded<F: Future<Output = ()>>(test: F) {
    tokio::time::timeout(TEST_BOUND, test)
        .await
        .expect("test exceeded its time bound");
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/auth/fixtures")
}

fn fixture(name: &str) -> Vec<u8> {
    let path = fixtures().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Seconds since the epoch, by the clock the verifier reads.
fn now() -> u64 {
    jsonwebtoken::get_current_timestamp()
}

/// Base64url without padding (RFC 7515 §2).
fn b64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// Valid claims naming `tenant` (any JSON value), expiring in ten minutes.
fn claims(tenant: Value) -> Value {
    let now = now();
    json!({ "sub": "user-1", "namespaceId": tenant, "iat": now, "exp": now + 600 })
}

/// Sets (or replaces) `key` in the claims object.
fn with(mut claims: Value, key: &str, value: Value) -> Value {
    claims[key] = value;
    claims
}

/// Removes `key` from the claims object.
fn without(mut claims: Value, key: &str) -> Value {
    claims.as_object_mut().expect("claims object").remove(key);
    claims
}

fn sign(alg: Algorithm, key: &EncodingKey, claims: &Value) -> String {
    jsonwebtoken::encode(&Header::new(alg), claims, key).expect("sign token")
}

/// `header.payload.` with `{"alg":"none"}`: no signature at all.
fn unsigned(claims: &Value) -> String {
    format!(
        "{}.{}.",
        b64url(br#"{"alg":"none","typ":"JWT"}"#),
        b64url(claims.to_string().as_bytes())
    )
}

/// `token` with its payload replaced by `claims`, header and signature kept.
fn tampered(token: &str, claims: &Value) -> String {
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "a JWS compact token");
    format!(
        "{}.{}.{}",
        parts[0],
        b64url(claims.to_string().as_bytes()),
        parts[2]
    )
}

/// The algorithm a gateway is configured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Hs256,
    Rs256,
}

/// Options of one test gateway.
#[derive(Debug, Clone, Copy)]
struct Opts {
    required: bool,
    audience_and_issuer: bool,
}

const OPTIONAL: Opts = Opts {
    required: false,
    audience_and_issuer: false,
};

/// What a test gateway's client got back.
#[derive(Debug)]
struct Reply {
    status: StatusCode,
    headers: http::HeaderMap,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }
}

/// Asserts the gateway's answer to a refused credential.
#[track_caller]
fn assert_unauthorized(reply: &Reply, case: &str) {
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{case}: {reply:?}");
    assert_eq!(
        reply.headers.get(header::WWW_AUTHENTICATE).map(|v| v.as_bytes()),
        Some(&b"Bearer"[..]),
        "{case}: {reply:?}"
    );
    assert_eq!(
        reply.headers.get(header::CONTENT_TYPE).map(|v| v.as_bytes()),
        Some(&b"application/json"[..]),
        "{case}: {reply:?}"
    );
    let body = reply.json();
    assert_eq!(body["error"]["type"], "unauthorized", "{case}: {body}");
    assert!(body["error"]["message"].is_string(), "{case}: {body}");
}

/// Asserts a request that reached the demo upstream.
#[track_caller]
fn assert_passed(reply: &Reply, case: &str) {
    assert_eq!(reply.status, StatusCode::OK, "{case}: {reply:?}");
    let body = reply.json();
    assert_eq!(body["upstream"], "demo", "{case}: {body}");
    assert_eq!(body["path"], "/api/things", "{case}: {body}");
}

/// A server task on `127.0.0.1:0` and the sender that stops it.
struct Task {
    stop: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl Task {
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(handle) = self.handle.take() {
            tokio::time::timeout(Duration::from_secs(10), handle)
                .await
                .expect("server stops in time")
                .expect("server task");
        }
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        if let Some(handle) = &self.handle {
            handle.abort();
        }
    }
}

/// One gateway (proxy and admin listeners) in front of the demo upstream,
/// with the keys to sign tokens it accepts.
struct Gw {
    kind: Kind,
    addr: SocketAddr,
    admin: SocketAddr,
    client: Client<HttpConnector, Empty<Bytes>>,
    /// HS256: the configured secret.
    secret: String,
    /// RS256: the private key of the configured public key.
    rsa: EncodingKey,
    gateway: Task,
    upstream: Task,
}

impl Gw {
    /// Starts a gateway for `kind`; `name` makes the secret's environment
    /// variable unique to the test. Per-tenant limits are enabled.
    async fn start(kind: Kind, name: &str, opts: Opts) -> Gw {
        // The demo upstream.
        let up_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind upstream");
        let up_addr = up_listener.local_addr().expect("upstream addr");
        let (up_stop, up_stopped) = oneshot::channel::<()>();
        let up_handle = tokio::spawn(async move {
            axum::serve(up_listener, pressure_mock::demo_upstream::router())
                .with_graceful_shutdown(async {
                    let _ = up_stopped.await;
                })
                .await
                .expect("upstream serves");
        });
        let upstream = Task {
            stop: Some(up_stop),
            handle: Some(up_handle),
        };

        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let admin_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind admin");
        let addr = listener.local_addr().expect("proxy addr");
        let admin = admin_listener.local_addr().expect("admin addr");

        let secret_env = format!("PRESSURE_AUTH_TEST_SECRET_{}", name.to_ascii_uppercase());
        let secret = format!("test-secret-of-{name}-0123456789abcdef");
        let mut jwt = match kind {
            Kind::Hs256 => json!({ "algorithms": ["HS256"], "secretEnv": secret_env }),
            Kind::Rs256 => json!({ "algorithms": ["RS256"], "publicKeyFile": "rsa-public.pem" }),
        };
        jwt["leewaySecs"] = json!(LEEWAY_SECS);
        if opts.audience_and_issuer {
            jwt["audience"] = json!(AUDIENCE);
            jwt["issuer"] = json!(ISSUER);
        }
        let config = json!({
            "gateway": {
                "listen": addr.to_string(),
                "upstreams": { "demo": { "url": format!("http://{up_addr}"), "pathPrefix": "/" } },
                "backend": { "type": "memory" },
                "auth": { "required": opts.required, "jwt": jwt },
                "admin": { "listen": admin.to_string() },
                "pressure": {
                    "enabled": true,
                    "perTenant": { "enabled": true, "limits": { "requestsPerMinute": 1000 } }
                }
            }
        });

        let gateway = {
            let _env = ENV_LOCK.lock().await;
            if kind == Kind::Hs256 {
                std::env::set_var(&secret_env, &secret);
            }
            let config = pressure_gateway::config::parse_in(&config.to_string(), &fixtures())
                .unwrap_or_else(|e| panic!("config: {e}"));
            Gateway::build(config, &fixtures())
                .await
                .unwrap_or_else(|e| panic!("build: {e}"))
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let handle = tokio::spawn(gateway.serve(listener, admin_listener, async {
            let _ = stopped.await;
        }));

        Gw {
            kind,
            addr,
            admin,
            client: Client::builder(TokioExecutor::new()).build_http(),
            secret,
            rsa: EncodingKey::from_rsa_pem(&fixture("rsa-private.pem")).expect("RSA private key"),
            gateway: Task {
                stop: Some(stop),
                handle: Some(handle),
            },
            upstream,
        }
    }

    /// A token the gateway accepts (signature-wise) for `claims`.
    fn token(&self, claims: &Value) -> String {
        match self.kind {
            Kind::Hs256 => sign(
                Algorithm::HS256,
                &EncodingKey::from_secret(self.secret.as_bytes()).expect("secret"),
                claims,
            ),
            Kind::Rs256 => sign(Algorithm::RS256, &self.rsa, claims),
        }
    }

    async fn request(&self, addr: SocketAddr, path: &str, authorization: Option<&str>) -> Reply {
        let mut req = Request::get(format!("http://{addr}{path}"));
        if let Some(value) = authorization {
            req = req.header(header::AUTHORIZATION, value);
        }
        let req = req.body(Empty::new()).expect("request");
        let response = tokio::time::timeout(Duration::from_secs(10), self.client.request(req))
            .await
            .expect("answer in time")
            .expect("http exchange");
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.expect("body").to_bytes();
        Reply {
            status,
            headers,
            body: String::from_utf8(body.to_vec()).expect("utf-8 body"),
        }
    }

    /// `GET /api/things` through the gateway with `Authorization: value`.
    async fn get(&self, authorization: Option<&str>) -> Reply {
        self.request(self.addr, "/api/things", authorization).await
    }

    /// `GET /api/things` with `Authorization: Bearer token`.
    async fn bearer(&self, token: &str) -> Reply {
        self.get(Some(&format!("Bearer {token}"))).await
    }

    /// The broker's `gateway:tenant:*` resources, from the admin listener.
    async fn tenant_stats(&self) -> BTreeMap<String, Value> {
        let reply = self.request(self.admin, "/admin/pressure/stats", None).await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        reply.json()["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .filter_map(|r| {
                let id = r["resource"].as_str()?;
                id.starts_with("gateway:tenant:")
                    .then(|| (id.to_owned(), r.clone()))
            })
            .collect()
    }

    /// Asserts that exactly `tenant` was registered and charged `allowed`
    /// times, none denied.
    #[track_caller]
    fn check_tenant(stats: &BTreeMap<String, Value>, tenant: &str, allowed: u64) {
        let id = format!("gateway:tenant:{tenant}");
        assert_eq!(stats.keys().collect::<Vec<_>>(), [&id], "{stats:?}");
        let s = &stats[&id];
        assert_eq!(s["kind"], "limit", "{s}");
        assert_eq!(s["lazy"], true, "{s}");
        assert_eq!(s["allowed"], allowed, "{s}");
        assert_eq!(s["denied"], 0, "{s}");
    }

    /// `pressure_gateway_unauthorized_total` by `reason`, from `/metrics`.
    async fn unauthorized(&self) -> BTreeMap<String, u64> {
        let reply = self.request(self.admin, "/metrics", None).await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        let samples: BTreeMap<String, u64> = reply
            .body
            .lines()
            .filter_map(|line| line.strip_prefix("pressure_gateway_unauthorized_total{reason=\""))
            .map(|rest| {
                let (reason, value) = rest.split_once("\"} ").expect("sample line");
                let value: f64 = value.trim().parse().expect("sample value");
                (reason.to_owned(), value as u64)
            })
            .collect();
        // The family is announced once it has a sample.
        assert_eq!(
            reply
                .body
                .contains("# TYPE pressure_gateway_unauthorized_total counter\n"),
            !samples.is_empty(),
            "{}",
            reply.body
        );
        samples
    }

    /// `pressure_gateway_allowed_total{layer="tenant"}`.
    async fn tenant_allowed(&self) -> u64 {
        let reply = self.request(self.admin, "/metrics", None).await;
        reply
            .body
            .lines()
            .find_map(|line| line.strip_prefix("pressure_gateway_allowed_total{layer=\"tenant\"} "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map_or_else(
                || panic!("no tenant allowed sample: {}", reply.body),
                |v| v as u64,
            )
    }

    async fn stop(self) {
        let Gw {
            client,
            gateway,
            upstream,
            ..
        } = self;
        drop(client);
        gateway.stop().await;
        upstream.stop().await;
    }
}

fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

// ------------------------------------------------------------------- cases

/// A valid token reaches the upstream and charges its tenant once.
async fn valid_token_passes_and_charges_the_tenant(kind: Kind, name: &str) {
    let gw = Gw::start(kind, name, OPTIONAL).await;
    assert!(gw.tenant_stats().await.is_empty());

    let reply = gw.bearer(&gw.token(&claims(json!("acme")))).await;
    assert_passed(&reply, "valid token");
    Gw::check_tenant(&gw.tenant_stats().await, "acme", 1);
    assert_eq!(gw.tenant_allowed().await, 1);
    // The scheme is case-insensitive.
    let reply = gw
        .get(Some(&format!("bearer {}", gw.token(&claims(json!("acme"))))))
        .await;
    assert_passed(&reply, "lower-case scheme");
    Gw::check_tenant(&gw.tenant_stats().await, "acme", 2);
    assert_eq!(gw.unauthorized().await, counts(&[]));

    gw.stop().await;
}

/// `exp` beyond the leeway, `nbf` in the future and a missing `exp` are
/// refused; `exp` within the leeway is not.
async fn time_claims_are_enforced(kind: Kind, name: &str) {
    let gw = Gw::start(kind, name, OPTIONAL).await;
    let now = now();
    let valid = claims(json!("acme"));

    let expired = with(valid.clone(), "exp", json!(now - LEEWAY_SECS - 60));
    assert_unauthorized(&gw.bearer(&gw.token(&expired)).await, "expired");
    let long_expired = with(valid.clone(), "exp", json!(now - 86_400));
    assert_unauthorized(&gw.bearer(&gw.token(&long_expired)).await, "expired a day ago");
    let immature = with(valid.clone(), "nbf", json!(now + LEEWAY_SECS + 300));
    assert_unauthorized(&gw.bearer(&gw.token(&immature)).await, "nbf in the future");
    let no_exp = without(valid.clone(), "exp");
    assert_unauthorized(&gw.bearer(&gw.token(&no_exp)).await, "missing exp");
    let string_exp = with(valid.clone(), "exp", json!((now + 600).to_string()));
    assert_unauthorized(&gw.bearer(&gw.token(&string_exp)).await, "exp not a number");
    assert_eq!(gw.unauthorized().await, counts(&[("invalid", 5)]));
    assert!(gw.tenant_stats().await.is_empty(), "no tenant for refused tokens");

    // Within the leeway, and `nbf` already reached: accepted.
    let lenient = with(
        with(valid, "exp", json!(now - LEEWAY_SECS / 3)),
        "nbf",
        json!(now - 10),
    );
    assert_passed(&gw.bearer(&gw.token(&lenient)).await, "exp within the leeway");
    Gw::check_tenant(&gw.tenant_stats().await, "acme", 1);
    assert_eq!(gw.unauthorized().await, counts(&[("invalid", 5)]));

    gw.stop().await;
}

/// Badly signed, tampered, unsigned (`alg: none`) and wrong-algorithm
/// tokens are refused.
async fn forged_tokens_are_refused(kind: Kind, name: &str) {
    let gw = Gw::start(kind, name, OPTIONAL).await;
    let valid = claims(json!("acme"));
    let good = gw.token(&valid);

    let mut forged: Vec<(&str, String)> = vec![
        (
            "tampered payload",
            tampered(&good, &with(valid.clone(), "namespaceId", json!("evil"))),
        ),
        ("alg none", unsigned(&valid)),
        ("alg none, signature kept", {
            let parts: Vec<&str> = good.split('.').collect();
            format!(
                "{}.{}.{}",
                b64url(br#"{"alg":"none","typ":"JWT"}"#),
                parts[1],
                parts[2]
            )
        }),
        ("signature cut off", {
            let (signed, _) = good.rsplit_once('.').expect("three parts");
            format!("{signed}.")
        }),
    ];
    let other_rsa = EncodingKey::from_rsa_pem(&fixture("other-rsa-private.pem")).expect("other RSA key");
    match kind {
        Kind::Hs256 => {
            let other = EncodingKey::from_secret(b"another-secret-0123456789abcdef").expect("secret");
            let same = EncodingKey::from_secret(gw.secret.as_bytes()).expect("secret");
            forged.extend([
                ("other secret", sign(Algorithm::HS256, &other, &valid)),
                (
                    "HS512 with the right secret",
                    sign(Algorithm::HS512, &same, &valid),
                ),
                (
                    "HS384 with the right secret",
                    sign(Algorithm::HS384, &same, &valid),
                ),
                ("RS256 token", sign(Algorithm::RS256, &gw.rsa, &valid)),
            ]);
        }
        Kind::Rs256 => {
            let public_pem = fixture("rsa-public.pem");
            let public_as_secret = EncodingKey::from_secret(&public_pem).expect("secret");
            let public_trimmed =
                EncodingKey::from_secret(String::from_utf8_lossy(&public_pem).trim().as_bytes())
                    .expect("secret");
            let secret = EncodingKey::from_secret(b"some-hmac-secret-0123456789abcdef").expect("secret");
            forged.extend([
                ("other key", sign(Algorithm::RS256, &other_rsa, &valid)),
                (
                    "HS256 signed with the public key PEM",
                    sign(Algorithm::HS256, &public_as_secret, &valid),
                ),
                (
                    "HS256 signed with the trimmed public key PEM",
                    sign(Algorithm::HS256, &public_trimmed, &valid),
                ),
                ("HS256 token", sign(Algorithm::HS256, &secret, &valid)),
                (
                    "RS512 with the right key",
                    sign(Algorithm::RS512, &gw.rsa, &valid),
                ),
                (
                    "PS256 with the right key",
                    sign(Algorithm::PS256, &gw.rsa, &valid),
                ),
            ]);
        }
    }
    for (case, token) in &forged {
        assert_unauthorized(&gw.bearer(token).await, case);
    }
    assert_eq!(
        gw.unauthorized().await,
        counts(&[("invalid", forged.len() as u64)])
    );
    assert!(gw.tenant_stats().await.is_empty(), "no tenant for forged tokens");

    // The untouched token still passes.
    assert_passed(&gw.bearer(&good).await, "the genuine token");
    Gw::check_tenant(&gw.tenant_stats().await, "acme", 1);

    gw.stop().await;
}

/// With `audience` and `issuer` configured, only tokens naming both pass.
async fn audience_and_issuer_are_checked(kind: Kind, name: &str) {
    let gw = Gw::start(
        kind,
        name,
        Opts {
            required: false,
            audience_and_issuer: true,
        },
    )
    .await;
    let right = with(
        with(claims(json!("acme")), "aud", json!(AUDIENCE)),
        "iss",
        json!(ISSUER),
    );

    assert_passed(&gw.bearer(&gw.token(&right)).await, "right aud and iss");
    Gw::check_tenant(&gw.tenant_stats().await, "acme", 1);

    let refused = [
        ("wrong aud", with(right.clone(), "aud", json!("other-api"))),
        (
            "wrong aud list",
            with(right.clone(), "aud", json!(["other-api", "more"])),
        ),
        (
            "wrong iss",
            with(right.clone(), "iss", json!("https://evil.example.test")),
        ),
        (
            "iss differing in case",
            with(right.clone(), "iss", json!(ISSUER.to_uppercase())),
        ),
        ("aud not a string", with(right.clone(), "aud", json!(7))),
    ];
    for (case, claims) in &refused {
        assert_unauthorized(&gw.bearer(&gw.token(claims)).await, case);
    }
    assert_eq!(
        gw.unauthorized().await,
        counts(&[("invalid", refused.len() as u64)])
    );
    Gw::check_tenant(&gw.tenant_stats().await, "acme", 1);

    gw.stop().await;
}

/// With `audience` and `issuer` configured, a token that carries neither
/// claim should be refused too.
async fn missing_audience_or_issuer_is_refused(kind: Kind, name: &str) {
    let gw = Gw::start(
        kind,
        name,
        Opts {
            required: false,
            audience_and_issuer: true,
        },
    )
    .await;
    let right = with(
        with(claims(json!("acme")), "aud", json!(AUDIENCE)),
        "iss",
        json!(ISSUER),
    );
    let refused = [
        ("no aud", without(right.clone(), "aud")),
        ("no iss", without(right.clone(), "iss")),
        ("neither", without(without(right, "aud"), "iss")),
    ];
    for (case, claims) in &refused {
        assert_unauthorized(&gw.bearer(&gw.token(claims)).await, case);
    }
    assert_eq!(
        gw.unauthorized().await,
        counts(&[("invalid", refused.len() as u64)])
    );
    gw.stop().await;
}

/// Without `audience`/`issuer` configured, tokens carrying any are
/// accepted (the claims are not checked).
async fn audience_and_issuer_unchecked_when_not_configured(kind: Kind, name: &str) {
    let gw = Gw::start(kind, name, OPTIONAL).await;
    let token = gw.token(&with(
        with(claims(json!("acme")), "aud", json!("whatever")),
        "iss",
        json!("anyone"),
    ));
    assert_passed(&gw.bearer(&token).await, "aud and iss not configured");
    Gw::check_tenant(&gw.tenant_stats().await, "acme", 1);
    assert_eq!(gw.unauthorized().await, counts(&[]));
    gw.stop().await;
}

/// The tenant claim must be a non-empty string of at most 256 bytes, or an
/// integer (read as its decimal string, so `777` and `"777"` are one
/// tenant); a fraction, a boolean, an object or null is refused.
async fn tenant_claim_is_required(kind: Kind, name: &str) {
    let gw = Gw::start(kind, name, OPTIONAL).await;

    let refused = [
        ("no tenant claim", without(claims(json!("acme")), "namespaceId")),
        ("empty tenant", claims(json!(""))),
        ("null tenant", claims(Value::Null)),
        ("boolean tenant", claims(json!(true))),
        ("object tenant", claims(json!({ "id": "acme" }))),
        ("tenant too long", claims(json!("t".repeat(257)))),
        ("fractional tenant", claims(json!(7.5))),
        ("array tenant", claims(json!([777]))),
    ];
    for (case, claims) in &refused {
        assert_unauthorized(&gw.bearer(&gw.token(claims)).await, case);
    }
    assert_eq!(
        gw.unauthorized().await,
        counts(&[("no_tenant", refused.len() as u64)])
    );
    assert!(gw.tenant_stats().await.is_empty());

    let reply = gw.bearer(&gw.token(&claims(json!("777")))).await;
    assert_passed(&reply, "the string tenant \"777\"");
    Gw::check_tenant(&gw.tenant_stats().await, "777", 1);
    // A numeric claim (`"namespaceId": 777`) is the same tenant.
    let reply = gw.bearer(&gw.token(&claims(json!(777)))).await;
    assert_passed(&reply, "the numeric tenant 777");
    Gw::check_tenant(&gw.tenant_stats().await, "777", 2);
    let reply = gw.bearer(&gw.token(&claims(json!(-42)))).await;
    assert_passed(&reply, "the numeric tenant -42");
    let stats = gw.tenant_stats().await;
    assert_eq!(stats["gateway:tenant:-42"]["allowed"], 1, "{stats:?}");

    gw.stop().await;
}

/// A credential that is present but not a usable bearer token is `401`,
/// even though `auth.required` is false.
async fn malformed_authorization_is_refused(kind: Kind, name: &str) {
    let gw = Gw::start(kind, name, OPTIONAL).await;
    let good = gw.token(&claims(json!("acme")));

    let malformed = [
        "Bearer".to_owned(),
        "Basic xyz".to_owned(),
        "Basic dXNlcjpwYXNz".to_owned(),
        "garbage".to_owned(),
        "Bearer not-a-jwt".to_owned(),
        "Bearer a.b.c".to_owned(),
        "Bearer ...".to_owned(),
        "Bearer eyJhbGciOiJIUzI1NiJ9".to_owned(),
        format!("Token {good}"),
        format!("Bearer {good} extra"),
        format!("Bearer{good}"),
    ];
    for value in &malformed {
        assert_unauthorized(&gw.get(Some(value)).await, value);
    }
    assert_eq!(
        gw.unauthorized().await,
        counts(&[("invalid", malformed.len() as u64)])
    );
    assert!(gw.tenant_stats().await.is_empty());

    gw.stop().await;
}

/// No token: anonymous when `auth.required` is false (no tenant resource),
/// `401` with `WWW-Authenticate: Bearer` when true.
async fn missing_token_depends_on_required(kind: Kind, name: &str) {
    let optional = Gw::start(kind, &format!("{name}_optional"), OPTIONAL).await;
    assert_passed(&optional.get(None).await, "anonymous");
    assert_passed(&optional.get(None).await, "anonymous again");
    assert!(optional.tenant_stats().await.is_empty(), "no tenant resource");
    assert_eq!(optional.tenant_allowed().await, 0);
    assert_eq!(optional.unauthorized().await, counts(&[]));
    optional.stop().await;

    let required = Gw::start(
        kind,
        &format!("{name}_required"),
        Opts {
            required: true,
            audience_and_issuer: false,
        },
    )
    .await;
    let reply = required.get(None).await;
    assert_unauthorized(&reply, "missing token");
    assert_eq!(reply.json()["error"]["message"], "missing bearer token");
    assert_unauthorized(&required.get(None).await, "missing token again");
    assert_eq!(required.unauthorized().await, counts(&[("missing", 2)]));
    assert!(required.tenant_stats().await.is_empty());
    // A present but invalid one is counted apart; a valid one passes.
    assert_unauthorized(&required.get(Some("Basic xyz")).await, "basic");
    assert_passed(
        &required.bearer(&required.token(&claims(json!("acme")))).await,
        "valid token",
    );
    Gw::check_tenant(&required.tenant_stats().await, "acme", 1);
    assert_eq!(
        required.unauthorized().await,
        counts(&[("invalid", 1), ("missing", 2)])
    );
    required.stop().await;
}

/// Every case, once per algorithm; the test name makes the secret's
/// environment variable unique.
macro_rules! cases {
    ($($(#[$attr:meta])* $case:ident),* $(,)?) => {
        mod hs256 {
            $(
                $(#[$attr])*
                #[tokio::test]
                async fn $case() {
                    super::bounded(super::$case(super::Kind::Hs256, concat!("hs256_", stringify!($case))))
                        .await;
                }
            )*
        }
        mod rs256 {
            $(
                $(#[$attr])*
                #[tokio::test]
                async fn $case() {
                    super::bounded(super::$case(super::Kind::Rs256, concat!("rs256_", stringify!($case))))
                        .await;
                }
            )*
        }
    };
}

cases!(
    valid_token_passes_and_charges_the_tenant,
    time_claims_are_enforced,
    forged_tokens_are_refused,
    audience_and_issuer_are_checked,
    audience_and_issuer_unchecked_when_not_configured,
    missing_audience_or_issuer_is_refused,
    tenant_claim_is_required,
    malformed_authorization_is_refused,
    missing_token_depends_on_required,
);

#[test]
fn b64url_matches_rfc_4648_vectors() {
    for (input, expected) in [
        (&b""[..], ""),
        (b"f", "Zg"),
        (b"fo", "Zm8"),
        (b"foo", "Zm9v"),
        (b"foob", "Zm9vYg"),
        (b"fooba", "Zm9vYmE"),
        (b"foobar", "Zm9vYmFy"),
        (b"\xfb\xff", "-_8"),
    ] {
        assert_eq!(b64url(input), expected);
    }
}
