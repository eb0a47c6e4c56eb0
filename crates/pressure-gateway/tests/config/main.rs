//! Config loading tests: the docs/architecture.md#the-gateway example and the shipped examples
//! parse; every validation rule, and every kind of shape error, is refused
//! with the exact JSON path (and message) an operator would need; plugin
//! manifests merge, conflict and fail with their file named.

use pressure_gateway::config::{load, parse, parse_in, BackendConfig, ConfigError, GatewayConfig};
use pressure_llm::pipeline::ModelKind;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The example of docs/architecture.md#the-gateway, verbatim.
const DESIGN_EXAMPLE: &str = r#"{
  "gateway": {
    "listen": "127.0.0.1:8080",
    "upstreams": {
      "rest": { "url": "http://127.0.0.1:9001", "pathPrefix": "/api/v1" }
    },
    "backend": { "type": "memory" },
    "auth": { "required": false,
              "jwt": { "algorithms": ["HS256"], "secretEnv": "GATEWAY_JWT_SECRET",
                       "tenantClaim": "namespaceId" } },
    "admin": { "listen": "127.0.0.1:8081" },
    "pressure": {
      "enabled": true,
      "perService": { "rest": { "requestsPerSecond": 50 } },
      "perRoute": [{
        "resource": "gateway:route:webhooks-github",
        "pathPrefix": "/api/v1/webhooks/github",
        "limits": { "requestsPerSecond": 100, "maxConcurrentRequests": 200 }
      }],
      "perTenant": { "enabled": true, "limits": { "requestsPerMinute": 6000 } }
    }
  }
}"#;

/// A 2048-bit RSA public key (SPKI PEM), for RS256 configs.
const RSA_PUBLIC_KEY: &str = "-----BEGIN PUBLIC KEY-----
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAwV8/oHLU8gAWrTkgegw0
IhxJYAcgoQryiXc4Ocb2VKI7OdiJMYMwx5Gt/0Noo/cR6sumkFPiSzfBmeuIhCoE
j8dLYXu3FgBgqtB2AIMlO27EYygRJiIFL4agvef7+81YFwNLk6AzOFYIsue2IHy2
HVDDcw+9YQA/Ns34A3RitR5zkt2oHL+0zM985iGFcrXRYAIaqxG+2bZ91p58LACU
qfYzw6DM4IiqDwkWGj6MkSY6Gj3kyuFow7ynjS8AGeyA5M02uSmL/7XLnusBECMy
TKVA2c+wA8ymQBIkvB5+ZU5CVlKvPl55yCjgd/5MPBr6loS1hX3/PV4U7D5gLTTn
nQIDAQAB
-----END PUBLIC KEY-----
";

/// Secret variable of the table's base config; set by `invalid_configs`.
const TABLE_SECRET: &str = "PRESSURE_CONFIG_TEST_TABLE_SECRET";

/// Sets an environment variable for this test process. Each test uses its
/// own variable names, and none is ever removed, so tests don't race.
fn set_env(name: &str, value: &str) {
    std::env::set_var(name, value);
}

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("pressure-config-test-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        Self(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.0.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create dir");
        }
        std::fs::write(&path, content).expect("write file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn design_example_parses() {
    set_env("GATEWAY_JWT_SECRET", "test-secret");
    let cfg = parse(DESIGN_EXAMPLE).unwrap();
    assert_eq!(cfg.listen, "127.0.0.1:8080");
    assert_eq!(cfg.upstreams["rest"].path_prefix, "/api/v1");
    assert_eq!(cfg.backend, BackendConfig::Memory);
    assert_eq!(cfg.pressure.per_service["rest"].requests_per_second, Some(50));
    assert_eq!(cfg.pressure.per_route.len(), 1);
    assert_eq!(
        cfg.pressure.per_route[0].limits.max_concurrent_requests,
        Some(200)
    );
    assert!(cfg.pressure.per_tenant.enabled);
    let jwt = cfg.auth.jwt.as_ref().unwrap();
    assert_eq!(jwt.algorithms, ["HS256"]);
    assert_eq!(jwt.tenant_claim, "namespaceId");
    assert!(!cfg.auth.required);
}

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

#[test]
fn the_llm_example_parses_with_its_embedding_use_case() {
    let path = examples_dir().join("gateway-llm.json");
    let cfg = load(&path).unwrap_or_else(|e| panic!("gateway-llm.json: {e}"));
    let llm = cfg.llm.as_ref().expect("gateway.llm");
    assert_eq!(llm.use_case_kind("chat"), Some(ModelKind::Chat));
    assert_eq!(llm.use_case_kind("search"), Some(ModelKind::Embedding));
    let embed = llm.model("demo/demo-embed").expect("the embedding model");
    assert_eq!(embed.kind, ModelKind::Embedding);
    assert_eq!(embed.max_input_tokens, Some(8191));
    // An embedding chain with a rules level is refused, naming the level.
    let text = std::fs::read_to_string(&path).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    v["gateway"]["llm"]["useCases"]["search"]["chain"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "rules": "support-keywords" }));
    let e = parse(&v.to_string()).unwrap_err();
    assert!(
        e.to_string().contains("gateway.llm.useCases.search.chain[2]"),
        "{e}"
    );
}

#[test]
fn shipped_examples_parse() {
    set_env("GATEWAY_JWT_SECRET", "test-secret");
    for name in ["gateway.json", "gateway-jwt.json"] {
        let path = examples_dir().join(name);
        let text = std::fs::read_to_string(&path).unwrap();
        let cfg = parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(cfg, load(&path).unwrap_or_else(|e| panic!("{name}: {e}")));
        assert_eq!(cfg.listen, "127.0.0.1:8080");
        assert_eq!(cfg.admin.listen, "127.0.0.1:8081");
        assert_eq!(cfg.upstreams["demo"].url, "http://127.0.0.1:9001");
        assert_eq!(cfg.upstreams["demo"].path_prefix, "/");
        assert_eq!(cfg.backend, BackendConfig::Memory);
        assert_eq!(cfg.pressure.per_service["demo"].requests_per_second, Some(50));
        let route = &cfg.pressure.per_route[0];
        assert_eq!(route.resource, "gateway:route:webhooks-github");
        assert_eq!(route.path_prefix, "/webhooks/github");
        assert_eq!(route.limits.requests_per_second, Some(5));
        assert_eq!(route.limits.max_concurrent_requests, Some(20));
    }
    let plain = parse(&std::fs::read_to_string(examples_dir().join("gateway.json")).unwrap()).unwrap();
    assert!(!plain.pressure.per_tenant.enabled);
    assert!(plain.auth.jwt.is_none());
    let jwt = parse(&std::fs::read_to_string(examples_dir().join("gateway-jwt.json")).unwrap()).unwrap();
    assert!(jwt.pressure.per_tenant.enabled);
    assert_eq!(
        jwt.pressure
            .per_tenant
            .limits
            .as_ref()
            .unwrap()
            .requests_per_minute,
        Some(600)
    );
    let auth = jwt.auth.jwt.as_ref().unwrap();
    assert_eq!(auth.algorithms, ["HS256"]);
    assert_eq!(auth.secret_env.as_deref(), Some("GATEWAY_JWT_SECRET"));
}

