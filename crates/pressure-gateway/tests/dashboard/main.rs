//! The operator dashboard in a real browser: a whole gateway on 127.0.0.1
//! (proxy, admin with a token, an upstream and an OpenAI mock provider)
//! under traffic, its `/dashboard` opened in headless Chromium over
//! WebDriver. The numbers the page shows must be those of
//! `/admin/pressure/stats` and `/admin/pressure/llm`; a denial burst and a
//! breaker opening must show up on the page, and a gateway that stops must
//! end the page's event stream. A screenshot is saved to
//! `target/dashboard-screenshot.png`.
//!
//! The page takes the admin token from `?token=`, keeps it in
//! `sessionStorage` and sends it as `Authorization: Bearer`; the test checks
//! the prompt without it, the address bar cleaned, and a reload.
//!
//! Needs `chromium` and `chromedriver` (Debian: `apt-get install chromium
//! chromium-driver`); without them the test says so in one line and passes,
//! unless `PRESSURE_REQUIRE_BROWSER=1`, which makes it fail.
//!
//! ```text
//! cargo test -p pressure-gateway --test dashboard
//! ```

mod webdriver;

use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use pressure_gateway::{Gateway, Serving};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use webdriver::{Browser, Driver};

/// Upper bound on the whole test, browser start included.
const TEST_BOUND: Duration = Duration::from_secs(180);

/// Longest wait for the page to show a number the gateway already has.
const PAGE_BOUND: Duration = Duration::from_secs(20);

const ADMIN_TOKEN_ENV: &str = "PRESSURE_DASHBOARD_TEST_ADMIN_TOKEN";
/// Has characters that must be percent-encoded in a URL.
const ADMIN_TOKEN: &str = "dash/b0ard+token=1";
const JWT_SECRET_ENV: &str = "PRESSURE_DASHBOARD_TEST_HS256_SECRET";
const JWT_SECRET: &str = "dashboard-browser-test-secret-0123456789";

/// Requests per minute of the burst route.
const BURST_LIMIT: usize = 5;
/// Requests per minute of every tenant.
const TENANT_LIMIT: usize = 4;

// ---------------------------------------------------------------- mocks

/// The upstream (any path answers 200) and the OpenAI provider
/// (`POST /v1/chat/completions`: model `bad` answers 500, others a
/// completion), on one port.
struct Mock {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Mock {
    async fn start() -> Self {
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .fallback(|| async { "ok" });
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind mock");
        let addr = listener.local_addr().expect("mock addr");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, task }
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn chat(Json(body): Json<Value>) -> Response {
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    if model == "bad" {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"error": {"message": "mock failure", "type": "server_error"}})),
        )
            .into_response();
    }
    Json(json!({
        "id": "chatcmpl-mock", "object": "chat.completion", "created": 1, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello there"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}
    }))
    .into_response()
}

// ---------------------------------------------------------------- gateway

fn config(mock: &Mock) -> Value {
    let root = format!("http://{}", mock.addr);
    let price = json!({ "inputMicroUsdPer1M": 1_000_000, "outputMicroUsdPer1M": 2_000_000 });
    let context = json!({ "contextTokens": 8192, "maxOutputTokens": 512 });
    json!({
        "upstreams": { "api": { "url": root, "pathPrefix": "/api" } },
        "auth": { "required": false,
                  "jwt": { "algorithms": ["HS256"], "secretEnv": JWT_SECRET_ENV } },
        "admin": { "tokenEnv": ADMIN_TOKEN_ENV },
        "pressure": {
            "enabled": true,
            "perService": { "api": { "requestsPerSecond": 1000 } },
            "perRoute": [{ "resource": "gateway:route:burst", "pathPrefix": "/api/burst",
                           "limits": { "requestsPerMinute": BURST_LIMIT } }],
            "perTenant": { "enabled": true, "limits": { "requestsPerMinute": TENANT_LIMIT } }
        },
        "llm": {
            "providers": { "mock": { "baseUrl": format!("{root}/v1") } },
            "models": [
                { "provider": "mock", "model": "good", "context": context, "price": price },
                { "provider": "mock", "model": "bad", "context": context, "price": price }
            ],
            "useCases": {
                "fallback": { "chain": [ { "model": "mock/bad" }, { "model": "mock/good" } ],
                              "retry": { "maxAttempts": 1 } }
            }
        }
    })
}

