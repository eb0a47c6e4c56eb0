//! Semantic checks of a gateway config whose shape already parsed: addresses
//! that bind, upstream URLs the proxy can dial, limits that compile, names
//! that refer to something, auth settings that can verify a token. Each
//! failure names the JSON path of the offending value, so that an invalid
//! config stops the process with a message an operator can act on.

use super::error::ConfigError;
use super::types::{AdminConfig, AuthConfig, BackendConfig, GatewayConfig, JwtConfig, PressureConfig};
use pressure_core::Limits;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// JWT algorithms the gateway can verify (names are case-sensitive).
pub const JWT_ALGORITHMS: [&str; 12] = [
    "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "PS256", "PS384", "PS512",
    "EdDSA",
];

/// Smallest accepted `limits.maxHeaderBytes` (hyper buffers at least 8 KiB
/// of request head, so a smaller bound could not be honoured).
pub const MIN_HEADER_BYTES: usize = 8192;
/// Largest accepted `auth.jwt.leewaySecs`: ten minutes of clock skew is
/// already generous; more would keep expired tokens alive (and a huge value
/// overflows the verifier's arithmetic and refuses every token).
pub const MAX_LEEWAY_SECS: u64 = 600;

/// Largest accepted `limits.maxHeaderBytes` (1 MiB).
pub const MAX_HEADER_BYTES: usize = 1024 * 1024;

/// Resource-id prefix of per-tenant resources; routes may not use it.
use crate::resources::TENANT_PREFIX;

/// Checks everything the shape cannot express. `base_dir` is the directory
/// relative file names (`auth.jwt.publicKeyFile`) are resolved against:
/// the config file's directory.
///
/// Environment variables named by the config (`auth.jwt.secretEnv`,
/// `admin.tokenEnv`) must be set and non-empty now: a gateway that would
/// start without its secret is refused at startup rather than at the first
/// request.
pub fn validate(cfg: &GatewayConfig, base_dir: &Path) -> Result<(), ConfigError> {
    check_listen(cfg)?;
    check_admin(&cfg.admin, &cfg.listen)?;
    check_upstreams(cfg)?;
    check_backend(&cfg.backend)?;
    check_auth(&cfg.auth, base_dir)?;
    check_pressure(&cfg.pressure, cfg)?;
    check_request_limits(cfg)?;
    check_llm(cfg)?;
    super::tls::check_tls(cfg, base_dir)?;
    super::decisions::check(cfg)?;
    Ok(())
}

/// `gateway.llm`: the pipeline's own checks, their paths under `gateway.llm`.
fn check_llm(cfg: &GatewayConfig) -> Result<(), ConfigError> {
    let Some(llm) = &cfg.llm else { return Ok(()) };
    llm.validate()
        .map_err(|e| ConfigError::new(format!("gateway.llm.{}", e.path), e.problem))?;
    if llm.breaker.scope == Some(pressure_llm::breaker::BreakerScope::Fleet)
        && matches!(cfg.backend, BackendConfig::Memory)
    {
        return Err(ConfigError::new(
            "gateway.llm.breaker.scope",
            "\"fleet\" needs the redis backend (gateway.backend.type \"redis\"); use \"process\" or leave it out",
        ));
    }
    Ok(())
}

/// Checks `limits` with `pressure_core`'s compiler; the error's path is
/// `<path>.<field>`, or `path` itself for problems of the whole object.
pub fn check_limits(limits: &Limits, path: &str) -> Result<(), ConfigError> {
    limits.compile().map(|_| ()).map_err(|e| {
        let at = if e.field == "limits" {
            path.to_string()
        } else {
            format!("{path}.{}", e.field)
        };
        ConfigError::new(at, e.problem)
    })
}

pub(super) fn parse_addr(value: &str, path: &str) -> Result<SocketAddr, ConfigError> {
    value.parse::<SocketAddr>().map_err(|_| {
        ConfigError::new(
            path,
            format!("\"{value}\" is not a socket address (expected ip:port, e.g. 127.0.0.1:8080)"),
        )
    })
}

fn check_listen(cfg: &GatewayConfig) -> Result<(), ConfigError> {
    parse_addr(&cfg.listen, "gateway.listen").map(|_| ())
}

fn check_admin(admin: &AdminConfig, listen: &str) -> Result<(), ConfigError> {
    let addr = parse_addr(&admin.listen, "gateway.admin.listen")?;
    if let Some(var) = &admin.token_env {
        check_env(var, "gateway.admin.tokenEnv")?;
    } else if !addr.ip().is_loopback() {
        return Err(ConfigError::new(
            "gateway.admin.listen",
            "must be a loopback address unless tokenEnv is set",
        ));
    }
    if let Ok(proxy) = listen.parse::<SocketAddr>() {
        if proxy == addr && addr.port() != 0 {
            return Err(ConfigError::new(
                "gateway.admin.listen",
                format!("same address as gateway.listen ({proxy})"),
            ));
        }
    }
    Ok(())
}