#[test]
fn shipped_llm_examples_parse() {
    use pressure_llm::provider::ProviderKind;
    let openai =
        load(&examples_dir().join("gateway-llm.json")).unwrap_or_else(|e| panic!("gateway-llm.json: {e}"));
    let llm = openai.llm.expect("gateway-llm.json has gateway.llm");
    assert!(llm.providers.values().all(|p| p.kind == ProviderKind::OpenAi));

    let agents = load(&examples_dir().join("gateway-agents.json"))
        .unwrap_or_else(|e| panic!("gateway-agents.json: {e}"));
    let llm = agents.llm.expect("gateway-agents.json has gateway.llm");
    assert_eq!(llm.providers["anthropic"].kind, ProviderKind::Anthropic);
    assert_eq!(
        llm.providers["openai-responses"].kind,
        ProviderKind::OpenAiResponses
    );
    for (id, use_case) in [
        ("claude-sonnet-4-5-20250929", "claude-code"),
        ("claude-haiku-4-5", "claude-code"),
        ("gpt-5-codex", "codex"),
        ("gpt-5.1", "codex"),
    ] {
        assert_eq!(llm.resolve_use_case(id), Some(use_case), "{id}");
    }
    assert_eq!(llm.resolve_use_case("gemini-2.5-pro"), None);

    let path = examples_dir().join("gateway-llm-anthropic.json");
    let cfg = load(&path).unwrap_or_else(|e| panic!("gateway-llm-anthropic.json: {e}"));
    let llm = cfg.llm.expect("gateway-llm-anthropic.json has gateway.llm");
    assert_eq!(llm.providers["openai"].kind, ProviderKind::OpenAi);
    assert_eq!(llm.providers["anthropic"].kind, ProviderKind::Anthropic);
    assert_eq!(
        llm.providers["anthropic"].api_key_env.as_deref(),
        Some("ANTHROPIC_API_KEY")
    );
    let chain = &llm.use_cases["support"].chain;
    let models: Vec<&str> = chain
        .iter()
        .filter_map(|l| match l {
            pressure_llm::pipeline::ChainLevel::Model(m) => Some(m.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        models[0].starts_with("openai/") && models[1].starts_with("anthropic/"),
        "{models:?}"
    );
}

/// A valid config exercising every section; each table case breaks one thing.
fn base() -> Value {
    json!({
        "gateway": {
            "listen": "127.0.0.1:8080",
            "upstreams": {
                "rest": { "url": "http://127.0.0.1:9001", "pathPrefix": "/api/v1" },
                "hooks": { "url": "http://127.0.0.1:9002/base", "pathPrefix": "/webhooks" }
            },
            "backend": { "type": "memory" },
            "auth": { "required": false,
                      "jwt": { "algorithms": ["HS256", "HS512"], "secretEnv": TABLE_SECRET,
                               "tenantClaim": "namespaceId" } },
            "admin": { "listen": "127.0.0.1:8081" },
            "pressure": {
                "enabled": true,
                "perService": { "rest": { "requestsPerSecond": 50 } },
                "perRoute": [
                    { "resource": "gateway:route:webhooks-github", "pathPrefix": "/webhooks/github",
                      "limits": { "requestsPerSecond": 100, "maxConcurrentRequests": 200 } },
                    { "resource": "gateway:route:webhooks-stripe", "pathPrefix": "/webhooks/stripe",
                      "limits": { "requestsPerSecond": 10 } }
                ],
                "perTenant": { "enabled": true, "limits": { "requestsPerMinute": 6000 } }
            },
            "limits": { "maxHeaderBytes": 65536, "maxBodyBytes": 1048576 },
            "timeouts": { "connectMs": 1000, "totalMs": 30000 }
        },
        "other": { "ignored": true }
    })
}

fn remove(v: &mut Value, key: &str) {
    v.as_object_mut().expect("an object").remove(key);
}

fn redis(v: &mut Value) {
    v["gateway"]["backend"] = json!({ "type": "redis", "url": "redis://127.0.0.1:6379" });
}

fn no_tenants(v: &mut Value) {
    v["gateway"]["pressure"]["perTenant"] = json!({ "enabled": false });
}

fn jwt(v: &mut Value) -> &mut Value {
    &mut v["gateway"]["auth"]["jwt"]
}

/// SHA-256 of three test keys (`printf %s "$KEY" | sha256sum`).
const KEY_HASHES: [&str; 3] = [
    "dbc9f30fa0654bbde44fdd7e391c8aa31fa3172daf5fb6b423a9b7c6a41b94f2",
    "f94f1ac4cbbb3a480488a071025e9f61a3d7014e22253ee667f69ea9625edad6",
    "6fbbf6e08875534e489068fd40607067d544c824f5908f7118eed23699449fae",
];

/// Sets three valid `apiKeys` (`ci`, `batch` with limits, one unnamed) and
/// returns the list.
fn api_keys(v: &mut Value) -> &mut Value {
    v["gateway"]["auth"]["apiKeys"] = json!([
        { "sha256": KEY_HASHES[0], "tenant": "acme", "name": "ci" },
        { "sha256": KEY_HASHES[1], "tenant": "acme", "name": "batch",
          "limits": { "requestsPerMinute": 60 } },
        { "sha256": KEY_HASHES[2], "tenant": "globex" },
    ]);
    &mut v["gateway"]["auth"]["apiKeys"]
}

const NOT_A_HASH: &str =
    "gateway.auth.apiKeys[2].sha256: must be 64 lowercase hex digits, the SHA-256 of the \
                          key (printf %s \"$KEY\" | sha256sum)";

type Case = (&'static str, fn(&mut Value), &'static str);

/// Every rule, with the exact message (`path: problem`) it must produce.
const CASES: &[Case] = &[
    // ---- shape: unknown key, wrong type, negative number, missing key, JSON
    (
        "unknown key",
        |v| {
            let r = &mut v["gateway"]["pressure"]["perRoute"][0];
            r["limit"] = r["limits"].clone();
            remove(r, "limits");
        },
        "gateway.pressure.perRoute[0].limit: unknown key `limit` in gateway.pressure.perRoute[0] \
         (known keys: `resource`, `pathPrefix`, `limits`)",
    ),
    (
        "unknown key in limits",
        |v| v["gateway"]["pressure"]["perService"]["rest"]["rps"] = json!(5),
        "gateway.pressure.perService.rest.rps: unknown key `rps` in gateway.pressure.perService.rest \
         (known keys: `requestsPerSecond`, `requestsPerMinute`, `requestsPerHour`, `requestsPer24Hours`, \
         `tokensPerMinute`, `inputTokensPerMinute`, \
         `outputTokensPerMinute`, `maxConcurrentRequests`, `requestsPerDay`, `tokensPerDay`, \
         `costMicroUsdPerDay`, `costMicroUsdPerMonth`, `algorithm`, `burst`, `leaseTtlMs`, `leasing`, \
         `shadow`)",
    ),
    (
        "unknown key in gateway",
        |v| v["gateway"]["listn"] = json!("x"),
        "gateway.listn: unknown key `listn` in gateway (known keys: `listen`, `upstreams`, `backend`, `auth`, \
         `admin`, `pressure`, `limits`, `timeouts`, `shutdownGraceMs`, `llm`, `tls`, `accessLog`, `denialLog`, \
         `decisions`, `rls`, `tracing`)",
    ),
    (
        "tracing endpoint that is not a URL",
        |v| v["gateway"]["tracing"] = json!({ "endpoint": "collector:4318" }),
        "gateway.tracing.endpoint: `collector:4318` must be an http:// or https:// URL with a host",
    ),
    (
        "tracing protocol unknown",
        |v| v["gateway"]["tracing"] = json!({ "protocol": "http/json" }),
        "gateway.tracing.protocol: unknown value `http/json` (expected `http/protobuf` or `grpc`)",
    ),
    (
        "tracing sample ratio above 1",
        |v| v["gateway"]["tracing"] = json!({ "sampleRatio": 1.5 }),
        "gateway.tracing.sampleRatio: must be between 0 and 1, got 1.5",
    ),
    (
        "denial log budget that is not a count",
        |v| v["gateway"]["denialLog"] = json!({ "linesPerResourcePerSecond": -1 }),
        "gateway.denialLog.linesPerResourcePerSecond: must be a non-negative integer (got -1)",
    ),
    (
        "wrong type",
        |v| v["gateway"]["listen"] = json!(8080),
        "gateway.listen: must be a string (got 8080)",
    ),
    (
        "wrong type: object expected",
        |v| v["gateway"]["upstreams"] = json!([]),
        "gateway.upstreams: must be an object (got an array)",
    ),
    (
        "wrong type in array",
        |v| *jwt(v) = json!({ "algorithms": "HS256", "secretEnv": TABLE_SECRET }),
        "gateway.auth.jwt.algorithms: must be an array (got string \"HS256\")",
    ),
    (
        "negative number",
        |v| v["gateway"]["pressure"]["perRoute"][1]["limits"]["requestsPerSecond"] = json!(-5),
        "gateway.pressure.perRoute[1].limits.requestsPerSecond: must be a non-negative integer (got -5)",
    ),
    (
        "fraction",
        |v| v["gateway"]["timeouts"]["totalMs"] = json!(1.5),
        "gateway.timeouts.totalMs: must be a non-negative integer (got 1.5)",
    ),
    (
        "negative maxTenants",
        |v| v["gateway"]["pressure"]["perTenant"]["maxTenants"] = json!(-1),
        "gateway.pressure.perTenant.maxTenants: must be a non-negative integer (got -1)",
    ),
    (
        "unknown algorithm value",
        |v| v["gateway"]["pressure"]["perService"]["rest"]["algorithm"] = json!("leaky"),
        "gateway.pressure.perService.rest.algorithm: unknown value `leaky` (expected `window` or `gcra`)",
    ),
    (
        "missing key",
        |v| remove(&mut v["gateway"]["upstreams"]["rest"], "url"),
        "gateway.upstreams.rest.url: is required",
    ),
    (
        "missing gateway",
        |v| remove(v, "gateway"),
        "gateway: is required",
    ),
    (
        "unknown backend type",
        |v| v["gateway"]["backend"] = json!({ "type": "mongo" }),
        "gateway.backend.type: unknown value `mongo` (expected `memory` or `redis`)",
    ),
    (
        "backend without type",
        |v| v["gateway"]["backend"] = json!({}),
        "gateway.backend.type: is required",
    ),
    (
        "redis field wrong type",
        |v| v["gateway"]["backend"] = json!({ "type": "redis", "timeoutMs": "fast" }),
        "gateway.backend.timeoutMs: must be a non-negative integer (got string \"fast\")",
    ),
    (
        "redis unknown key",
        |v| v["gateway"]["backend"] = json!({ "type": "redis", "urls": [] }),
        "gateway.backend.urls: unknown key `urls` in gateway.backend (known keys: `url`, `clusterNodes`, \
         `keyPrefix`, `timeoutMs`, `connectTimeoutMs`, `failureMode`, `localShare`, `connections`, `denyCache`, `tls`)",
    ),
    (
        "memory backend with settings",
        |v| v["gateway"]["backend"] = json!({ "type": "memory", "url": "redis://x:1" }),
        "gateway.backend.url: unknown key `url` in gateway.backend (the memory backend has no settings)",
    ),
    // ---- listeners
    (
        "listen not an address",
        |v| v["gateway"]["listen"] = json!("localhost"),
        "gateway.listen: \"localhost\" is not a socket address (expected ip:port, e.g. 127.0.0.1:8080)",
    ),
    (
        "admin listen not an address",
        |v| v["gateway"]["admin"]["listen"] = json!("127.0.0.1"),
        "gateway.admin.listen: \"127.0.0.1\" is not a socket address (expected ip:port, e.g. 127.0.0.1:8080)",
    ),
    (
        "admin not loopback",
        |v| v["gateway"]["admin"]["listen"] = json!("0.0.0.0:8081"),
        "gateway.admin.listen: must be a loopback address unless tokenEnv is set",
    ),
    (
        "admin token variable unset",
        |v| {
            v["gateway"]["admin"] =
                json!({ "listen": "0.0.0.0:8081", "tokenEnv": "PRESSURE_CONFIG_TEST_UNSET_ADMIN" })
        },
        "gateway.admin.tokenEnv: environment variable PRESSURE_CONFIG_TEST_UNSET_ADMIN is not set",
    ),
    (
        "admin on the proxy's address",
        |v| v["gateway"]["admin"]["listen"] = json!("127.0.0.1:8080"),
        "gateway.admin.listen: same address as gateway.listen (127.0.0.1:8080)",
    ),
    // ---- upstreams
    (
        "no upstream",
        |v| {
            v["gateway"]["upstreams"] = json!({});
            v["gateway"]["pressure"]["perService"] = json!({});
        },
        "gateway.upstreams: at least one upstream is required",
    ),
    (
        "ftp upstream",
        |v| v["gateway"]["upstreams"]["rest"]["url"] = json!("ftp://api.example.com"),
        "gateway.upstreams.rest.url: only http:// and https:// upstreams are supported",
    ),
    (
        "upstream without scheme",
        |v| v["gateway"]["upstreams"]["rest"]["url"] = json!("127.0.0.1:9001"),
        "gateway.upstreams.rest.url: \"127.0.0.1:9001\" is not an absolute URL (expected http://host:port)",
    ),
    (
        "upstream url unparsable",
        |v| v["gateway"]["upstreams"]["rest"]["url"] = json!("http://exa mple:80"),
        "gateway.upstreams.rest.url: \"http://exa mple:80\" is not a valid URL: invalid uri character",
    ),
    (
        "upstream url with query",
        |v| v["gateway"]["upstreams"]["rest"]["url"] = json!("http://127.0.0.1:9001/x?a=1"),
        "gateway.upstreams.rest.url: must not have a query string",
    ),
    (
        "upstream url with credentials",
        |v| v["gateway"]["upstreams"]["rest"]["url"] = json!("http://u:p@127.0.0.1:9001"),
        "gateway.upstreams.rest.url: must not contain credentials",
    ),
    (
        "upstream pathPrefix without slash",
        |v| v["gateway"]["upstreams"]["hooks"]["pathPrefix"] = json!("webhooks"),
        "gateway.upstreams.hooks.pathPrefix: must start with /",
    ),
    (
        "upstreams share a pathPrefix",
        // Names are visited in order: "hooks" before "rest".
        |v| v["gateway"]["upstreams"]["rest"]["pathPrefix"] = json!("/webhooks"),
        "gateway.upstreams.rest.pathPrefix: \"/webhooks\" is also the pathPrefix of gateway.upstreams.hooks",
    ),
    // ---- limits (compiled by pressure_core)
    (
        "limit zero in perRoute[1]",
        |v| v["gateway"]["pressure"]["perRoute"][1]["limits"]["requestsPerSecond"] = json!(0),
        "gateway.pressure.perRoute[1].limits.requestsPerSecond: must be > 0",
    ),
    (
        "empty limits",
        |v| v["gateway"]["pressure"]["perRoute"][0]["limits"] = json!({}),
        "gateway.pressure.perRoute[0].limits: at least one limit must be set",
    ),
    (
        "burst without gcra",
        |v| v["gateway"]["pressure"]["perRoute"][0]["limits"]["burst"] = json!(10),
        "gateway.pressure.perRoute[0].limits.burst: only applies with \"algorithm\": \"gcra\"",
    ),
    (
        "perService limit zero",
        |v| v["gateway"]["pressure"]["perService"]["rest"]["maxConcurrentRequests"] = json!(0),
        "gateway.pressure.perService.rest.maxConcurrentRequests: must be > 0",
    ),
    (
        "perTenant limit zero",
        |v| v["gateway"]["pressure"]["perTenant"]["limits"]["requestsPerMinute"] = json!(0),
        "gateway.pressure.perTenant.limits.requestsPerMinute: must be > 0",
    ),
    // ---- pressure
    (
        "perService names no upstream",
        |v| v["gateway"]["pressure"]["perService"]["graphql"] = json!({ "requestsPerSecond": 5 }),
        "gateway.pressure.perService.graphql: no upstream named graphql",
    ),
    (
        "perRoute resource empty",
        |v| v["gateway"]["pressure"]["perRoute"][1]["resource"] = json!(""),
        "gateway.pressure.perRoute[1].resource: must not be empty",
    ),
    (
        "perRoute resource duplicate",
        |v| v["gateway"]["pressure"]["perRoute"][1]["resource"] = json!("gateway:route:webhooks-github"),
        "gateway.pressure.perRoute[1].resource: \"gateway:route:webhooks-github\" conflicts with \
         gateway.pressure.perRoute[0]",
    ),
    (
        "perRoute resource is a tenant's",
        |v| v["gateway"]["pressure"]["perRoute"][0]["resource"] = json!("gateway:tenant:acme"),
        "gateway.pressure.perRoute[0].resource: the prefix gateway:tenant: is reserved for perTenant resources",
    ),
    (
        "perRoute resource is a service's",
        |v| v["gateway"]["pressure"]["perRoute"][0]["resource"] = json!("gateway:service:rest"),
        "gateway.pressure.perRoute[0].resource: \"gateway:service:rest\" is the resource of \
         gateway.pressure.perService.rest",
    ),
    (
        "perRoute pathPrefix without slash",
        |v| v["gateway"]["pressure"]["perRoute"][0]["pathPrefix"] = json!("webhooks/github"),
        "gateway.pressure.perRoute[0].pathPrefix: must start with /",
    ),
    (
        "perRoute pathPrefix duplicate",
        |v| v["gateway"]["pressure"]["perRoute"][1]["pathPrefix"] = json!("/webhooks/github"),
        "gateway.pressure.perRoute[1].pathPrefix: \"/webhooks/github\" conflicts with gateway.pressure.perRoute[0]",
    ),
    (
        "perTenant without limits",
        |v| remove(&mut v["gateway"]["pressure"]["perTenant"], "limits"),
        "gateway.pressure.perTenant.limits: is required when perTenant.enabled is true",
    ),
    (
        "perTenant without jwt",
        |v| remove(&mut v["gateway"]["auth"], "jwt"),
        "gateway.pressure.perTenant.enabled: requires gateway.auth.jwt, gateway.auth.apiKeys or \
         gateway.auth.runtimeKeys (the tenant comes from a JWT claim or an API key)",
    ),
    (
        "maxTenants zero",
        |v| v["gateway"]["pressure"]["perTenant"]["maxTenants"] = json!(0),
        "gateway.pressure.perTenant.maxTenants: must be > 0",
    ),
    // ---- auth
    (
        "auth required without jwt",
        |v| {
            no_tenants(v);
            v["gateway"]["auth"] = json!({ "required": true });
        },
        "gateway.auth.required: requires gateway.auth.jwt, gateway.auth.apiKeys or \
         gateway.auth.runtimeKeys (nothing can name a tenant without them)",
    ),
    // ---- auth.apiKeys
    (
        "apiKeys hash not hex",
        |v| api_keys(v)[2]["sha256"] = json!("zz".repeat(32)),
        NOT_A_HASH,
    ),
    (
        "apiKeys hash in capitals",
        |v| api_keys(v)[2]["sha256"] = json!(KEY_HASHES[2].to_uppercase()),
        NOT_A_HASH,
    ),
    (
        "apiKeys hash too short",
        |v| api_keys(v)[2]["sha256"] = json!(&KEY_HASHES[2][..63]),
        NOT_A_HASH,
    ),
    (
        "apiKeys hash twice",
        |v| api_keys(v)[2]["sha256"] = json!(KEY_HASHES[0]),
        "gateway.auth.apiKeys[2].sha256: the same key as gateway.auth.apiKeys[0]",
    ),
    (
        "apiKeys empty tenant",
        |v| api_keys(v)[2]["tenant"] = json!(""),
        "gateway.auth.apiKeys[2].tenant: must be 1 to 256 bytes",
    ),
    (
        "apiKeys malformed name",
        |v| api_keys(v)[1]["name"] = json!("has space"),
        "gateway.auth.apiKeys[1].name: must be 1 to 64 of A-Za-z0-9._:-",
    ),
    (
        "apiKeys name twice",
        |v| api_keys(v)[1]["name"] = json!("ci"),
        "gateway.auth.apiKeys[1].name: \"ci\" already names gateway.auth.apiKeys[0] (give one a distinct name)",
    ),
    (
        "apiKeys invalid limits",
        |v| api_keys(v)[1]["limits"] = json!({ "requestsPerSecond": 0 }),
        "gateway.auth.apiKeys[1].limits.requestsPerSecond: must be > 0",
    ),
    (
        "perRoute resource is an API key's",
        |v| {
            api_keys(v);
            v["gateway"]["pressure"]["perRoute"][0]["resource"] = json!("gateway:apikey:batch");
        },
        "gateway.pressure.perRoute[0].resource: the prefix gateway:apikey: is reserved for the limits of \
         gateway.auth.apiKeys",
    ),
    (
        "no algorithms",
        |v| jwt(v)["algorithms"] = json!([]),
        "gateway.auth.jwt.algorithms: must not be empty",
    ),
    (
        "alg none",
        |v| jwt(v)["algorithms"] = json!(["HS256", "none"]),
        "gateway.auth.jwt.algorithms[1]: \"none\" is never accepted",
    ),
    (
        "alg None in any case",
        |v| jwt(v)["algorithms"] = json!(["NoNe"]),
        "gateway.auth.jwt.algorithms[0]: \"NoNe\" is never accepted",
    ),
    (
        "alg names are case-sensitive",
        |v| jwt(v)["algorithms"] = json!(["hs256"]),
        "gateway.auth.jwt.algorithms[0]: unknown algorithm \"hs256\" (expected one of HS256, HS384, HS512, \
         RS256, RS384, RS512, ES256, ES384, PS256, PS384, PS512, EdDSA)",
    ),
    (
        "HMAC mixed with public key",
        |v| jwt(v)["algorithms"] = json!(["HS256", "RS256"]),
        "gateway.auth.jwt.algorithms: mixes HMAC and public-key algorithms (HS256 and RS256); use one kind",
    ),
    (
        "RSA mixed with EC",
        |v| *jwt(v) = json!({ "algorithms": ["RS256", "ES256"], "publicKeyFile": "key.pem" }),
        "gateway.auth.jwt.algorithms: RS256 needs an RSA key and ES256 an EC key, but there is one publicKeyFile",
    ),
    (
        "HS without secretEnv",
        |v| remove(jwt(v), "secretEnv"),
        "gateway.auth.jwt.secretEnv: is required for HS256",
    ),
    (
        "secret variable unset",
        |v| jwt(v)["secretEnv"] = json!("PRESSURE_CONFIG_TEST_UNSET_SECRET"),
        "gateway.auth.jwt.secretEnv: environment variable PRESSURE_CONFIG_TEST_UNSET_SECRET is not set",
    ),
    (
        "secret variable empty",
        // Set to "" by `invalid_configs`.
        |v| jwt(v)["secretEnv"] = json!("PRESSURE_CONFIG_TEST_EMPTY_SECRET"),
        "gateway.auth.jwt.secretEnv: environment variable PRESSURE_CONFIG_TEST_EMPTY_SECRET is not set",
    ),
    (
        "RS without publicKeyFile",
        |v| *jwt(v) = json!({ "algorithms": ["RS256", "PS256"] }),
        "gateway.auth.jwt.publicKeyFile: is required for RS256",
    ),
    (
        "EdDSA without publicKeyFile",
        |v| *jwt(v) = json!({ "algorithms": ["EdDSA"], "secretEnv": TABLE_SECRET }),
        "gateway.auth.jwt.publicKeyFile: is required for EdDSA",
    ),
    (
        "empty tenantClaim",
        |v| jwt(v)["tenantClaim"] = json!(""),
        "gateway.auth.jwt.tenantClaim: must not be empty",
    ),
    // ---- backend
    (
        "redis timeout zero",
        |v| {
            redis(v);
            v["gateway"]["backend"]["timeoutMs"] = json!(0);
        },
        "gateway.backend.timeoutMs: must be between 1 and 10000",
    ),
    (
        "redis localShare out of range",
        |v| {
            redis(v);
            v["gateway"]["backend"]["localShare"] = json!(1.5);
        },
        "gateway.backend.localShare: must be > 0 and at most 1",
    ),
    (
        "redis url not redis",
        |v| {
            redis(v);
            v["gateway"]["backend"]["url"] = json!("http://127.0.0.1:6379");
        },
        "gateway.backend.url: \"http://127.0.0.1:6379\" is not a Redis URL (expected redis://host:port or \
         rediss://host:port)",
    ),
    (
        "redis cluster node not redis",
        |v| {
            redis(v);
            v["gateway"]["backend"]["clusterNodes"] = json!(["redis://10.0.0.1:7000", "10.0.0.2:7000"]);
        },
        "gateway.backend.clusterNodes[1]: \"10.0.0.2:7000\" is not a Redis URL (expected redis://host:port or \
         rediss://host:port)",
    ),
    // ---- request limits and timeouts
    (
        "maxHeaderBytes too small",
        |v| v["gateway"]["limits"]["maxHeaderBytes"] = json!(8191),
        "gateway.limits.maxHeaderBytes: must be between 8192 and 1048576",
    ),
    (
        "maxHeaderBytes too large",
        |v| v["gateway"]["limits"]["maxHeaderBytes"] = json!(1_048_577),
        "gateway.limits.maxHeaderBytes: must be between 8192 and 1048576",
    ),
    (
        "maxBodyBytes zero",
        |v| v["gateway"]["limits"]["maxBodyBytes"] = json!(0),
        "gateway.limits.maxBodyBytes: must be > 0",
    ),
    (
        "connectMs zero",
        |v| v["gateway"]["timeouts"]["connectMs"] = json!(0),
        "gateway.timeouts.connectMs: must be > 0",
    ),
    (
        "totalMs zero",
        |v| v["gateway"]["timeouts"]["totalMs"] = json!(0),
        "gateway.timeouts.totalMs: must be > 0",
    ),
    (
        "llm: a model of an unknown provider",
        |v| {
            v["gateway"]["llm"] = json!({
                "providers": { "mock": { "baseUrl": "http://127.0.0.1:9003/v1" } },
                "models": [
                    { "provider": "mock", "model": "m1", "context": { "contextTokens": 1000, "maxOutputTokens": 100 } },
                    { "provider": "nope", "model": "m2", "context": { "contextTokens": 1000, "maxOutputTokens": 100 } }
                ],
                "useCases": { "support": { "chain": [ { "model": "mock/m1" } ] } }
            })
        },
        "gateway.llm.models[1].provider: unknown provider \"nope\"",
    ),
    (
        "llm: unknown key",
        |v| v["gateway"]["llm"] = json!({ "useCase": {} }),
        "gateway.llm.useCase: unknown key `useCase` in gateway.llm (known keys: `providers`, `models`, `rules`, \
         `useCases`, `breaker`)",
    ),
    (
        "llm: unknown provider kind",
        |v| {
            v["gateway"]["llm"] = json!({
                "providers": {
                    "openai": { "baseUrl": "http://127.0.0.1:9003/v1" },
                    "claude": { "kind": "gemini", "baseUrl": "http://127.0.0.1:9004/v1" }
                }
            })
        },
        "gateway.llm.providers.claude.kind: unknown value `gemini` (expected one of `openai`, `anthropic`, `openai-responses`, `local`)",
    ),
    (
        "llm: a local provider without its model directory",
        |v| {
            v["gateway"]["llm"] = json!({ "providers": { "local": { "kind": "local" } } })
        },
        "gateway.llm.providers.local.modelDir: required for a local provider: the directory of a sentence-transformers model",
    ),
    (
        "llm: a knn level on a remote embedding model",
        |v| {
            v["gateway"]["llm"] = json!({
                "providers": { "openai": { "baseUrl": "http://127.0.0.1:9003/v1" } },
                "models": [ { "provider": "openai", "model": "emb", "kind": "embedding" } ],
                "useCases": { "t": { "chain": [ {"knn": {"examples": "ex.jsonl", "model": "openai/emb"}} ] } }
            })
        },
        "gateway.llm.useCases.t.chain[0].knn.model: \"openai/emb\" is not on a local provider: the knn level embeds in process, so that it answers while remote providers are down",
    ),
    (
        "llm: a knn level with an unknown key",
        |v| {
            v["gateway"]["llm"] = json!({
                "useCases": { "t": { "chain": [ {"knn": {"examples": "e", "model": "m", "neighbours": 3}} ] } }
            })
        },
        "gateway.llm.useCases.t.chain[0].knn.neighbours: unknown key `neighbours` in gateway.llm.useCases.t.chain[0].knn (known keys: `examples`, `model`, `k`)",
    ),
    (
        "llm: fleet-wide breakers on the memory backend",
        |v| {
            v["gateway"]["llm"] = json!({
                "providers": { "mock": { "baseUrl": "http://127.0.0.1:9003/v1" } },
                "models": [
                    { "provider": "mock", "model": "m1", "context": { "contextTokens": 1000, "maxOutputTokens": 100 } }
                ],
                "useCases": { "support": { "chain": [ { "model": "mock/m1" } ] } },
                "breaker": { "scope": "fleet" }
            })
        },
        "gateway.llm.breaker.scope: \"fleet\" needs the redis backend (gateway.backend.type \"redis\"); use \"process\" or leave it out",
    ),
    (
        "llm: an unknown breaker scope",
        |v| v["gateway"]["llm"] = json!({ "breaker": { "scope": "planet" } }),
        "gateway.llm.breaker.scope: unknown value `planet` (expected `fleet` or `process`)",
    ),
    (
        "limits written as a positional array",
        |v| v["gateway"]["pressure"]["perService"]["rest"] = json!([5]),
        "gateway.pressure.perService.rest: must be an object (got an array)",
    ),
    (
        "a route written as a positional array",
        |v| {
            v["gateway"]["pressure"]["perRoute"][1] =
                json!(["gateway:route:x", "/x", { "requestsPerSecond": 1 }])
        },
        "gateway.pressure.perRoute[1]: must be an object (got an array)",
    ),
    (
        "leeway beyond ten minutes",
        |v| v["gateway"]["auth"]["jwt"]["leewaySecs"] = json!(1_000_000_000u64),
        "gateway.auth.jwt.leewaySecs: must be at most 600 (seconds of clock skew tolerated on exp/nbf)",
    ),
    (
        "leeway that would overflow",
        |v| v["gateway"]["auth"]["jwt"]["leewaySecs"] = json!(u64::MAX),
        "gateway.auth.jwt.leewaySecs: must be at most 600 (seconds of clock skew tolerated on exp/nbf)",
    ),
    (
        "control characters in a key are escaped",
        |v| v["gateway"]["pressure"]["perService"]["re\u{1b}[2Jst"] = json!({ "requestsPerSecond": 1 }),
        "gateway.pressure.perService.re\\u{1b}[2Jst: no upstream named re\\u{1b}[2Jst",
    ),
    (
        "connectMs above totalMs",
        |v| v["gateway"]["timeouts"] = json!({ "connectMs": 5000, "totalMs": 4000 }),
        "gateway.timeouts.connectMs: must be at most totalMs (4000)",
    ),
    // ---- decisions and pressure.resources
    (
        "decision listener off loopback without a token",
        |v| v["gateway"]["decisions"] = json!({ "listen": "0.0.0.0:8082" }),
        "gateway.decisions.tokenEnv: is required when gateway.decisions.listen (0.0.0.0:8082) is not a \
         loopback address",
    ),
    (
        "decision token variable not set",
        |v| {
            v["gateway"]["decisions"] =
                json!({ "listen": "0.0.0.0:8082", "tokenEnv": "PRESSURE_CONFIG_TEST_UNSET_DECISIONS" })
        },
        "gateway.decisions.tokenEnv: environment variable PRESSURE_CONFIG_TEST_UNSET_DECISIONS is not set",
    ),
    (
        "decision listener on the proxy's address",
        |v| v["gateway"]["decisions"] = json!({ "listen": "127.0.0.1:8080" }),
        "gateway.decisions.listen: same address as gateway.listen (127.0.0.1:8080)",
    ),
    (
        "decision listener address that is not one",
        |v| v["gateway"]["decisions"] = json!({ "listen": "localhost" }),
        "gateway.decisions.listen: \"localhost\" is not a socket address (expected ip:port, e.g. 127.0.0.1:8080)",
    ),
    (
        "unknown key in decisions",
        |v| v["gateway"]["decisions"] = json!({ "listen": "127.0.0.1:8082", "token": "x" }),
        "gateway.decisions.token: unknown key `token` in gateway.decisions (known keys: `listen`, `tokenEnv`, \
         `maxPermits`)",
    ),
    (
        "a resource with a route's id",
        |v| {
            v["gateway"]["pressure"]["resources"] =
                json!({ "gateway:route:webhooks-stripe": { "requestsPerSecond": 1 } })
        },
        "gateway.pressure.resources.gateway:route:webhooks-stripe: \"gateway:route:webhooks-stripe\" is the \
         resource of gateway.pressure.perRoute[1]",
    ),
    (
        "a resource with a tenant's id",
        |v| v["gateway"]["pressure"]["resources"] = json!({ "gateway:tenant:x": { "requestsPerSecond": 1 } }),
        "gateway.pressure.resources.gateway:tenant:x: the prefix gateway:tenant: is reserved for perTenant \
         resources",
    ),
    (
        "a resource with invalid limits",
        |v| v["gateway"]["pressure"]["resources"] = json!({ "jobs": { "requestsPerSecond": 0 } }),
        "gateway.pressure.resources.jobs.requestsPerSecond: must be > 0",
    ),
];

/// `apiKeys` alone names tenants: `required` and `perTenant` need no
/// `jwt` then; a printed config shows no more of a hash than its label.
#[test]
fn api_keys_alone_enable_tenant_auth() {
    let mut v = base();
    remove(&mut v["gateway"]["auth"], "jwt");
    v["gateway"]["auth"]["required"] = json!(true);
    api_keys(&mut v);
    let cfg = parse(&v.to_string()).unwrap_or_else(|e| panic!("keys alone are enough: {e}"));
    assert_eq!(cfg.auth.api_keys.len(), 3);
    assert_eq!(cfg.auth.api_keys[1].label(), "batch");
    assert_eq!(cfg.auth.api_keys[2].label(), &KEY_HASHES[2][..8]);
    let printed = format!("{cfg:?}");
    for hash in KEY_HASHES {
        assert!(!printed.contains(hash), "Debug prints a whole hash: {printed}");
        assert!(printed.contains(&hash[..8]), "{printed}");
    }
}

#[test]
fn a_positional_array_at_the_root_is_refused() {
    let text = format!("[{}]", base()["gateway"]);
    let e = parse(&text).expect_err("an array is not a config file");
    assert_eq!(e.to_string(), "(root): must be an object (got an array)");
}

#[test]
fn invalid_configs() {
    set_env(TABLE_SECRET, "table-secret");
    set_env("PRESSURE_CONFIG_TEST_EMPTY_SECRET", "");
    let text = base().to_string();
    parse(&text).unwrap_or_else(|e| panic!("the base config must be valid: {e}"));

    let mut failures = Vec::new();
    for (name, break_it, expected) in CASES {
        let mut v = base();
        break_it(&mut v);
        match parse(&v.to_string()) {
            Ok(_) => failures.push(format!("{name}: accepted, expected `{expected}`")),
            Err(e) => {
                let got = e.to_string();
                if got != *expected {
                    failures.push(format!("{name}:\n   got      `{got}`\n   expected `{expected}`"));
                }
                assert_eq!(
                    got,
                    format!("{}: {}", e.path, e.problem),
                    "{name}: Display is path: problem"
                );
                assert!(!e.is_io(), "{name}: not an I/O error");
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}

#[test]
fn the_design_error_message() {
    let mut v = base();
    no_tenants(&mut v);
    remove(&mut v["gateway"], "auth");
    v["gateway"]["pressure"]["perRoute"][1]["limits"]["requestsPerSecond"] = json!(0);
    let err = parse(&v.to_string()).unwrap_err();
    assert_eq!(err.path, "gateway.pressure.perRoute[1].limits.requestsPerSecond");
    assert_eq!(err.problem, "must be > 0");
    assert_eq!(
        err.to_string(),
        "gateway.pressure.perRoute[1].limits.requestsPerSecond: must be > 0"
    );
}

#[test]
fn invalid_json_names_the_position() {
    let err = parse(r#"{"gateway": {"listen": "127.0.0.1:8080",}}"#).unwrap_err();
    assert!(err.problem.starts_with("invalid JSON: "), "{err}");
    assert!(err.problem.contains("line 1 column"), "{err}");
    let err = parse(r#"{"gateway": {"listen": "127.0.0.1:8080", "upstreams": {}}} trailing"#).unwrap_err();
    assert_eq!(err.path, "(root)");
    assert!(
        err.problem.starts_with("invalid JSON: trailing characters"),
        "{err}"
    );
    let err = parse("[]").unwrap_err();
    assert_eq!(err.to_string(), "(root): must be an object (got an array)");
}

#[test]
fn admin_may_listen_anywhere_with_a_token() {
    set_env("PRESSURE_CONFIG_TEST_ADMIN_TOKEN", "t0ken");
    set_env("PRESSURE_CONFIG_TEST_ADMIN_SECRET", "s3cret");
    let mut v = base();
    jwt(&mut v)["secretEnv"] = json!("PRESSURE_CONFIG_TEST_ADMIN_SECRET");
    v["gateway"]["admin"] =
        json!({ "listen": "0.0.0.0:8081", "tokenEnv": "PRESSURE_CONFIG_TEST_ADMIN_TOKEN" });
    let cfg = parse(&v.to_string()).unwrap();
    assert_eq!(
        cfg.admin.token_env.as_deref(),
        Some("PRESSURE_CONFIG_TEST_ADMIN_TOKEN")
    );
}

#[test]
fn defaults_apply() {
    let cfg = parse(
        r#"{"gateway": {"listen": "127.0.0.1:8080",
             "upstreams": {"a": {"url": "http://localhost:9000", "pathPrefix": "/"}}}}"#,
    )
    .unwrap();
    assert_eq!(cfg.admin.listen, "127.0.0.1:8081");
    assert_eq!(cfg.backend, BackendConfig::Memory);
    assert!(cfg.pressure.enabled);
    assert!(!cfg.auth.required);
    assert!(cfg.pressure.per_route.is_empty());
    assert!(!cfg.pressure.per_tenant.enabled);
}

/// A valid config without auth, written to `dir/gateway.json`, with `edit`
/// applied; returns the file's path.
fn write_config(dir: &TempDir, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let mut v = base();
    no_tenants(&mut v);
    remove(&mut v["gateway"], "auth");
    edit(&mut v);
    dir.write("gateway.json", &v.to_string())
}

#[test]
fn public_key_file_is_relative_to_the_config_file() {
    let dir = TempDir::new("pubkey");
    dir.write("keys/jwt.pem", RSA_PUBLIC_KEY);
    let path = write_config(&dir, |v| {
        v["gateway"]["auth"] = json!({ "required": true,
            "jwt": { "algorithms": ["RS256", "PS512"], "publicKeyFile": "keys/jwt.pem" } });
    });
    let cfg = load(&path).unwrap();
    assert!(cfg.auth.required);
    // The same text, resolved against another directory, does not find it.
    let text = std::fs::read_to_string(&path).unwrap();
    let other = TempDir::new("pubkey-other");
    let err = parse_in(&text, other.path()).unwrap_err();
    assert_eq!(err.path, "gateway.auth.jwt.publicKeyFile");
    assert!(err.problem.starts_with("cannot read "), "{err}");
    assert!(err.problem.contains("jwt.pem"), "{err}");
    assert_eq!(
        err.file.as_deref(),
        Some(other.path().join("keys/jwt.pem").as_path())
    );
    // An absolute path works from anywhere.
    let abs = dir.path().join("keys/jwt.pem");
    let mut v: Value = serde_json::from_str(&text).unwrap();
    jwt(&mut v)["publicKeyFile"] = json!(abs.to_str().unwrap());
    parse_in(&v.to_string(), other.path()).unwrap();
}

#[test]
fn public_key_file_must_hold_a_key_of_the_right_kind() {
    let dir = TempDir::new("badkey");
    dir.write("garbage.pem", "not a key");
    dir.write("rsa.pem", RSA_PUBLIC_KEY);
    let path = write_config(&dir, |v| {
        v["gateway"]["auth"] = json!({ "jwt": { "algorithms": ["RS256"], "publicKeyFile": "garbage.pem" } });
    });
    let err = load(&path).unwrap_err();
    assert_eq!(err.path, "gateway.auth.jwt.publicKeyFile");
    assert!(err.problem.contains("is not a PEM RSA public key"), "{err}");

    let path = write_config(&dir, |v| {
        v["gateway"]["auth"] = json!({ "jwt": { "algorithms": ["ES256"], "publicKeyFile": "rsa.pem" } });
    });
    let err = load(&path).unwrap_err();
    assert_eq!(err.path, "gateway.auth.jwt.publicKeyFile");
    assert!(err.problem.contains("is not a PEM EC public key"), "{err}");
}

#[test]
fn missing_config_file_is_an_io_error() {
    let dir = TempDir::new("missing");
    let path = dir.path().join("nope.json");
    let err = load(&path).unwrap_err();
    assert_eq!(err.path, path.display().to_string());
    assert!(err.problem.starts_with("cannot read: "), "{err}");
    assert!(err.is_io());
    assert_eq!(err.file.as_deref(), Some(path.as_path()));
}

const GITHUB_MANIFEST: &str = r#"{
  "plugin": "github",
  "routes": [
    { "resource": "gateway:route:gh-push", "pathPrefix": "/plugins/github/push",
      "limits": { "requestsPerSecond": 5 } },
    { "resource": "gateway:route:gh-issues", "pathPrefix": "/plugins/github/issues",
      "limits": { "requestsPerMinute": 60, "maxConcurrentRequests": 4 } }
  ]
}"#;

const SLACK_MANIFEST: &str = r#"{
  "plugin": "slack",
  "routes": [
    { "resource": "gateway:route:slack", "pathPrefix": "/plugins/slack", "limits": { "requestsPerSecond": 1 } }
  ]
}"#;

fn with_manifests(v: &mut Value) {
    v["gateway"]["pressure"]["manifestsDir"] = json!("manifests");
}

fn load_with_manifests(
    tag: &str,
    manifests: &[(&str, &str)],
) -> (TempDir, Result<GatewayConfig, ConfigError>) {
    let dir = TempDir::new(tag);
    std::fs::create_dir_all(dir.path().join("manifests")).expect("create manifests dir");
    for (name, text) in manifests {
        dir.write(&format!("manifests/{name}"), text);
    }
    let path = write_config(&dir, with_manifests);
    let result = load(&path);
    (dir, result)
}

#[test]
fn manifests_append_routes_in_file_name_order() {
    let (_dir, result) = load_with_manifests(
        "manifests-ok",
        &[
            ("slack.json", SLACK_MANIFEST),
            ("github.json", GITHUB_MANIFEST),
            ("README.md", "not a manifest"),
            ("notes.json.bak", "{"),
        ],
    );
    let cfg = result.unwrap();
    let resources: Vec<&str> = cfg
        .pressure
        .per_route
        .iter()
        .map(|r| r.resource.as_str())
        .collect();
    assert_eq!(
        resources,
        [
            "gateway:route:webhooks-github",
            "gateway:route:webhooks-stripe",
            "gateway:route:gh-push",
            "gateway:route:gh-issues",
            "gateway:route:slack",
        ]
    );
    assert_eq!(cfg.pressure.per_route[3].limits.max_concurrent_requests, Some(4));
    // The merged config still passes validation.
    pressure_gateway::config::validate(&cfg, Path::new(".")).unwrap();
}

#[test]
fn empty_manifest_dir_adds_nothing() {
    let (_dir, result) = load_with_manifests("manifests-empty", &[]);
    assert_eq!(result.unwrap().pressure.per_route.len(), 2);
}

#[test]
fn manifest_errors_name_the_file_and_the_path_in_it() {
    /// Name, manifest files (name, content), expected error.
    type ManifestCase = (
        &'static str,
        &'static [(&'static str, &'static str)],
        &'static str,
    );
    let cases: &[ManifestCase] = &[
        (
            "limit zero",
            &[(
                "github.json",
                r#"{"plugin": "github", "routes": [{"resource": "gateway:route:gh", "pathPrefix": "/gh",
                    "limits": {"requestsPerSecond": 0}}]}"#,
            )],
            "manifests/github.json: routes[0].limits.requestsPerSecond: must be > 0",
        ),
        (
            "unknown key",
            &[(
                "github.json",
                r#"{"plugin": "github", "routes": [{"resource": "gateway:route:gh", "pathPrefix": "/gh",
                    "limit": {"requestsPerSecond": 1}}]}"#,
            )],
            "manifests/github.json: routes[0].limit: unknown key `limit` in routes[0] \
             (known keys: `resource`, `pathPrefix`, `limits`)",
        ),
        (
            "unknown top-level key",
            &[("github.json", r#"{"plugin": "github", "route": []}"#)],
            "manifests/github.json: route: unknown key `route` in the top level (known keys: `plugin` or `routes`)",
        ),
        (
            "negative limit",
            &[(
                "github.json",
                r#"{"plugin": "github", "routes": [{"resource": "r", "pathPrefix": "/gh",
                    "limits": {"maxConcurrentRequests": -1}}]}"#,
            )],
            "manifests/github.json: routes[0].limits.maxConcurrentRequests: must be a non-negative integer (got -1)",
        ),
        (
            "missing plugin",
            &[("github.json", r#"{"routes": []}"#)],
            "manifests/github.json: plugin: is required",
        ),
        (
            "empty plugin name",
            &[("github.json", r#"{"plugin": " "}"#)],
            "manifests/github.json: plugin: must not be empty",
        ),
        (
            "prefix without slash",
            &[(
                "github.json",
                r#"{"plugin": "github", "routes": [{"resource": "r", "pathPrefix": "gh",
                    "limits": {"requestsPerSecond": 1}}]}"#,
            )],
            "manifests/github.json: routes[0].pathPrefix: must start with /",
        ),
        (
            "empty resource",
            &[(
                "github.json",
                r#"{"plugin": "github", "routes": [{"resource": "", "pathPrefix": "/gh",
                    "limits": {"requestsPerSecond": 1}}]}"#,
            )],
            "manifests/github.json: routes[0].resource: must not be empty",
        ),
        (
            "resource conflicts with the main config",
            &[(
                "github.json",
                r#"{"plugin": "github", "routes": [{"resource": "gateway:route:webhooks-github",
                    "pathPrefix": "/gh", "limits": {"requestsPerSecond": 1}}]}"#,
            )],
            "manifests/github.json: routes[0].resource: \"gateway:route:webhooks-github\" conflicts with \
             gateway.pressure.perRoute[0]",
        ),
        (
            "prefix conflicts with the main config",
            &[(
                "github.json",
                r#"{"plugin": "github", "routes": [{"resource": "gateway:route:gh",
                    "pathPrefix": "/webhooks/stripe", "limits": {"requestsPerSecond": 1}}]}"#,
            )],
            "manifests/github.json: routes[0].pathPrefix: \"/webhooks/stripe\" conflicts with \
             gateway.pressure.perRoute[1]",
        ),
        (
            "prefix conflicts with another manifest",
            &[
                ("a.json", SLACK_MANIFEST),
                (
                    "b.json",
                    r#"{"plugin": "other", "routes": [
                        {"resource": "gateway:route:x", "pathPrefix": "/x", "limits": {"requestsPerSecond": 1}},
                        {"resource": "gateway:route:y", "pathPrefix": "/plugins/slack",
                         "limits": {"requestsPerSecond": 1}}]}"#,
                ),
            ],
            "manifests/b.json: routes[1].pathPrefix: \"/plugins/slack\" conflicts with manifests/a.json: routes[0]",
        ),
        (
            "resource conflicts within a manifest",
            &[(
                "a.json",
                r#"{"plugin": "a", "routes": [
                    {"resource": "gateway:route:x", "pathPrefix": "/x", "limits": {"requestsPerSecond": 1}},
                    {"resource": "gateway:route:x", "pathPrefix": "/y", "limits": {"requestsPerSecond": 1}}]}"#,
            )],
            "manifests/a.json: routes[1].resource: \"gateway:route:x\" conflicts with manifests/a.json: routes[0]",
        ),
        (
            "two manifests for one plugin",
            &[("a.json", SLACK_MANIFEST), ("b.json", r#"{"plugin": "slack"}"#)],
            "manifests/b.json: plugin: \"slack\" is also declared by manifests/a.json",
        ),
        (
            "tenant resource",
            &[(
                "a.json",
                r#"{"plugin": "a", "routes": [
                    {"resource": "gateway:tenant:x", "pathPrefix": "/x", "limits": {"requestsPerSecond": 1}}]}"#,
            )],
            "manifests/a.json: routes[0].resource: the prefix gateway:tenant: is reserved for perTenant resources",
        ),
    ];
    let mut failures = Vec::new();
    for (i, (name, files, expected)) in cases.iter().enumerate() {
        let (_dir, result) = load_with_manifests(&format!("manifest-case-{i}"), files);
        match result {
            Ok(_) => failures.push(format!("{name}: accepted, expected `{expected}`")),
            Err(e) if e.to_string() != *expected => {
                failures.push(format!("{name}:\n   got      `{e}`\n   expected `{expected}`"))
            }
            Err(_) => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn invalid_manifest_json_names_the_file() {
    let (_dir, result) = load_with_manifests("manifest-syntax", &[("broken.json", "{\"plugin\": ")]);
    let err = result.unwrap_err();
    assert!(err.path.starts_with("manifests/broken.json: "), "{err}");
    assert!(err.problem.starts_with("invalid JSON: "), "{err}");
}

#[test]
fn missing_manifest_dir_is_an_error() {
    let dir = TempDir::new("manifests-missing");
    let path = write_config(&dir, with_manifests);
    let err = load(&path).unwrap_err();
    assert_eq!(err.path, "gateway.pressure.manifestsDir");
    assert!(err.problem.starts_with("cannot read directory "), "{err}");
    assert!(err.is_io());
    assert_eq!(err.file.as_deref(), Some(dir.path().join("manifests").as_path()));
}

#[test]
fn manifests_are_not_read_when_the_main_config_is_invalid() {
    // Validation of the main config comes first: its error is the one shown.
    let dir = TempDir::new("manifests-order");
    let path = write_config(&dir, |v| {
        with_manifests(v);
        v["gateway"]["listen"] = json!("nope");
    });
    let err = load(&path).unwrap_err();
    assert_eq!(err.path, "gateway.listen");
}

// ---------------------------------------------------------------- schema and reference

fn docs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs")
}

#[test]
fn the_config_reference_is_up_to_date() {
    let path = docs_dir().join("config.md");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = pressure_gateway::config::reference::markdown();
    assert!(
        committed.trim_end() == generated.trim_end(),
        "docs/config.md is stale: regenerate it with\n  cargo run -p pressure-cli -- config reference > docs/config.md"
    );
}

/// Every JSON file under `examples/` (recursively) that has a `gateway` key.
fn example_configs() -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![examples_dir()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("examples readable").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "json") {
                let text = std::fs::read_to_string(&path).expect("example readable");
                if serde_json::from_str::<serde_json::Value>(&text).is_ok_and(|v| v.get("gateway").is_some())
                {
                    found.push(path);
                }
            }
        }
    }
    found.sort();
    found
}

