//! A fleet of two `pressure gateway` processes sharing one Redis enforces one
//! global limit: 100 requests alternating between the two gateways on a route
//! limited to 30 per minute yield exactly 30 × 200 and 70 × 429 in total;
//! each gateway's stats count what it admitted itself, the two add up to 30,
//! and the Redis-side usage either of them reports is the fleet's 30.
//!
//! The Redis is the test binary's own `redis-server` on a free loopback port
//! (`pressure-testkit`), or `PRESSURE_REDIS_URL`. When none can be had, the
//! test fails (it never skips).
//! Every run uses its own key prefix, so runs never share limiter state (the
//! keys expire in Redis by themselves).

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::time::{timeout, Instant};

/// The route under test and its fleet-wide limit.
const ROUTE_RESOURCE: &str = "gateway:route:limited";
const ROUTE_PREFIX: &str = "/limited";
const LIMIT_PER_MINUTE: u64 = 30;
/// Requests sent in total, alternating between the two gateways.
const REQUESTS: u64 = 100;

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// A temporary directory removed (with its contents) on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&dir).expect("create the temp dir");
        Self(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `pressure gateway` child process, killed and reaped on drop so
/// a failing assertion never leaves it behind.
struct GatewayProcess {
    name: &'static str,
    child: Child,
    /// `http://127.0.0.1:<port>` of the proxy listener.
    proxy: String,
    /// `http://127.0.0.1:<port>` of the admin listener.
    admin: String,
    /// File receiving the child's stderr (its JSON logs), for diagnostics.
    log: PathBuf,
}

impl GatewayProcess {
    /// Writes `config` next to the log in `dir` and starts the binary on it.
    fn spawn(name: &'static str, dir: &Path, config: &serde_json::Value, proxy: u16, admin: u16) -> Self {
        let config_path = dir.join(format!("{name}.json"));
        std::fs::write(
            &config_path,
            serde_json::to_vec_pretty(config).expect("serialize config"),
        )
        .expect("write config");
        let log = dir.join(format!("{name}.log"));
        let stderr = std::fs::File::create(&log).expect("create log file");
        let child = Command::new(env!("CARGO_BIN_EXE_pressure"))
            .arg("gateway")
            .arg("--config")
            .arg(&config_path)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn the pressure binary");
        Self {
            name,
            child,
            proxy: format!("http://127.0.0.1:{proxy}"),
            admin: format!("http://127.0.0.1:{admin}"),
            log,
        }
    }

    /// The child's stderr so far, to explain a failure.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Waits (at most 10 s) until the admin `/healthz` answers 200; when
    /// the process exits first, returns its status and log at once.
    async fn wait_healthy(&mut self, client: &HttpClient) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let url = format!("{}/healthz", self.admin);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "gateway {} exited early ({status}):\n{}",
                    self.name,
                    self.log_tail()
                ));
            }
            if let Ok((200, _)) = get(client, &url).await {
                return Ok(());
            }
            assert!(
                Instant::now() < deadline,
                "gateway {} not healthy within 10 s:\n{}",
                self.name,
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// This gateway's stats entry for the limited route.
    async fn route_stats(&self, client: &HttpClient) -> serde_json::Value {
        let url = format!("{}/admin/pressure/stats", self.admin);
        let (status, body) = get(client, &url).await.expect("stats request");
        assert_eq!(status, 200, "stats of {}: {body}", self.name);
        let stats: serde_json::Value = serde_json::from_str(&body).expect("stats are JSON");
        stats["resources"]
            .as_array()
            .expect("`resources` is an array")
            .iter()
            .find(|r| r["resource"] == ROUTE_RESOURCE)
            .unwrap_or_else(|| panic!("{ROUTE_RESOURCE} missing from the stats of {}: {body}", self.name))
            .clone()
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Two distinct ports that were free on loopback a moment ago (bind `:0`
/// twice, read them, drop): the gateway binary binds its listeners itself.
fn free_ports() -> (u16, u16) {
    let a = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let b = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let port = |l: &std::net::TcpListener| l.local_addr().expect("local addr").port();
    (port(&a), port(&b))
}

/// Starts gateway `name` on ports that were free a moment ago; when one was
/// taken meanwhile (the bind fails and the process exits), on another pair.
async fn start_gateway(
    name: &'static str,
    dir: &Path,
    client: &HttpClient,
    config: impl Fn(u16, u16) -> serde_json::Value,
) -> GatewayProcess {
    const ATTEMPTS: usize = 5;
    for attempt in 1..=ATTEMPTS {
        let (proxy, admin) = free_ports();
        let mut g = GatewayProcess::spawn(name, dir, &config(proxy, admin), proxy, admin);
        match g.wait_healthy(client).await {
            Ok(()) => return g,
            Err(e) if attempt < ATTEMPTS && e.to_lowercase().contains("address already in use") => {}
            Err(e) => panic!("{e}"),
        }
    }
    unreachable!("the last attempt returns or panics")
}

/// A key prefix no other run uses: the process id plus a random 64-bit value
/// (std's `RandomState` is seeded randomly per process).
fn unique_prefix() -> String {
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    format!("pressure-test-{}-{random:016x}", std::process::id())
}

/// The Redis URL to use; fails the test when none answers.
async fn redis_url() -> String {
    let url = pressure_testkit::redis_url();
    // host:port of the URL, without scheme, credentials or database.
    let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let addr = rest.split('/').next().unwrap_or(rest).to_owned();
    let reachable = timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(&addr))
        .await
        .is_ok_and(|c| c.is_ok());
    // The tests run against a real Redis: a missing one is a failure,
    // never a silent skip.
    assert!(reachable, "no Redis answers at {url}");
    url
}

/// Starts the trivial upstream: 200 `ok` on every path, on a free loopback
/// port; it lives as long as the test's runtime.
async fn start_upstream() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the upstream");
    let addr = listener.local_addr().expect("upstream addr");
    let app = axum::Router::new().fallback(|| async { "ok" });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

/// The config of one gateway of the fleet: same upstream, same Redis and key
/// prefix, its own listeners.
fn gateway_config(upstream: &str, redis: &str, prefix: &str, proxy: u16, admin: u16) -> serde_json::Value {
    serde_json::json!({
        "gateway": {
            "listen": format!("127.0.0.1:{proxy}"),
            "upstreams": { "app": { "url": upstream, "pathPrefix": "/" } },
            "backend": {
                "type": "redis",
                "url": redis,
                "failureMode": "closed",
                "keyPrefix": prefix,
                // Generous per-call timeout: a slow CI box must not turn a
                // Redis hiccup into a fail-closed denial that skews the count.
                "timeoutMs": 1000
            },
            "admin": { "listen": format!("127.0.0.1:{admin}") },
            "pressure": {
                "enabled": true,
                "perRoute": [{
                    "resource": ROUTE_RESOURCE,
                    "pathPrefix": ROUTE_PREFIX,
                    "limits": { "requestsPerMinute": LIMIT_PER_MINUTE }
                }]
            }
        }
    })
}

/// `GET url`, bounded to 5 s: the status and the body as text.
async fn get(client: &HttpClient, url: &str) -> Result<(u16, String), String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    let exchange = async {
        let resp = client.get(uri).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.map_err(|e| e.to_string())?;
        Ok((status, String::from_utf8_lossy(&body.to_bytes()).into_owned()))
    };
    timeout(Duration::from_secs(5), exchange)
        .await
        .map_err(|_| format!("{url}: no answer within 5 s"))?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_one_redis_enforce_one_global_limit() {
    // The whole scenario is bounded: startup, 100 requests and the stats.
    timeout(Duration::from_secs(60), scenario())
        .await
        .expect("the fleet scenario finished within 60 s");
}

async fn scenario() {
    let redis = redis_url().await;
    let prefix = unique_prefix();
    // Declared before the gateways so it is dropped after them: the children
    // are killed before their config and log files are removed.
    let dir = TempDir::new(&format!("{prefix}-fleet"));
    let upstream = start_upstream().await;

    // Two gateways: same upstream, same Redis and prefix, own loopback ports.
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let mut gateways = Vec::new();
    for name in ["gateway-a", "gateway-b"] {
        let config = |proxy, admin| gateway_config(&upstream, &redis, &prefix, proxy, admin);
        gateways.push(start_gateway(name, dir.path(), &client, config).await);
    }

    // 100 sequential requests, alternating A, B, A, B, …; count the
    // statuses each gateway answered.
    let mut ok = [0u64; 2];
    let mut limited = [0u64; 2];
    for i in 0..REQUESTS {
        let which = usize::try_from(i % 2).expect("0 or 1");
        let g = &gateways[which];
        let url = format!("{}{ROUTE_PREFIX}/item/{i}", g.proxy);
        let (status, body) = get(&client, &url)
            .await
            .unwrap_or_else(|e| panic!("request {i} to {}: {e}\n{}", g.name, g.log_tail()));
        match status {
            200 => ok[which] += 1,
            429 => limited[which] += 1,
            other => panic!(
                "request {i} to {}: unexpected {other}: {body}\n{}",
                g.name,
                g.log_tail()
            ),
        }
    }

    eprintln!(
        "fleet: A {}×200 {}×429, B {}×200 {}×429",
        ok[0], limited[0], ok[1], limited[1]
    );
    // Fleet-wide: exactly the limit admitted, everything else refused.
    assert_eq!(
        ok[0] + ok[1],
        LIMIT_PER_MINUTE,
        "200s in total (A {}, B {})",
        ok[0],
        ok[1]
    );
    assert_eq!(
        limited[0] + limited[1],
        REQUESTS - LIMIT_PER_MINUTE,
        "429s in total"
    );
    // Both gateways admitted some: the limit is shared, not one gateway's.
    assert!(ok[0] > 0 && ok[1] > 0, "both gateways admitted requests: {ok:?}");

    // Per gateway: its stats count what it admitted and refused itself, and
    // the usage read from Redis is the fleet's total.
    let mut allowed_sum = 0;
    for (which, g) in gateways.iter().enumerate() {
        let stats = g.route_stats(&client).await;
        assert_eq!(
            stats["allowed"], ok[which],
            "allowed in the stats of {}: {stats}",
            g.name
        );
        assert_eq!(
            stats["denied"], limited[which],
            "denied in the stats of {}: {stats}",
            g.name
        );
        assert_eq!(
            stats["usage"]["requestsPerMinute"], LIMIT_PER_MINUTE,
            "Redis-side usage seen by {}: {stats}",
            g.name
        );
        eprintln!("{}: {stats}", g.name);
        allowed_sum += stats["allowed"].as_u64().expect("allowed is a number");
    }
    assert_eq!(
        allowed_sum, LIMIT_PER_MINUTE,
        "the gateways' allowed counts add up to the limit"
    );
}