/// An environment variable named by the config must be set and non-empty.
pub(super) fn check_env(var: &str, path: &str) -> Result<(), ConfigError> {
    if var.is_empty() {
        return Err(ConfigError::new(path, "must not be empty"));
    }
    match std::env::var_os(var) {
        Some(v) if !v.is_empty() => Ok(()),
        _ => Err(ConfigError::new(
            path,
            format!("environment variable {var} is not set"),
        )),
    }
}

fn check_upstreams(cfg: &GatewayConfig) -> Result<(), ConfigError> {
    if cfg.upstreams.is_empty() {
        return Err(ConfigError::new(
            "gateway.upstreams",
            "at least one upstream is required",
        ));
    }
    let mut prefixes: BTreeMap<&str, &str> = BTreeMap::new();
    for (name, up) in &cfg.upstreams {
        let base = format!("gateway.upstreams.{name}");
        if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ConfigError::new(
                base,
                "upstream names must be non-empty and contain no whitespace",
            ));
        }
        check_upstream_url(&up.url, &format!("{base}.url"))?;
        let prefix_path = format!("{base}.pathPrefix");
        if !up.path_prefix.starts_with('/') {
            return Err(ConfigError::new(prefix_path, "must start with /"));
        }
        if let Some(other) = prefixes.insert(&up.path_prefix, name) {
            return Err(ConfigError::new(
                prefix_path,
                format!(
                    "\"{}\" is also the pathPrefix of gateway.upstreams.{other}",
                    up.path_prefix
                ),
            ));
        }
    }
    Ok(())
}

/// `http://host[:port][/path]` or `https://…`, nothing else.
fn check_upstream_url(url: &str, path: &str) -> Result<(), ConfigError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| ConfigError::new(path, format!("\"{url}\" is not a valid URL: {e}")))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(_) => {
            return Err(ConfigError::new(
                path,
                "only http:// and https:// upstreams are supported",
            ))
        }
        None => {
            return Err(ConfigError::new(
                path,
                format!("\"{url}\" is not an absolute URL (expected http://host:port)"),
            ))
        }
    }
    let Some(authority) = uri.authority() else {
        return Err(ConfigError::new(path, "has no host (expected http://host:port)"));
    };
    if authority.host().is_empty() {
        return Err(ConfigError::new(path, "has no host (expected http://host:port)"));
    }
    if authority.as_str().contains('@') {
        return Err(ConfigError::new(path, "must not contain credentials"));
    }
    if uri.query().is_some() {
        return Err(ConfigError::new(path, "must not have a query string"));
    }
    Ok(())
}

fn check_backend(backend: &BackendConfig) -> Result<(), ConfigError> {
    let BackendConfig::Redis(redis) = backend else {
        return Ok(());
    };
    redis
        .validate()
        .map_err(|e| ConfigError::from(e.under("gateway.backend")))?;
    if redis.cluster_nodes.is_empty() {
        check_redis_url(&redis.url, "gateway.backend.url")?;
    }
    for (i, node) in redis.cluster_nodes.iter().enumerate() {
        check_redis_url(node, &format!("gateway.backend.clusterNodes[{i}]"))?;
    }
    Ok(())
}

fn check_redis_url(url: &str, path: &str) -> Result<(), ConfigError> {
    const SCHEMES: [&str; 4] = ["redis://", "rediss://", "redis+unix://", "unix://"];
    if SCHEMES.iter().any(|s| url.starts_with(s)) && url.len() > url.find("://").map_or(0, |i| i + 3) {
        Ok(())
    } else {
        Err(ConfigError::new(
            path,
            format!("\"{url}\" is not a Redis URL (expected redis://host:port or rediss://host:port)"),
        ))
    }
}

/// Which key material a JWT algorithm verifies with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    Hmac,
    Rsa,
    Ec,
    Ed,
}

impl KeyKind {
    fn of(alg: &str) -> Self {
        match alg {
            a if a.starts_with("HS") => KeyKind::Hmac,
            a if a.starts_with("RS") || a.starts_with("PS") => KeyKind::Rsa,
            a if a.starts_with("ES") => KeyKind::Ec,
            _ => KeyKind::Ed,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            KeyKind::Hmac => "HMAC",
            KeyKind::Rsa => "RSA",
            KeyKind::Ec => "EC",
            KeyKind::Ed => "Ed25519",
        }
    }
}