/// A gateway on `127.0.0.1:0`, stopped when dropped.
struct TestGateway {
    addr: SocketAddr,
    admin: SocketAddr,
    client: Client<HttpConnector, Full<Bytes>>,
    serving: Serving,
}

impl TestGateway {
    async fn start(mut section: Value) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let admin_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind admin");
        let addr = listener.local_addr().expect("proxy addr");
        let admin = admin_listener.local_addr().expect("admin addr");
        section["listen"] = json!(addr.to_string());
        section["admin"]["listen"] = json!(admin.to_string());
        let text = json!({ "gateway": section }).to_string();
        let config = pressure_gateway::config::parse_in(&text, Path::new("."))
            .unwrap_or_else(|e| panic!("invalid test config: {e}\n{text}"));
        let gateway = Gateway::build(config, Path::new("."))
            .await
            .expect("gateway builds");
        Self {
            addr,
            admin,
            client: Client::builder(TokioExecutor::new()).build_http(),
            serving: gateway.spawn(listener, admin_listener),
        }
    }

    /// Graceful stop; `true` when everything finished within `grace`.
    async fn stop(self, grace: Duration) -> bool {
        self.serving.stop(grace).await
    }

    async fn send(&self, req: Request<Full<Bytes>>) -> (StatusCode, Bytes) {
        let resp = tokio::time::timeout(Duration::from_secs(10), self.client.request(req))
            .await
            .expect("gateway answers in time")
            .expect("gateway answers");
        let status = resp.status();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        (status, bytes)
    }

    /// `GET path` on the proxy, as `tenant` when given.
    async fn get(&self, path: &str, tenant: Option<&str>) -> StatusCode {
        let mut req = Request::get(format!("http://{}{path}", self.addr));
        if let Some(t) = tenant {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {}", jwt(t)));
        }
        self.send(req.body(Full::new(Bytes::new())).expect("request"))
            .await
            .0
    }

    /// One chat completion of `use_case`; the answer's status.
    async fn chat(&self, use_case: &str) -> StatusCode {
        let body = json!({ "model": use_case, "messages": [{ "role": "user", "content": "hello" }] });
        let req = Request::post(format!("http://{}/v1/chat/completions", self.addr))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("request");
        self.send(req).await.0
    }

    /// `GET path` on the admin listener with the token, as JSON.
    async fn admin_json(&self, path: &str) -> Value {
        let req = Request::get(format!("http://{}{path}", self.admin))
            .header(http::header::AUTHORIZATION, format!("Bearer {ADMIN_TOKEN}"))
            .body(Full::new(Bytes::new()))
            .expect("request");
        let (status, bytes) = self.send(req).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "{path}: {}",
            String::from_utf8_lossy(&bytes)
        );
        serde_json::from_slice(&bytes).expect("JSON body")
    }
}

fn jwt(tenant: &str) -> String {
    let claims = json!({ "namespaceId": tenant, "exp": jsonwebtoken::get_current_timestamp() + 3600 });
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()).expect("HMAC key"),
    )
    .expect("sign token")
}

// ---------------------------------------------------------------- the page

/// What the page shows, read from its `data-*` attributes.
const READ_PAGE: &str = r#"
// A counter as shown: the visible text must be the data-value too.
const num = (root, field) => {
  const e = root.querySelector(`[data-field="${field}"]`);
  if (!e || e.textContent !== e.getAttribute("data-value")) return null;
  return Number(e.textContent);
};
const rows = (attr) => Object.fromEntries([...document.querySelectorAll(`tr[${attr}]`)].map((tr) =>
  [tr.getAttribute(attr), { allowed: num(tr, "allowed"), denied: num(tr, "denied") }]));
