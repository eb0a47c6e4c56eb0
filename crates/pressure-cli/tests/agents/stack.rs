//! [`Stack`]: the mock provider (in this process) and a `pressure gateway`
//! child process in front of it, with the agents' use case and tenants; and
//! how the agents are found and run against it.

use pressure_mock::{MockConfig, MockProvider, Price};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::time::Instant;

/// The model Claude Code is run with (its default in the pinned version).
pub(crate) const CLAUDE_MODEL: &str = "claude-opus-5-5";
/// The model Codex is configured with.
pub(crate) const CODEX_MODEL: &str = "gpt-5-codex";

/// One price for every model, on the mock and on the gateway alike, in
/// micro-dollars per 1M tokens: input, output, cache write (1.25 × input),
/// cache read (0.1 × input) — the mock's default cache ratios.
const PRICE_IN: u64 = 3_000_000;
const PRICE_OUT: u64 = 15_000_000;
const PRICE_CACHE_WRITE: u64 = 3_750_000;
const PRICE_CACHE_READ: u64 = 300_000;

/// The tenants' requests a day: never reached, only counted (the
/// spent-budget tests read how many requests reached the gateway).
const REQUESTS_PER_DAY: u64 = 1_000_000;

/// The API keys, their tenants, and the SHA-256 the config holds
/// (`printf %s dev-alice | sha256sum`).
const KEYS: [(&str, &str); 2] = [
    (
        "dev-alice",
        "b5402af3712c50a173de2faf5a994576c14970651e00e3e99ef81a5ec7d76a6e",
    ),
    (
        "dev-bob",
        "ef164568fad920bebac8dcc6061d0df675f3b2e2c00d0d5c6766a00370b11be0",
    ),
];

/// The agents' `node_modules/.bin`: `PRESSURE_AGENT_BIN_DIR` when set,
/// else `tools/agents/node_modules/.bin` of this checkout.
fn agent_bin_dir() -> PathBuf {
    match std::env::var_os("PRESSURE_AGENT_BIN_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/agents/node_modules/.bin"),
    }
}

/// The agent `name` (`claude`, `codex`), or `None` after a skip saying how
/// to install it.
pub(crate) fn agent_bin(test: &str, name: &str) -> Option<PathBuf> {
    let path = agent_bin_dir().join(name);
    if path.exists() {
        return Some(path);
    }
    pressure_testkit::skip(
        test,
        crate::REQUIRE,
        &format!(
            "no {} (needs Node.js and npm: `npm ci` in tools/agents, or PRESSURE_AGENT_BIN_DIR)",
            path.display()
        ),
    );
    None
}

/// How an agent or script run ended and what it printed.
pub(crate) struct Run {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    /// Whether it exited 0.
    pub(crate) fn ok(&self) -> bool {
        self.code == Some(0)
    }