fn check_auth(auth: &AuthConfig, base_dir: &Path) -> Result<(), ConfigError> {
    let Some(jwt) = &auth.jwt else {
        if auth.required {
            return Err(ConfigError::new(
                "gateway.auth.required",
                "requires gateway.auth.jwt (no token can be verified without it)",
            ));
        }
        return Ok(());
    };
    check_jwt(jwt, base_dir)
}

fn check_jwt(jwt: &JwtConfig, base_dir: &Path) -> Result<(), ConfigError> {
    if jwt.algorithms.is_empty() {
        return Err(ConfigError::new(
            "gateway.auth.jwt.algorithms",
            "must not be empty",
        ));
    }
    let mut kinds: Vec<(KeyKind, &str)> = Vec::new();
    for (i, alg) in jwt.algorithms.iter().enumerate() {
        let path = format!("gateway.auth.jwt.algorithms[{i}]");
        if alg.eq_ignore_ascii_case("none") {
            return Err(ConfigError::new(path, format!("\"{alg}\" is never accepted")));
        }
        if !JWT_ALGORITHMS.contains(&alg.as_str()) {
            return Err(ConfigError::new(
                path,
                format!(
                    "unknown algorithm \"{alg}\" (expected one of {})",
                    JWT_ALGORITHMS.join(", ")
                ),
            ));
        }
        kinds.push((KeyKind::of(alg), alg));
    }
    let (first_kind, first_alg) = kinds[0];
    if let Some((kind, alg)) = kinds.iter().find(|(k, _)| *k != first_kind) {
        let problem = if first_kind == KeyKind::Hmac || *kind == KeyKind::Hmac {
            format!("mixes HMAC and public-key algorithms ({first_alg} and {alg}); use one kind")
        } else {
            format!(
                "{first_alg} needs an {} key and {alg} an {} key, but there is one publicKeyFile",
                first_kind.describe(),
                kind.describe()
            )
        };
        return Err(ConfigError::new("gateway.auth.jwt.algorithms", problem));
    }
    if first_kind == KeyKind::Hmac {
        let Some(var) = &jwt.secret_env else {
            return Err(ConfigError::new(
                "gateway.auth.jwt.secretEnv",
                format!("is required for {first_alg}"),
            ));
        };
        check_env(var, "gateway.auth.jwt.secretEnv")?;
    } else {
        let Some(file) = &jwt.public_key_file else {
            return Err(ConfigError::new(
                "gateway.auth.jwt.publicKeyFile",
                format!("is required for {first_alg}"),
            ));
        };
        check_public_key(file, first_kind, base_dir)?;
    }
    if jwt.leeway_secs > MAX_LEEWAY_SECS {
        return Err(ConfigError::new(
            "gateway.auth.jwt.leewaySecs",
            format!("must be at most {MAX_LEEWAY_SECS} (seconds of clock skew tolerated on exp/nbf)"),
        ));
    }
    if jwt.tenant_claim.is_empty() {
        return Err(ConfigError::new(
            "gateway.auth.jwt.tenantClaim",
            "must not be empty",
        ));
    }
    Ok(())
}

/// `file` (relative to `base_dir`) must be readable and hold a PEM public key
/// of the algorithms' kind.
fn check_public_key(file: &str, kind: KeyKind, base_dir: &Path) -> Result<(), ConfigError> {
    let path = "gateway.auth.jwt.publicKeyFile";
    if file.is_empty() {
        return Err(ConfigError::new(path, "must not be empty"));
    }
    let resolved = resolve(base_dir, file);
    let pem = std::fs::read(&resolved).map_err(|e| {
        ConfigError::new(path, format!("cannot read {}: {e}", resolved.display())).with_file(&resolved)
    })?;
    let parsed = match kind {
        KeyKind::Rsa => jsonwebtoken::DecodingKey::from_rsa_pem(&pem).map(|_| ()),
        KeyKind::Ec => jsonwebtoken::DecodingKey::from_ec_pem(&pem).map(|_| ()),
        KeyKind::Ed => jsonwebtoken::DecodingKey::from_ed_pem(&pem).map(|_| ()),
        KeyKind::Hmac => Ok(()),
    };
    parsed.map_err(|e| {
        ConfigError::new(
            path,
            format!(
                "{} is not a PEM {} public key: {e}",
                resolved.display(),
                kind.describe()
            ),
        )
    })
}

/// `name` relative to `base_dir` unless it is absolute.
pub(crate) fn resolve(base_dir: &Path, name: &str) -> PathBuf {
    let p = Path::new(name);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base_dir.join(p)
    }
}