const totals = document.querySelector('[data-field="tenantTotals"]');
const chart = document.querySelector('[data-chart="rates"]');
return {
  updates: Number(document.body.getAttribute("data-updates")),
  link: document.getElementById("link").getAttribute("data-status"),
  health: document.getElementById("health").getAttribute("data-status"),
  search: location.search,
  login: !document.getElementById("login").hidden,
  storedToken: sessionStorage.getItem("pressure-admin-token"),
  resources: rows("data-resource"),
  tenants: rows("data-tenant"),
  tenantOrder: [...document.querySelectorAll("tr[data-tenant]")].map((tr) => tr.getAttribute("data-tenant")),
  tenantCount: totals ? Number(totals.getAttribute("data-count")) : null,
  maxDeniedRate: Number(chart.getAttribute("data-max-denied")),
  breakers: Object.fromEntries([...document.querySelectorAll("tr[data-breaker]")].map((tr) =>
    [tr.getAttribute("data-breaker"), tr.getAttribute("data-state")])),
  transitions: [...document.querySelectorAll("li[data-transition]")].map((li) =>
    [li.getAttribute("data-breaker"), li.getAttribute("data-from"), li.getAttribute("data-to")]),
  levels: Object.fromEntries([...document.querySelectorAll("[data-level]")].map((e) =>
    [e.getAttribute("data-level"), Number(e.getAttribute("data-value"))])),
  failedSpent: Number(document.querySelector('[data-field="failedSpentMicroUsd"]').getAttribute("data-value")),
};
"#;

