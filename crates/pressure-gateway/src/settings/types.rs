//! The gateway's configuration, in the `kb.config.json` shape: the file's
//! top-level `gateway` key. JSON names are camelCase; unknown keys are
//! errors. The checks beyond the shape are the building of the plan
//! (`crate::plan`).

use pressure_core::Limits;
use pressure_llm::pipeline::LlmConfig;
use pressure_redis::RedisConfig;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The whole config file: only `gateway` is read; other top-level keys
/// belong to other components and are ignored.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
pub struct ConfigFile {
    /// The gateway's section.
    pub gateway: GatewayConfig,
}

/// `gateway`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GatewayConfig {
    /// Address of the proxy listener, e.g. `127.0.0.1:8080`.
    pub listen: String,
    /// Upstream services by name.
    pub upstreams: BTreeMap<String, UpstreamConfig>,
    /// Where limiter state lives.
    #[serde(default)]
    pub backend: BackendConfig,
    /// Authentication.
    #[serde(default)]
    pub auth: AuthConfig,
    /// The admin listener.
    #[serde(default)]
    pub admin: AdminConfig,
    /// The limits.
    #[serde(default)]
    pub pressure: PressureConfig,
    /// Bounds on what clients may send.
    #[serde(default)]
    pub limits: RequestLimits,
    /// Upstream timeouts.
    #[serde(default)]
    pub timeouts: TimeoutConfig,
    /// How long a stopping gateway lets requests in flight finish
    /// (SIGTERM/SIGINT), milliseconds.
    #[serde(default = "default_shutdown_grace_ms")]
    pub shutdown_grace_ms: u64,
    /// The LLM pipeline behind `POST /v1/chat/completions`; absent: the
    /// gateway serves no LLM endpoint (the path is proxied like any other).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm: Option<LlmConfig>,
    /// Serve the proxy listener over TLS (HTTPS, ALPN `h2`/`http/1.1`);
    /// absent: plain HTTP/1.1 and h2c.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<super::ListenerTlsConfig>,
    /// One JSON line per request on the tracing target `pressure::access`
    /// (off by default; `pressure gateway --access-log` turns it on too).
    #[serde(default)]
    pub access_log: AccessLogConfig,
    /// Bounds on the denial log under a flood (`pressure::denial`).
    #[serde(default)]
    pub denial_log: DenialLogConfig,
    /// The decision API and forward auth on a listener of their own
    /// (`docs/decision-api.md`, `docs/forward-auth.md`); absent: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decisions: Option<super::DecisionsConfig>,
    /// Envoy's rate limit service (gRPC) on its own listener, on this
    /// gateway's broker; absent: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rls: Option<super::RlsConfig>,
    /// OpenTelemetry traces over OTLP (`docs/tracing.md`); absent: off,
    /// unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing: Option<super::TracingConfig>,
}

/// `gateway.denialLog`: how many `request denied` lines one resource may
/// write per second before the rest are only counted and summed up in one
/// `denials suppressed` line per second (see `crate::metrics::denial_log`). Limiter
/// outage lines (`limiter unavailable`) get the same budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DenialLogConfig {
    /// Lines per resource per second; `0`: one line per denial, however
    /// many (the log can then cost more than the 429s it describes).
    #[serde(default = "default_denial_lines")]
    pub lines_per_resource_per_second: u32,
}

impl Default for DenialLogConfig {
    fn default() -> Self {
        Self {
            lines_per_resource_per_second: default_denial_lines(),
        }
    }
}

/// The default of `gateway.denialLog.linesPerResourcePerSecond`: denial
/// lines logged per resource per second, beyond which they are counted
/// only.
const DEFAULT_DENIAL_LINES: u32 = 20;

fn default_denial_lines() -> u32 {
    DEFAULT_DENIAL_LINES
}

/// `gateway.accessLog`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AccessLogConfig {
    /// Whether every request writes an access log line (see
    /// `crate::access_log`). Off by default: a busy gateway writes one line
    /// per request.
    #[serde(default)]
    pub enabled: bool,
}

fn default_shutdown_grace_ms() -> u64 {
    30_000
}

/// `gateway.upstreams.<name>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Base URL, `http://host:port` or `https://host:port` (an optional
    /// path is prepended).
    pub url: String,
    /// Requests whose path starts with this prefix go to this upstream.
    pub path_prefix: String,
    /// How an `https://` upstream is verified (default: public roots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<super::UpstreamTlsConfig>,
}

/// `gateway.backend`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum BackendConfig {
    /// In this process (one gateway).
    #[default]
    Memory,
    /// In Redis (a fleet of gateways shares the limits).
    Redis(RedisConfig),
}

