//! `gateway.rls`: Envoy's rate limit service on a listener of the gateway,
//! sharing its broker, backend and `/metrics` (docs/architecture.md#envoys-rate-limit-service).

use serde::{Deserialize, Serialize};

/// `gateway.rls`: off when absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RlsConfig {
    /// The gRPC address Envoy's `rate_limit_service` points at, e.g.
    /// `127.0.0.1:8089`.
    pub listen: String,
    /// envoyproxy/ratelimit YAML files, one domain each (relative to the
    /// config file). Read again on SIGHUP and, with `--watch`, when they
    /// change; the listener itself changes only with a restart.
    pub files: Vec<String>,
}