/// Reads the page until `check` accepts what it shows, or fails the test
/// after [`PAGE_BOUND`] with the last mismatch.
async fn until_page<F, Fut>(driver: &Driver, what: &str, mut check: F) -> Value
where
    F: FnMut(Value) -> Fut,
    Fut: Future<Output = Result<Value, String>>,
{
    let deadline = tokio::time::Instant::now() + PAGE_BOUND;
    loop {
        let page = driver.eval(READ_PAGE).await;
        match check(page).await {
            Ok(page) => return page,
            Err(mismatch) if tokio::time::Instant::now() >= deadline => {
                panic!("the page never showed {what}: {mismatch}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// `(allowed, denied)` of every resource in `/admin/pressure/stats`, tenants
/// apart.
type Counts = BTreeMap<String, (u64, u64)>;

async fn stats_counts(gw: &TestGateway) -> (Counts, Counts) {
    let stats = gw.admin_json("/admin/pressure/stats").await;
    let mut configured = Counts::new();
    let mut tenants = Counts::new();
    for r in stats["resources"].as_array().expect("resources") {
        let id = r["resource"].as_str().expect("id").to_owned();
        let counts = (
            r["allowed"].as_u64().expect("allowed"),
            r["denied"].as_u64().expect("denied"),
        );
        match id.strip_prefix("gateway:tenant:") {
            Some(t) => tenants.insert(t.to_owned(), counts),
            None => configured.insert(id, counts),
        };
    }
    (configured, tenants)
}

fn page_counts(page: &Value, key: &str) -> Counts {
    page[key]
        .as_object()
        .expect("rows")
        .iter()
        .map(|(id, v)| {
            let n = |f: &str| v[f].as_f64().map_or(u64::MAX, |x| x as u64);
            (id.clone(), (n("allowed"), n("denied")))
        })
        .collect()
}

/// The page's resource and tenant rows equal the gateway's stats.
async fn page_matches_stats(gw: &TestGateway, page: Value) -> Result<Value, String> {
    let (configured, tenants) = stats_counts(gw).await;
    let shown = page_counts(&page, "resources");
    if shown != configured {
        return Err(format!("resources: page {shown:?}, stats {configured:?}"));
    }
    let shown_tenants = page_counts(&page, "tenants");
    let expected: Counts = shown_tenants
        .keys()
        .filter_map(|t| tenants.get(t).map(|c| (t.clone(), *c)))
        .collect();
    if shown_tenants != expected || shown_tenants.len() != tenants.len().min(20) {
        return Err(format!("tenants: page {shown_tenants:?}, stats {tenants:?}"));
    }
    if page["tenantCount"].as_u64() != Some(tenants.len() as u64) {
        return Err(format!(
            "tenant count {} of {}",
            page["tenantCount"],
            tenants.len()
        ));
    }
    Ok(page)
}

// ---------------------------------------------------------------- test

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_gateway_live_in_a_real_browser() {
    let browser = match Browser::find() {
        Ok(b) => b,
        Err(reason) => {
            pressure_testkit::skip(
                "dashboard::the_dashboard_shows_the_gateway_live_in_a_real_browser",
                "PRESSURE_REQUIRE_BROWSER",
                &reason,
            );
            return;
        }
    };
    tokio::time::timeout(TEST_BOUND, run(browser))
        .await
        .expect("the dashboard test exceeded its time bound");
}

async fn run(browser: Browser) {
    std::env::set_var(ADMIN_TOKEN_ENV, ADMIN_TOKEN);
    std::env::set_var(JWT_SECRET_ENV, JWT_SECRET);
    let mock = Mock::start().await;
    let gateway = TestGateway::start(config(&mock)).await;
    let gw = &gateway;

    // Traffic before the page opens: anonymous, two tenants (one of them
    // past its limit), one LLM answer from the backup.
    for _ in 0..3 {
        assert_eq!(gw.get("/api/hello", None).await, StatusCode::OK);
    }
    for _ in 0..2 {
        assert_eq!(gw.get("/api/hello", Some("acme")).await, StatusCode::OK);
    }
    let noisy: Vec<StatusCode> =
        futures::future::join_all((0..TENANT_LIMIT + 3).map(|_| gw.get("/api/hello", Some("noisy")))).await;
    assert_eq!(
        noisy
            .iter()
            .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
            .count(),
        3,
        "{noisy:?}"
    );
    assert_eq!(gw.chat("fallback").await, StatusCode::OK);

    let driver = browser.start(1280, 1320).await;
    let dashboard = format!("http://{}/dashboard", gw.admin);

    // 0. Without the token the page asks for it; given in the address, the
    //    page keeps it for this tab and removes it from the address bar.
    driver.goto(&dashboard).await;
    until_page(&driver, "the token prompt", |page| async move {
        match (page["link"].as_str(), page["login"].as_bool()) {
            (Some("token"), Some(true)) => Ok(page),
            other => Err(format!("link and prompt {other:?}")),
        }
    })
    .await;
    let token = ADMIN_TOKEN
        .replace('/', "%2F")
        .replace('+', "%2B")
        .replace('=', "%3D");
    driver.goto(&format!("{dashboard}?token={token}")).await;

    // 1. The page is live, the token left the address bar, and its numbers
    //    are the stats'.
    let page = until_page(&driver, "the stats", |page| async move {
        if page["updates"].as_u64().unwrap_or(0) < 1 {
            return Err(format!("no summary yet: {page}"));
        }
        page_matches_stats(gw, page).await
    })
    .await;
    assert_eq!(page["link"], "live", "{page}");
    assert_eq!(page["login"], false, "{page}");
    assert_eq!(page["health"], "ok", "{page}");
    assert_eq!(page["search"], "", "the token is removed from the address");
    assert_eq!(page["storedToken"], ADMIN_TOKEN, "kept, decoded, for this tab");
    // A reload without the token in the address stays live.
    driver.goto(&dashboard).await;
    until_page(&driver, "the stats after a reload", |page| async move {
        if page["link"] != "live" {
            return Err(format!("link {}", page["link"]));
        }
        page_matches_stats(gw, page).await
    })
    .await;
    assert_eq!(page["tenantOrder"][0], "noisy", "most denied first: {page}");
    assert_eq!(page["tenants"]["noisy"]["denied"], 3, "{page}");

    // 2. A denial burst on one route.
    let burst: Vec<StatusCode> =
        futures::future::join_all((0..BURST_LIMIT + 7).map(|_| gw.get("/api/burst/x", None))).await;
    assert_eq!(
        burst
            .iter()
            .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
            .count(),
        7,
        "{burst:?}"
    );
    let page = until_page(&driver, "the denial burst", |page| async move {
        let denied = page["resources"]["gateway:route:burst"]["denied"].as_u64();
        if denied != Some(7) {
            return Err(format!("burst denied {denied:?}"));
        }
        if page["maxDeniedRate"].as_f64().unwrap_or(0.0) <= 0.0 {
            return Err(format!("no denied rate on the chart: {}", page["maxDeniedRate"]));
        }
        page_matches_stats(gw, page).await
    })
    .await;
    assert_eq!(
        page["resources"]["gateway:route:burst"]["allowed"], BURST_LIMIT,
        "{page}"
    );

    // 3. The primary model fails until its breaker opens (10 calls at 100 %),
    //    every answer coming from the backup.
    for _ in 0..9 {
        assert_eq!(gw.chat("fallback").await, StatusCode::OK);
    }
    let llm = gw.admin_json("/admin/pressure/llm").await;
    let bad = llm["breakers"]
        .as_array()
        .expect("breakers")
        .iter()
        .find(|b| b["model"] == "bad")
        .expect("the bad model's breaker");
    assert_eq!(bad["state"], "open", "{llm}");
    let spent = llm["failedSpentMicroUsd"].as_u64().expect("failed spend");
    assert!(spent > 0, "{llm}");
    let backup = llm["answers"]["backup"].as_u64().expect("backup answers");
    assert_eq!(backup, 10, "{llm}");
    let page = until_page(&driver, "the open breaker", |page| async move {
        if page["breakers"]["mock/bad"] != "open" || page["breakers"]["mock/good"] != "closed" {
            return Err(format!("breakers {}", page["breakers"]));
        }
        let opened = json!(["mock/bad", "closed", "open"]);
        if !page["transitions"]
            .as_array()
            .is_some_and(|t| t.contains(&opened))
        {
            return Err(format!("transitions {}", page["transitions"]));
        }
        if page["levels"]["backup"].as_u64() != Some(backup) || page["levels"]["primary"] != 0 {
            return Err(format!("levels {}", page["levels"]));
        }
        if page["failedSpent"].as_u64() != Some(spent) {
            return Err(format!("failed spend {} of {spent}", page["failedSpent"]));
        }
        Ok(page)
    })
    .await;
    assert!(page["updates"].as_u64().unwrap_or(0) >= 2, "{page}");

    // A few seconds of mixed traffic so the screenshot's charts have a
    // shape (nothing is asserted on them).
    let updates = page["updates"].as_u64().unwrap_or(0);
    for round in 0..16 {
        let mut calls: Vec<std::pin::Pin<Box<dyn Future<Output = StatusCode> + Send + '_>>> = Vec::new();
        for _ in 0..(4 + round % 5) {
            calls.push(Box::pin(gw.get("/api/hello", None)));
        }
        if round % 3 == 0 {
            calls.push(Box::pin(gw.get("/api/burst/x", None)));
            calls.push(Box::pin(gw.get("/api/hello", Some("noisy"))));
        }
        if round % 4 == 0 {
            calls.push(Box::pin(gw.chat("fallback")));
        }
        futures::future::join_all(calls).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    until_page(&driver, "one more summary", |page| async move {
        match page["updates"].as_u64() {
            Some(n) if n > updates + 1 => Ok(page),
            n => Err(format!("updates {n:?}")),
        }
    })
    .await;

    let png = driver.screenshot().await;
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG screenshot");
    let path = screenshot_path();
    std::fs::write(&path, &png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    let _ = writeln!(std::io::stderr(), "dashboard screenshot: {}", path.display());

    // A stopping gateway ends the open event stream (the page never holds
    // a shutdown), and the page says it lost the gateway.
    assert!(
        gateway.stop(Duration::from_secs(10)).await,
        "the gateway stops within its grace with a dashboard open"
    );
    until_page(&driver, "the lost connection", |page| async move {
        match page["link"].as_str() {
            Some("reconnecting" | "down") => Ok(page),
            other => Err(format!("link {other:?}")),
        }
    })
    .await;

    driver.quit().await;
}

/// `target/dashboard-screenshot.png` (beside the integration tests' `tmp`).
fn screenshot_path() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(tmp).join("dashboard-screenshot.png")
}
