//! Python dicts → the core's configuration types, through serde with the
//! same camelCase keys as the gateway config (`requestsPerSecond`, …).
//! An unknown or mistyped key is a `ConfigError` that names it.

use crate::errors::ConfigError;
use pressure_core::{Limits, Priority, QueueConfig};
use pressure_redis::RedisConfig;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyList, PyMapping, PyTuple};
use serde::de::DeserializeOwned;

/// Refuses a NaN or an infinity anywhere in `value` (dicts, lists, tuples):
/// converted to JSON it would become `null`, which reads as "not set" — a
/// limit dropped without a word. The message names the key's path.
fn reject_non_finite(value: &Bound<'_, PyAny>, path: &str) -> PyResult<()> {
    if let Ok(f) = value.cast::<PyFloat>() {
        if !f.value().is_finite() {
            return Err(ConfigError::new_err(format!(
                "{path}: must be a finite number, got {}",
                value.repr()?
            )));
        }
    } else if let Ok(d) = value.cast::<PyDict>() {
        for (k, v) in d.iter() {
            reject_non_finite(&v, &format!("{path}.{}", k.str()?))?;
        }
    } else if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        for (i, v) in value.try_iter()?.enumerate() {
            reject_non_finite(&v?, &format!("{path}[{i}]"))?;
        }
    } else if let Ok(m) = value.cast::<PyMapping>() {
        for item in m.items()?.iter() {
            let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
            reject_non_finite(&v, &format!("{path}.{}", k.str()?))?;
        }
    }
    Ok(())
}

/// One count argument (`requests`, `input_tokens`, `cost_micro_usd`, …): a
/// non-negative `int` below 2**64. A float (NaN, an infinity, a fraction,
/// even `5.0`), a bool, a negative or too large int, or anything else is a
/// `ConfigError` naming the argument: never truncated or wrapped.
pub(crate) fn count(name: &str, value: &Bound<'_, PyAny>) -> PyResult<u64> {
    let exact = if value.is_instance_of::<PyBool>() || value.is_instance_of::<PyFloat>() {
        None
    } else {
        value.extract::<u64>().ok()
    };
    match exact {
        Some(n) => Ok(n),
        None => Err(ConfigError::new_err(format!(
            "{name}: must be a non-negative integer below 2**64, got {}",
            value.repr()?
        ))),
    }
}

/// [`count`] of an optional argument: `None` when absent or `None`.
pub(crate) fn opt_count(name: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    match value {
        Some(v) if !v.is_none() => count(name, v).map(Some),
        _ => Ok(None),
    }
}

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
    reject_non_finite(value, what)?;
    // Straight from the Python objects (no JSON value in between), so an
    // int beyond u64 is an error at its key, not an unnamed "out of range".
    let mut de = pythonize::Depythonizer::from_object(value);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
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
        Some(o) if !o.is_none() => {
            reject_non_finite(o, "options")?;
            pythonize::depythonize::<serde_json::Value>(o)
                .map_err(|e| ConfigError::new_err(format!("options: {e}")))?
        }
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
