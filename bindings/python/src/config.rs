//! Python dicts → the core's configuration types, through serde with the
//! same camelCase keys as the gateway config (`requestsPerSecond`, …).
//! An unknown or mistyped key is a `ConfigError` that names it.

use crate::errors::ConfigError;
use pressure_core::{Limits, Priority, QueueConfig};
use pressure_redis::RedisConfig;
use pyo3::prelude::*;
use pyo3::types::PyMapping;
use serde::de::DeserializeOwned;

/// Deserializes `value` (a dict) into `T`; the message starts with `what`
/// and the path of the offending key (`limits.requestsPerMinute: invalid
/// value: integer `-1`, expected u64`).
fn from_py<T: DeserializeOwned>(value: &Bound<'_, PyAny>, what: &str) -> PyResult<T> {
    // serde would also read a list as the fields in order.
    if value.cast::<PyMapping>().is_err() {
        return Err(ConfigError::new_err(format!(
            "{what}: expected a dict with camelCase keys, got {}",
            value.get_type().name()?
        )));
    }
    let json: serde_json::Value =
        pythonize::depythonize(value).map_err(|e| ConfigError::new_err(format!("{what}: {e}")))?;
    serde_path_to_error::deserialize(json).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            ConfigError::new_err(format!("{what}: {inner}"))
        } else {
            ConfigError::new_err(format!("{what}.{path}: {inner}"))
        }
    })
}

/// The limits of `resource` from a dict such as `{"requestsPerSecond": 10}`.
pub(crate) fn limits(resource: &str, value: &Bound<'_, PyAny>) -> PyResult<Limits> {
    from_py(value, &format!("resource {resource:?}: limits"))
}

/// The queue settings of `resource` (`{"maxQueued": 100, "maxWaitMs": 5000}`);
/// `None`: the defaults.
pub(crate) fn queue(resource: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<QueueConfig> {
    match value {
        None => Ok(QueueConfig::default()),
        Some(v) if v.is_none() => Ok(QueueConfig::default()),
        Some(v) => from_py(v, &format!("resource {resource:?}: queue")),
    }
}

/// `"interactive"` or `"batch"`.
pub(crate) fn priority(value: &str) -> PyResult<Priority> {
    match value {
        "interactive" => Ok(Priority::Interactive),
        "batch" => Ok(Priority::Batch),
        other => Err(ConfigError::new_err(format!(
            "priority: expected \"interactive\" or \"batch\", got {other:?}"
        ))),
    }
}

/// The Redis settings: `options` (camelCase keys of the gateway's `backend`
/// object: `keyPrefix`, `timeoutMs`, `failureMode`, …) with `url` and the
/// cluster seed nodes set from the arguments.
pub(crate) fn redis(
    url: Option<String>,
    cluster: Option<Vec<String>>,
    options: Option<&Bound<'_, PyAny>>,
) -> PyResult<RedisConfig> {
    let mut value = match options {
        Some(o) if !o.is_none() => pythonize::depythonize::<serde_json::Value>(o)
            .map_err(|e| ConfigError::new_err(format!("options: {e}")))?,
        _ => serde_json::Value::Object(serde_json::Map::new()),
    };
    let Some(map) = value.as_object_mut() else {
        return Err(ConfigError::new_err("options: expected a dict"));
    };
    if let Some(url) = url {
        map.insert("url".into(), serde_json::Value::String(url));
    }
    if let Some(nodes) = cluster {
        if nodes.is_empty() {
            return Err(ConfigError::new_err("cluster: needs at least one node URL"));
        }
        map.insert(
            "clusterNodes".into(),
            serde_json::Value::Array(nodes.into_iter().map(serde_json::Value::String).collect()),
        );
    }
    if !map.contains_key("url") && !map.contains_key("clusterNodes") {
        return Err(ConfigError::new_err(
            "connect: give `redis` (a redis:// URL) or `cluster` (the seed node URLs)",
        ));
    }
    let config: RedisConfig =
        serde_json::from_value(value).map_err(|e| ConfigError::new_err(format!("options: {e}")))?;
    config
        .validate()
        .map_err(|e| ConfigError::new_err(format!("options: {e}")))?;
    Ok(config)
}