    /// Both outputs, stdout first.
    pub(crate) fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code,
            self.stdout.trim_end(),
            tail(&self.stderr, 40)
        )
    }
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Runs `cmd` with no stdin and both outputs captured (in files, read at
/// the end), polling for its exit; killed after `limit`, a failure.
pub(crate) async fn run(cmd: &mut Command, limit: Duration) -> Run {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = TempDir::new(&format!("run{n}"));
    let (out, err) = (dir.0.join("stdout"), dir.0.join("stderr"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{cmd:?} did not end within {limit:?}\n--- stdout\n{}\n--- stderr\n{}",
                std::fs::read_to_string(&out).unwrap_or_default(),
                tail(&std::fs::read_to_string(&err).unwrap_or_default(), 40)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    Run {
        code: status.code(),
        stdout: String::from_utf8_lossy(&std::fs::read(&out).unwrap_or_default()).into_owned(),
        stderr: String::from_utf8_lossy(&std::fs::read(&err).unwrap_or_default()).into_owned(),
    }
}

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    /// A new directory under the system's temporary directory, named by
    /// this process, `name` and a counter (tests of this binary run in
    /// parallel).
    fn new(name: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("pressure-agents-{}-{name}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the temp dir");
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A port that was free on loopback a moment ago.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}

/// The mock provider and a gateway in front of it.
pub(crate) struct Stack {
    /// `None` only once [`stop`](Self::stop) took it.
    mock: Option<MockProvider>,
    gateway: Child,
    /// The gateway's proxy root, `http://127.0.0.1:<port>`.
    pub(crate) proxy: String,
    admin: String,
    log: PathBuf,
    dir: TempDir,
    http: reqwest::Client,
}

/// One chat model of the gateway's table, at the one price.
fn model(provider: &str, name: &str) -> Value {
    json!({
        "provider": provider, "model": name,
        "context": { "contextTokens": 1_000_000, "maxOutputTokens": 128_000, "defaultMaxTokens": 4096 },
        "price": {
            "inputMicroUsdPer1M": PRICE_IN, "outputMicroUsdPer1M": PRICE_OUT,
            "cacheWriteMicroUsdPer1M": PRICE_CACHE_WRITE, "cacheReadMicroUsdPer1M": PRICE_CACHE_READ
        }
    })
}

/// The gateway's config: the agents' use case, the two tenants with
/// `budget` micro-dollars a day each.
fn config(listen: u16, admin: u16, mock: &str, budget: u64) -> Value {
    let keys: Vec<Value> = KEYS
        .iter()
        .map(|(key, sha)| json!({ "sha256": sha, "tenant": key, "name": key }))
        .collect();
    json!({ "gateway": {
        "listen": format!("127.0.0.1:{listen}"),
        "admin": { "listen": format!("127.0.0.1:{admin}") },
        // Required; nothing in these tests goes to it.
        "upstreams": { "none": { "url": mock.trim_end_matches("/v1"), "pathPrefix": "/none" } },
        "backend": { "type": "memory" },
        "auth": { "required": true, "apiKeys": keys },
        "pressure": { "perTenant": { "enabled": true, "limits": {
            "requestsPerDay": REQUESTS_PER_DAY, "costMicroUsdPerDay": budget
        } } },
        // Claude Code's ids go to the Anthropic provider with an OpenAI
        // (chat completions) backup; Codex's to the OpenAI Responses
        // provider with the Anthropic one as backup: each agent's own wire
        // first, the other vendor's on a storm.
        "llm": {
            "providers": {
                "anthropic": { "kind": "anthropic", "baseUrl": mock },
                "openai": { "kind": "openai", "baseUrl": mock },
                "responses": { "kind": "openai-responses", "baseUrl": mock }
            },
            "models": [
                model("anthropic", CLAUDE_MODEL),
                model("openai", CODEX_MODEL),
                model("responses", CODEX_MODEL)
            ],
            "useCases": {
                "claude": {
                    "chain": [
                        { "model": format!("anthropic/{CLAUDE_MODEL}") },
                        { "model": format!("openai/{CODEX_MODEL}") }
                    ],
                    "aliases": ["claude-*"],
                    "retry": { "maxAttempts": 1 },
                    "totalMs": 60_000
                },
                "codex": {
                    "chain": [
                        { "model": format!("responses/{CODEX_MODEL}") },
                        { "model": format!("anthropic/{CLAUDE_MODEL}") }
                    ],
                    "aliases": ["gpt-5*", "*codex*"],
                    "retry": { "maxAttempts": 1 },
                    "totalMs": 60_000
                }
            }
        }
    } })
}

impl Stack {
    /// Starts the mock and the gateway (ready on `/readyz`), each tenant
    /// with a daily budget of `budget` micro-dollars.
    pub(crate) async fn start(budget: u64) -> Self {
        let price = Price::new(PRICE_IN, PRICE_OUT);
        let mock = MockProvider::start(
            ([127, 0, 0, 1], 0).into(),
            MockConfig {
                prices: BTreeMap::new(),
                default_price: price,
                seed: Some(7),
                ..MockConfig::default()
            },
        )
        .await
        .expect("start the mock provider");
        let dir = TempDir::new("stack");
        let (listen, admin) = (free_port(), free_port());
        let path = dir.0.join("gateway.json");
        let cfg = config(listen, admin, &mock.base_url(), budget);
        std::fs::write(&path, serde_json::to_vec_pretty(&cfg).expect("json")).expect("write config");
        let log = dir.0.join("gateway.log");
        let gateway = Command::new(env!("CARGO_BIN_EXE_pressure"))
            .arg("gateway")
            .arg("--config")
            .arg(&path)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("spawn the pressure binary");
        let mut stack = Self {
            mock: Some(mock),
            gateway,
            proxy: format!("http://127.0.0.1:{listen}"),
            admin: format!("http://127.0.0.1:{admin}"),
            log,
            dir,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("client"),
        };
        stack.wait_ready().await;
        stack
    }

    /// Waits (30 s at most) until the admin `/readyz` answers 200.
    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.gateway.try_wait() {
                panic!("the gateway exited early ({status}):\n{}", self.log_tail());
            }
            if let Ok(r) = self.http.get(format!("{}/readyz", self.admin)).send().await {
                if r.status() == 200 {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "not ready within 30 s:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The last lines the gateway logged.
    pub(crate) fn log_tail(&self) -> String {
        format!(
            "--- gateway log\n{}",
            tail(&std::fs::read_to_string(&self.log).unwrap_or_default(), 30)
        )
    }

    /// `GET /admin/pressure/tenants/{tenant}/limits`.
    async fn tenant_limits(&self, tenant: &str) -> Value {
        let url = format!("{}/admin/pressure/tenants/{tenant}/limits", self.admin);
        let r = self.http.get(&url).send().await.expect("GET tenant limits");
        assert_eq!(r.status(), 200, "GET {url}");
        r.json().await.expect("json")
    }

    /// What `dimension` of `tenant` has used (0 when not listed).
    async fn used(&self, tenant: &str, dimension: &str) -> u64 {
        let limits = self.tenant_limits(tenant).await;
        limits["usage"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|u| u["dimension"] == dimension)
            .map(|u| {
                u["used"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("used of {dimension}: {limits}"))
            })
            .unwrap_or(0)
    }

    /// The tenant's money spent today, in micro-dollars, from the gateway.
    pub(crate) async fn tenant_spend(&self, tenant: &str) -> u64 {
        self.used(tenant, "costMicroUsdPerDay").await
    }

    /// The requests the gateway counted for the tenant today (admitted
    /// ones: a refused call gives its request back).
    pub(crate) async fn gateway_requests_of(&self, tenant: &str) -> u64 {
        self.used(tenant, "requestsPerDay").await
    }

    /// The LLM calls the gateway took (`pressure_llm_requests_total` of
    /// `/metrics`; the stack has one gateway of its own).
    pub(crate) async fn llm_calls(&self) -> u64 {
        let url = format!("{}/metrics", self.admin);
        let r = self.http.get(&url).send().await.expect("GET /metrics");
        assert_eq!(r.status(), 200, "GET {url}");
        let text = r.text().await.expect("text");
        text.lines()
            .find_map(|l| l.strip_prefix("pressure_llm_requests_total "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The tenant's daily money budget in force.
    pub(crate) async fn tenant_budget(&self, tenant: &str) -> Option<u64> {
        self.tenant_limits(tenant).await["limits"]["costMicroUsdPerDay"].as_u64()
    }

    /// Gives `tenant` a daily budget of `budget` micro-dollars, live.
    pub(crate) async fn set_budget(&self, tenant: &str, budget: u64) {
        let url = format!("{}/admin/pressure/tenants/{tenant}/limits", self.admin);
        let body = json!({ "requestsPerDay": REQUESTS_PER_DAY, "costMicroUsdPerDay": budget });
        let r = self
            .http
            .put(&url)
            .json(&body)
            .send()
            .await
            .expect("PUT tenant limits");
        let status = r.status();
        assert_eq!(status, 200, "PUT {url}: {}", r.text().await.unwrap_or_default());
    }

    /// A fresh, empty directory of the stack's own, for an agent's home.
    fn fresh(&self, name: &str) -> PathBuf {
        let d = self.dir.0.join(name);
        std::fs::create_dir_all(&d).expect("create dir");
        d
    }

    /// `claude -p <prompt> --model CLAUDE_MODEL` with `key`, pointed at the
    /// gateway, offline and non-interactive, in an empty directory with a
    /// home of its own.
    pub(crate) async fn claude(&self, claude: &Path, key: &str, prompt: &str) -> Run {
        let home = self.fresh(&format!("claude-home-{key}"));
        let cwd = self.fresh(&format!("claude-work-{key}"));
        let mut cmd = Command::new(claude);
        cmd.args(["-p", prompt, "--model", CLAUDE_MODEL])
            .current_dir(&cwd)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("CLAUDE_CONFIG_DIR", home.join(".claude"))
            .env("ANTHROPIC_BASE_URL", &self.proxy)
            .env("ANTHROPIC_API_KEY", key)
            .env("DISABLE_TELEMETRY", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("DISABLE_ERROR_REPORTING", "1");
        run(&mut cmd, Duration::from_secs(120)).await
    }

    /// `codex exec --skip-git-repo-check <prompt>` with `key`, its provider
    /// `pressure` the gateway's `/v1` (Responses wire), in an empty
    /// directory with a `CODEX_HOME` of its own.
    pub(crate) async fn codex(&self, codex: &Path, key: &str, prompt: &str) -> Run {
        let home = self.fresh(&format!("codex-home-{key}"));
        let codex_home = home.join(".codex");
        std::fs::create_dir_all(&codex_home).expect("codex home");
        let toml = format!(
            "model = \"{CODEX_MODEL}\"\nmodel_provider = \"pressure\"\n\n[model_providers.pressure]\n\
             name = \"pressure\"\nbase_url = \"{}/v1\"\nenv_key = \"PRESSURE_API_KEY\"\nwire_api = \"responses\"\n",
            self.proxy
        );
        std::fs::write(codex_home.join("config.toml"), toml).expect("config.toml");
        let cwd = self.fresh(&format!("codex-work-{key}"));
        let mut cmd = Command::new(codex);
        cmd.args(["exec", "--skip-git-repo-check", prompt])
            .current_dir(&cwd)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("CODEX_HOME", &codex_home)
            .env("PRESSURE_API_KEY", key);
        run(&mut cmd, Duration::from_secs(120)).await
    }

    /// Stops the gateway (killed and reaped) and the mock.
    pub(crate) async fn stop(mut self) {
        self.kill_gateway();
        if let Some(mock) = self.mock.take() {
            mock.shutdown().await;
        }
    }

    /// Kills and reaps the gateway.
    fn kill_gateway(&mut self) {
        let _ = self.gateway.kill();
        let _ = self.gateway.wait();
    }

    /// The mock provider.
    pub(crate) fn mock(&self) -> &MockProvider {
        self.mock.as_ref().expect("the mock runs until stop")
    }
}

impl Drop for Stack {
    /// A failed test's stack goes too: the gateway is killed and reaped
    /// (the mock stops when dropped).
    fn drop(&mut self) {
        self.kill_gateway();
    }
}