/// `gateway.auth`: what names a request's tenant — a JWT (`jwt`), an API
/// key (`apiKeys`), or both (see `docs/api-keys.md` for how a request's
/// credential is read).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthConfig {
    /// Whether a request without a credential (a JWT or an API key) is
    /// refused (401). Off by default: webhooks carry neither.
    #[serde(default)]
    pub required: bool,
    /// JWT verification; without it, tokens are not read at all.
    #[serde(default)]
    pub jwt: Option<JwtConfig>,
    /// API keys, each naming a tenant, for callers without a JWT: read from
    /// `x-api-key` or from an `Authorization: Bearer` token without a dot;
    /// empty: keys are not read at all. See `docs/api-keys.md`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_keys: Vec<ApiKeyConfig>,
    /// Keys issued at runtime through the admin API (`POST
    /// /admin/pressure/keys`), kept in the backend and shared by every
    /// gateway on it: when `true` they are read beside `apiKeys` (from the
    /// same headers, by the same rule) and the admin API may issue them.
    /// Off by default. See `docs/api-keys.md`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub runtime_keys: bool,
}

/// `gateway.auth.apiKeys[i]`: one API key, by the SHA-256 of its text (the
/// key itself is never in the config): `printf %s "$KEY" | sha256sum`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiKeyConfig {
    /// The SHA-256 of the key, 64 lowercase hex digits (`printf %s "$KEY" |
    /// sha256sum`).
    pub sha256: String,
    /// The tenant the key names, as a JWT's tenant claim would (1 to 256
    /// bytes): its requests are charged to `gateway:tenant:<tenant>`.
    pub tenant: String,
    /// A label for logs and the key's own resource (1 to 64 of
    /// `A-Za-z0-9._:-`, unique); default: the first 8 hex digits of
    /// `sha256`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Limits of this key alone (resource `gateway:apikey:<name>`), charged
    /// in addition to its tenant's; absent: only the tenant's apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
}

impl ApiKeyConfig {
    /// What logs and the key's resource call it: `name`, or the first 8 hex
    /// digits of `sha256` (never more of the hash).
    pub fn label(&self) -> &str {
        match &self.name {
            Some(name) => name,
            None => self.sha256.get(..8).unwrap_or(&self.sha256),
        }
    }
}

/// Shows the hash only as its first 8 hex digits (the label), so a printed
/// config carries no more of it than a log line does.
impl std::fmt::Debug for ApiKeyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKeyConfig")
            .field("sha256", &format_args!("{}…", self.sha256.get(..8).unwrap_or("")))
            .field("tenant", &self.tenant)
            .field("name", &self.name)
            .field("limits", &self.limits)
            .finish()
    }
}

/// `gateway.auth.jwt`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JwtConfig {
    /// Accepted algorithms (`HS256`, `RS256`, …); `none` is never accepted.
    pub algorithms: Vec<String>,
    /// Environment variable holding the HMAC secret (HS*).
    #[serde(default)]
    pub secret_env: Option<String>,
    /// PEM file with the RSA/EC public key (RS*, ES*).
    #[serde(default)]
    pub public_key_file: Option<String>,
    /// Claim naming the tenant.
    #[serde(default = "default_tenant_claim")]
    pub tenant_claim: String,
    /// Required `aud`, if any.
    #[serde(default)]
    pub audience: Option<String>,
    /// Required `iss`, if any.
    #[serde(default)]
    pub issuer: Option<String>,
    /// Clock skew tolerated on `exp`/`nbf`, in seconds.
    #[serde(default = "default_leeway")]
    pub leeway_secs: u64,
}

fn default_tenant_claim() -> String {
    "namespaceId".into()
}

fn default_leeway() -> u64 {
    30
}

/// `gateway.admin`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdminConfig {
    /// Address of the admin listener (loopback by default).
    #[serde(default = "default_admin_listen")]
    pub listen: String,
    /// Environment variable holding a bearer token the admin endpoints
    /// require; none means no token.
    #[serde(default)]
    pub token_env: Option<String>,
    /// Serve the admin listener over TLS; absent: plain HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<super::ListenerTlsConfig>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            listen: default_admin_listen(),
            token_env: None,
            tls: None,
        }
    }
}

fn default_admin_listen() -> String {
    "127.0.0.1:8081".into()
}

/// `gateway.pressure`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PressureConfig {
    /// Whether any limit applies.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Limits per upstream name (resource `gateway:service:<name>`).
    #[serde(default)]
    pub per_service: BTreeMap<String, Limits>,
    /// Limits per path prefix; the longest matching prefix wins over the
    /// upstream's `perService` entry.
    #[serde(default)]
    pub per_route: Vec<RouteLimit>,
    /// Limits per tenant (resource `gateway:tenant:<id>`, registered lazily).
    #[serde(default)]
    pub per_tenant: TenantLimits,
    /// Directory of plugin manifests declaring more routes and budgets.
    #[serde(default)]
    pub manifests_dir: Option<String>,
    /// Whether successful responses carry IETF `RateLimit` /
    /// `RateLimit-Policy` headers (draft-ietf-httpapi-ratelimit-headers) for
    /// the tightest dimension of the resources the request was charged to.
    /// Off by default: it costs one usage read per charged resource (a
    /// round trip each on Redis).
    #[serde(default)]
    pub rate_limit_headers: bool,
    /// Resources of their own (id → limits) that no route charges: for
    /// callers of the decision API (`gateway.decisions`), beside the route,
    /// service, tenant and LLM resources it also serves.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, Limits>,
}

