//! `gateway.decisions`: the decision listener (`POST /v1/acquire`, permits,
//! `/v1/forward-auth`) that lets services and proxies in front of them ask
//! the gateway's broker (checked when the plan is built,
//! `crate::plan`).

use serde::{Deserialize, Serialize};

/// Most permits the decision listener holds for its clients by default.
pub const DEFAULT_MAX_PERMITS: usize = 100_000;

/// `gateway.decisions`: the decision API and forward auth, on a listener of
/// their own (off when absent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecisionsConfig {
    /// Address of the decision listener, e.g. `127.0.0.1:8082`.
    pub listen: String,
    /// Environment variable holding the bearer token every call must carry
    /// (`Authorization: Bearer <token>`; forward auth: `X-Pressure-Token`).
    /// Required when `listen` is not a loopback address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
    /// Most permits held at once for clients of `POST /v1/acquire`; beyond,
    /// an acquisition that would hold one is refused with `503`.
    #[serde(default = "default_max_permits")]
    pub max_permits: usize,
}

fn default_max_permits() -> usize {
    DEFAULT_MAX_PERMITS
}