fn check_pressure(p: &PressureConfig, cfg: &GatewayConfig) -> Result<(), ConfigError> {
    for (name, limits) in &p.per_service {
        let path = format!("gateway.pressure.perService.{name}");
        if !cfg.upstreams.contains_key(name) {
            return Err(ConfigError::new(path, format!("no upstream named {name}")));
        }
        check_limits(limits, &path)?;
    }
    let mut resources: BTreeMap<&str, usize> = BTreeMap::new();
    let mut prefixes: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, route) in p.per_route.iter().enumerate() {
        let base = format!("gateway.pressure.perRoute[{i}]");
        check_route_resource(&route.resource, &format!("{base}.resource"), cfg)?;
        if let Some(j) = resources.insert(&route.resource, i) {
            return Err(ConfigError::new(
                format!("{base}.resource"),
                format!(
                    "\"{}\" conflicts with gateway.pressure.perRoute[{j}]",
                    route.resource
                ),
            ));
        }
        if !route.path_prefix.starts_with('/') {
            return Err(ConfigError::new(
                format!("{base}.pathPrefix"),
                "must start with /",
            ));
        }
        if let Some(j) = prefixes.insert(&route.path_prefix, i) {
            return Err(ConfigError::new(
                format!("{base}.pathPrefix"),
                format!(
                    "\"{}\" conflicts with gateway.pressure.perRoute[{j}]",
                    route.path_prefix
                ),
            ));
        }
        check_limits(&route.limits, &format!("{base}.limits"))?;
    }
    let tenant = &p.per_tenant;
    if let Some(limits) = &tenant.limits {
        check_limits(limits, "gateway.pressure.perTenant.limits")?;
    }
    if tenant.enabled {
        if tenant.limits.is_none() {
            return Err(ConfigError::new(
                "gateway.pressure.perTenant.limits",
                "is required when perTenant.enabled is true",
            ));
        }
        if cfg.auth.jwt.is_none() {
            return Err(ConfigError::new(
                "gateway.pressure.perTenant.enabled",
                "requires gateway.auth.jwt (the tenant comes from a JWT claim)",
            ));
        }
        // Checked only when enabled: a derived `TenantLimits::default()`
        // (used when `perTenant` is absent) has 0 here, which is harmless
        // while no tenant is limited.
        if tenant.max_tenants == 0 {
            return Err(ConfigError::new(
                "gateway.pressure.perTenant.maxTenants",
                "must be > 0",
            ));
        }
    }
    Ok(())
}

/// A route's resource id: non-empty, not a tenant's, not a service's.
/// Shared with manifest routes, whose `path` is inside their file.
pub(crate) fn check_route_resource(
    resource: &str,
    path: &str,
    cfg: &GatewayConfig,
) -> Result<(), ConfigError> {
    if resource.trim().is_empty() {
        return Err(ConfigError::new(path, "must not be empty"));
    }
    if resource.starts_with(TENANT_PREFIX) {
        return Err(ConfigError::new(
            path,
            format!("the prefix {TENANT_PREFIX} is reserved for perTenant resources"),
        ));
    }
    if let Some(name) = resource.strip_prefix("gateway:service:") {
        if cfg.pressure.per_service.contains_key(name) {
            return Err(ConfigError::new(
                path,
                format!("\"{resource}\" is the resource of gateway.pressure.perService.{name}"),
            ));
        }
    }
    Ok(())
}

fn check_request_limits(cfg: &GatewayConfig) -> Result<(), ConfigError> {
    let l = &cfg.limits;
    if !(MIN_HEADER_BYTES..=MAX_HEADER_BYTES).contains(&l.max_header_bytes) {
        return Err(ConfigError::new(
            "gateway.limits.maxHeaderBytes",
            format!("must be between {MIN_HEADER_BYTES} and {MAX_HEADER_BYTES}"),
        ));
    }
    if l.max_body_bytes == 0 {
        return Err(ConfigError::new("gateway.limits.maxBodyBytes", "must be > 0"));
    }
    let t = &cfg.timeouts;
    if t.connect_ms == 0 {
        return Err(ConfigError::new("gateway.timeouts.connectMs", "must be > 0"));
    }
    if t.total_ms == 0 {
        return Err(ConfigError::new("gateway.timeouts.totalMs", "must be > 0"));
    }
    for (value, name) in [
        (t.header_read_ms, "headerReadMs"),
        (t.idle_ms, "idleMs"),
        (t.body_read_ms, "bodyReadMs"),
        (t.send_ms, "sendMs"),
    ] {
        if value == 0 {
            return Err(ConfigError::new(
                format!("gateway.timeouts.{name}"),
                "must be > 0",
            ));
        }
    }
    if t.connect_ms > t.total_ms {
        return Err(ConfigError::new(
            "gateway.timeouts.connectMs",
            format!("must be at most totalMs ({})", t.total_ms),
        ));
    }
    Ok(())
}
