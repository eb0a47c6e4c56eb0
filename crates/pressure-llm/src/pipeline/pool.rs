//! Deployment pools: a chain level of several (provider, model)
//! deployments of one model — the same model behind several provider
//! keys, regions or Azure-style deployments, each with its own limits
//! (learned from its own rate-limit headers) and its own breaker.
//!
//! ```json
//! { "pool": [ {"model": "oa1/gpt-4o", "weight": 2}, {"model": "oa2/gpt-4o"} ] }
//! ```
//!
//! Each member names a model of `models` (`provider/model`), configured as
//! any other; `weight` (1 to [`MAX_POOL_WEIGHT`], default 1) shares the
//! attempts among the members that can all admit one now. A pool holds 2
//! to [`MAX_POOL_MEMBERS`] distinct members and no pool. How an attempt
//! picks its member is the engine's (`engine/pool.rs`).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::config::ConfigError;

/// The most members of one pool.
pub const MAX_POOL_MEMBERS: usize = 16;

/// The largest `weight` of a pool member.
pub const MAX_POOL_WEIGHT: u32 = 1000;

/// The `weight` of a member that sets none.
pub const DEFAULT_POOL_WEIGHT: u32 = 1;

/// One deployment of a pool: `{"model": "provider/model", "weight": 2}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolMember {
    /// `provider/model` of `models`.
    #[serde(default)]
    pub model: String,
    /// Its share of the attempts among the members that admit one now
    /// (1 to 1000, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// Only read to refuse it: a pool does not hold a pool.
    #[serde(default, skip_serializing)]
    #[schemars(skip)]
    pub pool: Option<serde_json::Value>,
}

impl PoolMember {
    /// A member `model` of weight `weight`.
    pub fn new(model: impl Into<String>, weight: Option<u32>) -> Self {
        Self {
            model: model.into(),
            weight,
            pool: None,
        }
    }

    /// `weight`, or [`DEFAULT_POOL_WEIGHT`].
    pub fn weight(&self) -> u32 {
        self.weight.unwrap_or(DEFAULT_POOL_WEIGHT)
    }
}

/// Checks the pool `members` at `path` (`useCases.x.chain[i].pool`):
/// 2 to [`MAX_POOL_MEMBERS`] members, each a known model (`keys`), named
/// once, of weight 1 to [`MAX_POOL_WEIGHT`], and none a pool.
pub(crate) fn check_pool(
    members: &[PoolMember],
    path: &str,
    keys: &BTreeSet<String>,
) -> Result<(), ConfigError> {
    match members.len() {
        0 => return Err(ConfigError::new(path, "must not be empty")),
        1 => {
            return Err(ConfigError::new(
                path,
                "a pool needs at least 2 members (one deployment is a plain {\"model\": ...} level)",
            ))
        }
        n if n > MAX_POOL_MEMBERS => {
            return Err(ConfigError::new(
                path,
                format!("at most {MAX_POOL_MEMBERS} members, got {n}"),
            ))
        }
        _ => {}
    }
    let mut seen = BTreeSet::new();
    for (j, m) in members.iter().enumerate() {
        let mp = format!("{path}[{j}]");
        if m.pool.is_some() {
            return Err(ConfigError::new(
                format!("{mp}.pool"),
                "a pool member is one deployment ({\"model\": \"provider/model\"}), not a pool",
            ));
        }
        if m.model.is_empty() {
            return Err(ConfigError::new(
                format!("{mp}.model"),
                "required: \"provider/model\" of `models`",
            ));
        }
        if !keys.contains(&m.model) {
            return Err(ConfigError::new(
                format!("{mp}.model"),
                format!(
                    "unknown model {:?} (expected \"provider/model\" of `models`)",
                    m.model
                ),
            ));
        }
        if !seen.insert(m.model.as_str()) {
            return Err(ConfigError::new(
                format!("{mp}.model"),
                format!("duplicate member {:?}: each deployment once", m.model),
            ));
        }
        if !(1..=MAX_POOL_WEIGHT).contains(&m.weight()) {
            return Err(ConfigError::new(
                format!("{mp}.weight"),
                format!("must be 1 to {MAX_POOL_WEIGHT}"),
            ));
        }
    }
    Ok(())
}