#[test]
fn every_example_validates_against_the_schema() {
    let schema = pressure_gateway::config::schema::schema();
    let validator = jsonschema::validator_for(&schema).expect("the schema is a valid JSON Schema");
    let examples = example_configs();
    assert!(examples.len() >= 3, "the shipped examples: {examples:?}");
    set_env("GATEWAY_JWT_SECRET", "test-secret");
    for path in examples {
        let value: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| format!("{}: {e}", e.instance_path))
            .collect();
        assert!(errors.is_empty(), "{}: {errors:#?}", path.display());
        // And the loader agrees.
        load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

#[test]
fn the_schema_refuses_what_the_loader_refuses() {
    let schema = pressure_gateway::config::schema::schema();
    let validator = jsonschema::validator_for(&schema).expect("valid schema");
    let ok = serde_json::json!({"gateway": {"listen": "127.0.0.1:1", "upstreams": {}}});
    assert!(validator.is_valid(&ok));
    for bad in [
        serde_json::json!({"gatway": {}}),
        serde_json::json!({"gateway": {"listen": "x", "upstreams": {}, "listne": 1}}),
        serde_json::json!({"gateway": {"listen": 8080, "upstreams": {}}}),
        serde_json::json!({"gateway": {"listen": "x", "upstreams": {}, "backend": {"type": "etcd"}}}),
    ] {
        assert!(!validator.is_valid(&bad), "{bad}");
        assert!(parse(&bad.to_string()).is_err(), "{bad}");
    }
}

/// The README's budget tour: its keys are the documented ones, its tenants
/// have daily and monthly money budgets, `globex` an override, and the
/// whole config checks (the plan builds).
#[test]
fn the_budget_example_matches_the_readme() {
    use sha2::Digest;
    let path = examples_dir().join("gateway-budgets.json");
    let cfg = load(&path).unwrap_or_else(|e| panic!("gateway-budgets.json: {e}"));
    let hex = |key: &str| {
        sha2::Sha256::digest(key.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let keys: Vec<(String, String)> = cfg
        .auth
        .api_keys
        .iter()
        .map(|k| (k.sha256.clone(), k.tenant.clone()))
        .collect();
    assert_eq!(
        keys,
        [
            (hex("sk-dev-acme-0123456789"), "acme".to_owned()),
            (hex("sk-dev-globex-0123456789"), "globex".to_owned())
        ]
    );
    let tenants = &cfg.pressure.per_tenant;
    let limits = tenants.limits.as_ref().expect("tenant limits");
    assert_eq!(
        (
            limits.cost_micro_usd_per_day,
            limits.cost_micro_usd_per_month,
            limits.requests_per_day
        ),
        (Some(1_000), Some(20_000), Some(10_000))
    );
    let globex = tenants.overrides["globex"].limits.as_ref().expect("limits");
    assert_eq!(globex.cost_micro_usd_per_day, Some(50_000));
    pressure_gateway::Plan::check(cfg, examples_dir().as_path()).expect("the example checks");
}
