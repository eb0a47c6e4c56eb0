//! The settings the plan reads but does not build from: the backend's
//! Redis URLs, the request bounds and timeouts, and the LLM pipeline's own
//! checks (under `gateway.llm`).

use crate::settings::{BackendConfig, ConfigError, GatewayConfig};

/// Smallest accepted `limits.maxHeaderBytes` (hyper buffers at least 8 KiB
/// of request head, so a smaller bound could not be honoured).
pub(crate) const MIN_HEADER_BYTES: usize = 8192;

/// Largest accepted `limits.maxHeaderBytes` (1 MiB).
pub(crate) const MAX_HEADER_BYTES: usize = 1024 * 1024;

/// `gateway.backend`: the Redis settings and URLs.
pub(super) fn check_backend(backend: &BackendConfig) -> Result<(), ConfigError> {
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

/// `gateway.limits` and `gateway.timeouts`.
pub(super) fn check_request_limits(cfg: &GatewayConfig) -> Result<(), ConfigError> {
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
    for (value, name) in [
        (t.connect_ms, "connectMs"),
        (t.total_ms, "totalMs"),
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

/// `gateway.llm`: the pipeline's own checks, their paths under `gateway.llm`.
pub(super) fn check_llm(cfg: &GatewayConfig) -> Result<(), ConfigError> {
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