impl Default for PressureConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            per_service: BTreeMap::new(),
            per_route: Vec::new(),
            per_tenant: TenantLimits::default(),
            manifests_dir: None,
            rate_limit_headers: false,
            resources: BTreeMap::new(),
        }
    }
}

fn yes() -> bool {
    true
}

/// `gateway.pressure.perRoute[i]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteLimit {
    /// Resource id, e.g. `gateway:route:webhooks-github`.
    pub resource: String,
    /// Path prefix the route covers.
    pub path_prefix: String,
    /// Its limits.
    pub limits: Limits,
}

/// `gateway.pressure.perTenant`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TenantLimits {
    /// Whether tenants are limited.
    #[serde(default)]
    pub enabled: bool,
    /// Limits of each tenant.
    #[serde(default)]
    pub limits: Option<Limits>,
    /// Limits of named tenants (tenant id → limits), each a full
    /// replacement of `limits` for that tenant (a dimension it does not set
    /// is not limited for that tenant). Precedence: a live override (`PUT
    /// /admin/pressure/tenants/{id}/limits`, kept in the backend) over this
    /// one over `limits`. Applies only while `enabled`; a reload applies a
    /// change to tenants already registered, keeping their usage.
    ///
    /// `"parent": "<tenant>"` beside (or instead of) the limits puts the
    /// tenant under another: its requests are charged to the parent too,
    /// and to the parent's parent, all or nothing (nested budgets).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub overrides: BTreeMap<String, super::TenantOverride>,
    /// Most tenants kept at once (idle ones are evicted beyond).
    #[serde(default = "default_max_tenants")]
    pub max_tenants: usize,
    /// Most tenants in a chain from a root down to any descendant (a
    /// tenant and its ancestors), 1 to 16.
    #[serde(default = "default_max_depth")]
    pub max_depth: usize,
}

impl Default for TenantLimits {
    fn default() -> Self {
        Self {
            enabled: false,
            limits: None,
            overrides: BTreeMap::new(),
            max_tenants: default_max_tenants(),
            max_depth: default_max_depth(),
        }
    }
}

fn default_max_depth() -> usize {
    4
}

fn default_max_tenants() -> usize {
    pressure_core::DEFAULT_MAX_LAZY_RESOURCES
}

/// `gateway.limits`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestLimits {
    /// Largest request head (request line + headers), bytes; beyond: 431.
    #[serde(default = "default_max_header_bytes")]
    pub max_header_bytes: usize,
    /// Largest request body, bytes; beyond: 413.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: u64,
}

impl Default for RequestLimits {
    fn default() -> Self {
        Self {
            max_header_bytes: default_max_header_bytes(),
            max_body_bytes: default_max_body_bytes(),
        }
    }
}

fn default_max_header_bytes() -> usize {
    64 * 1024
}

fn default_max_body_bytes() -> u64 {
    10 * 1024 * 1024
}

/// `gateway.timeouts` (milliseconds): the upstream side (`connectMs`,
/// `totalMs`) and the client side (`headerReadMs`, `idleMs`, `bodyReadMs`,
/// `sendMs`), the latter on both listeners.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct TimeoutConfig {
    /// Connecting to an upstream; beyond: 502.
    pub connect_ms: u64,
    /// Whole upstream exchange until the response head; beyond: 504. A
    /// proxied request body is read whole first (bounded by
    /// `limits.maxBodyBytes`, the upstream not yet contacted) and must be
    /// complete within the same time; beyond: 408.
    pub total_ms: u64,
    /// Reading a request head, from its first byte; beyond: the connection
    /// is closed.
    pub header_read_ms: u64,
    /// A keep-alive connection with no request in flight (also one that
    /// never sends a byte); beyond: closed.
    pub idle_ms: u64,
    /// Inactivity while reading a request body; beyond: 408.
    pub body_read_ms: u64,
    /// Inactivity while the client reads the response; beyond: the
    /// connection is dropped and the request's slots released.
    pub send_ms: u64,
}

impl Default for TimeoutConfig {
    fn default() -> Self {
        Self {
            connect_ms: 1_000,
            total_ms: 30_000,
            header_read_ms: 10_000,
            idle_ms: 60_000,
            body_read_ms: 30_000,
            send_ms: 60_000,
        }
    }
}
