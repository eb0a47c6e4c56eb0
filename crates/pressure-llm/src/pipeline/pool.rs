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

// A configuration error at a JSON path (the pipeline's `ConfigError`).
use pressure_core::FieldError as ConfigError;

/// The most members of one pool.
pub const MAX_POOL_MEMBERS: usize = 16;

/// The largest `weight` of a pool member.
pub const MAX_POOL_WEIGHT: u32 = 1000;

/// The `weight` of a member that sets none.
pub const DEFAULT_POOL_WEIGHT: u32 = 1;

/// One deployment of a pool: `{"model": "provider/model", "weight": 2}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = model_required)]
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

/// The schema of [`PoolMember`] says `model` is required: it is parsed
/// with a default only so that a member without one (a nested pool) gets
/// [`check_pool`]'s error at its path.
fn model_required(schema: &mut schemars::Schema) {
    if let Some(model) = schema
        .pointer_mut("/properties/model")
        .and_then(serde_json::Value::as_object_mut)
    {
        model.remove("default");
    }
    schema.insert("required".to_owned(), serde_json::json!(["model"]));
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

#[cfg(test)]
mod tests {
    use crate::pipeline::{ChainLevel, LlmConfig, ModelKind};
    use serde_json::{json, Value};

    /// Two providers serving `gpt-4o` (and `oa1` an embedding model), and
    /// a use case `u` whose chain is `chain`.
    fn config(chain: Value) -> LlmConfig {
        let chat = |p: &str| {
            json!({ "provider": p, "model": "gpt-4o", "limits": { "requestsPerMinute": 3 },
                    "context": { "contextTokens": 1000, "maxOutputTokens": 100 } })
        };
        serde_json::from_value(json!({
            "providers": { "oa1": { "baseUrl": "http://127.0.0.1:1/v1" },
                           "oa2": { "baseUrl": "http://127.0.0.1:2/v1" },
                           "oa3": { "baseUrl": "http://127.0.0.1:3/v1" } },
            "models": [ chat("oa1"), chat("oa2"), chat("oa3"),
                        { "provider": "oa1", "model": "emb", "kind": "embedding" } ],
            "useCases": { "u": { "chain": chain } },
        }))
        .expect("parses")
    }

    /// The path and message of the first problem of a chain.
    fn problem(chain: Value) -> Option<(String, String)> {
        config(chain).validate().err().map(|e| (e.path, e.problem))
    }

    #[test]
    fn a_pool_of_known_deployments_is_a_chain_level() {
        let chain = json!([ {"pool": [ {"model": "oa1/gpt-4o", "weight": 2}, {"model": "oa2/gpt-4o"} ]},
                            {"model": "oa3/gpt-4o"}, {"manualQueue": true} ]);
        assert_eq!(problem(chain.clone()), None);
        let cfg = config(chain);
        let level = &cfg.use_cases["u"].chain[0];
        let ChainLevel::Pool(members) = level else {
            panic!("a pool level: {level:?}");
        };
        assert_eq!(
            members
                .iter()
                .map(|m| (m.model.as_str(), m.weight()))
                .collect::<Vec<_>>(),
            vec![("oa1/gpt-4o", 2), ("oa2/gpt-4o", 1)]
        );
        assert_eq!(
            level.model_keys().collect::<Vec<_>>(),
            vec!["oa1/gpt-4o", "oa2/gpt-4o"]
        );
        assert_eq!(cfg.use_case_kind("u"), Some(ModelKind::Chat));
        // It serialises back to the same shape (no `pool` key in a member).
        let back = serde_json::to_value(level).expect("serialises");
        assert_eq!(
            back,
            json!({"pool": [ {"model": "oa1/gpt-4o", "weight": 2}, {"model": "oa2/gpt-4o"} ]})
        );
    }

    #[test]
    fn hostile_pools_are_refused_at_their_json_path() {
        let member = |m: &str| json!({ "model": m });
        let cases = [
            (
                json!({"pool": []}),
                "useCases.u.chain[0].pool",
                "must not be empty",
            ),
            (
                json!({"pool": [member("oa1/gpt-4o")]}),
                "useCases.u.chain[0].pool",
                "at least 2 members",
            ),
            (
                json!({"pool": [member("oa1/gpt-4o"), member("oa1/gpt-4o")]}),
                "useCases.u.chain[0].pool[1].model",
                "duplicate member",
            ),
            (
                json!({"pool": [member("oa1/gpt-4o"), member("oa9/gpt-4o")]}),
                "useCases.u.chain[0].pool[1].model",
                "unknown model",
            ),
            (
                json!({"pool": [member("oa1/gpt-4o"), {"weight": 2}]}),
                "useCases.u.chain[0].pool[1].model",
                "required",
            ),
            (
                json!({"pool": [{"model": "oa1/gpt-4o", "weight": 0}, member("oa2/gpt-4o")]}),
                "useCases.u.chain[0].pool[0].weight",
                "1 to 1000",
            ),
            (
                json!({"pool": [member("oa1/gpt-4o"), {"model": "oa2/gpt-4o", "weight": 1001}]}),
                "useCases.u.chain[0].pool[1].weight",
                "1 to 1000",
            ),
            (
                json!({"pool": [member("oa1/gpt-4o"),
                                {"pool": [member("oa2/gpt-4o"), member("oa3/gpt-4o")]}]}),
                "useCases.u.chain[0].pool[1].pool",
                "not a pool",
            ),
            (
                json!({"pool": [member("oa1/gpt-4o"), member("oa1/emb")]}),
                "useCases.u.chain[0].pool[1].model",
                "a chain serves one kind",
            ),
        ];
        for (level, path, says) in cases {
            let got = problem(json!([level.clone()]));
            let Some((at, problem)) = got else {
                panic!("{level} was accepted");
            };
            assert_eq!(at, path, "{level}: {problem}");
            assert!(problem.contains(says), "{level}: {problem}");
        }
        let many: Vec<Value> = (0..17).map(|i| member(&format!("oa1/m{i}"))).collect();
        let (at, problem) = problem(json!([{"pool": many}])).expect("17 members are refused");
        assert_eq!(at, "useCases.u.chain[0].pool");
        assert!(problem.contains("at most 16"), "{problem}");
        // Unknown member keys are refused by the shape.
        assert!(serde_json::from_value::<ChainLevel>(
            json!({"pool": [{"model": "oa1/gpt-4o", "wieght": 2}, {"model": "oa2/gpt-4o"}]})
        )
        .is_err());
    }

    #[test]
    fn a_pool_follows_an_embedding_chain_kind() {
        let cfg: LlmConfig = serde_json::from_value(json!({
            "providers": { "a": { "baseUrl": "http://127.0.0.1:1/v1" }, "b": { "baseUrl": "http://127.0.0.1:2/v1" } },
            "models": [ { "provider": "a", "model": "e", "kind": "embedding" },
                        { "provider": "b", "model": "e", "kind": "embedding" } ],
            "useCases": { "s": { "chain": [ {"pool": [ {"model": "a/e"}, {"model": "b/e"} ]} ] } },
        }))
        .expect("parses");
        assert_eq!(cfg.validate().err().map(|e| e.path), None);
        assert_eq!(cfg.use_case_kind("s"), Some(ModelKind::Embedding));
    }
}
