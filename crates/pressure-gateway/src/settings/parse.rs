//! Parsing the gateway config's shape with `serde_path_to_error`, so that
//! every shape error (unknown key, wrong type, negative number, missing
//! key) names its JSON path: `gateway.pressure.perRoute[1].limits`. What
//! the values mean is checked where the plan is built (`crate::plan`,
//! whose `load` reads a file, parses it here and builds its plan).

use super::error::ConfigError;
use super::shape::{deserialize_with_path, join, message_of};
use super::types::{ConfigFile, GatewayConfig};

/// Parses the shape only (no semantic checks, no manifests): the `gateway`
/// key of a `kb.config.json`-shaped document. Other top-level keys are ignored.
pub fn parse_shape(json: &str) -> Result<GatewayConfig, ConfigError> {
    if json.trim_start().starts_with('[') {
        return Err(ConfigError::new("(root)", "must be an object (got an array)"));
    }
    let file: ConfigFile = match deserialize_with_path(json, "") {
        Ok(file) => file,
        Err(e) if e.path == "gateway.backend" => return Err(refine_backend_error(json).unwrap_or(e)),
        Err(e) => return Err(e),
    };
    check_memory_backend_keys(json)?;
    check_no_positional_objects(json, &file.gateway)?;
    Ok(file.gateway)
}

/// serde_json accepts a struct written as an array of its fields in order
/// (`"perService": {"api": [5]}` would be `requestsPerSecond: 5`), which
/// `deny_unknown_fields` cannot catch. Every array of the input must be a
/// list in the parsed config too: where the parsed config has an object, the
/// input's array is refused.
fn check_no_positional_objects(json: &str, parsed: &GatewayConfig) -> Result<(), ConfigError> {
    let Ok(input) = serde_json::from_str::<serde_json::Value>(json) else {
        return Ok(());
    };
    let (Some(input), Ok(parsed)) = (input.get("gateway"), serde_json::to_value(parsed)) else {
        return Ok(());
    };
    match first_positional(input, &parsed, "gateway") {
        Some(path) => Err(ConfigError::new(path, "must be an object (got an array)")),
        None => Ok(()),
    }
}

/// The path of the first array in `input` whose counterpart in `parsed` is
/// an object.
fn first_positional(input: &serde_json::Value, parsed: &serde_json::Value, path: &str) -> Option<String> {
    use serde_json::Value;
    match (input, parsed) {
        (Value::Array(_), Value::Object(_)) => Some(path.to_owned()),
        (Value::Array(items), Value::Array(parsed)) => items
            .iter()
            .zip(parsed)
            .enumerate()
            .find_map(|(i, (a, b))| first_positional(a, b, &format!("{path}[{i}]"))),
        (Value::Object(map), Value::Object(parsed)) => map
            .iter()
            .find_map(|(k, v)| parsed.get(k).and_then(|p| first_positional(v, p, &join(path, k)))),
        _ => None,
    }
}

/// `gateway.backend` is an internally tagged enum: serde buffers it before
/// choosing the variant, so an error inside it loses its path. Parse the
/// Redis settings again on their own to recover the field's name.
fn refine_backend_error(json: &str) -> Option<ConfigError> {
    let mut root: serde_json::Value = serde_json::from_str(json).ok()?;
    let backend = root.get_mut("gateway")?.get_mut("backend")?.as_object_mut()?;
    if backend.get("type")?.as_str()? != "redis" {
        return None;
    }
    backend.remove("type");
    let text = serde_json::Value::Object(backend.clone()).to_string();
    deserialize_with_path::<pressure_redis::RedisConfig>(&text, "")
        .err()
        .map(|mut e| {
            e.path = match e.path.as_str() {
                "(root)" => "gateway.backend".to_string(),
                p => join("gateway.backend", p),
            };
            e.problem = e.problem.replace(" in the top level", " in gateway.backend");
            e
        })
}

/// serde does not refuse unknown keys next to a unit variant's tag, so
/// `{"type": "memory", "url": "..."}` would pass silently; refuse it here.
fn check_memory_backend_keys(json: &str) -> Result<(), ConfigError> {
    let root: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| ConfigError::new("(root)", format!("invalid JSON: {}", message_of(&e))))?;
    let Some(backend) = root
        .get("gateway")
        .and_then(|g| g.get("backend"))
        .and_then(|b| b.as_object())
    else {
        return Ok(());
    };
    if backend.get("type").and_then(|t| t.as_str()) != Some("memory") {
        return Ok(());
    }
    match backend.keys().find(|k| k.as_str() != "type") {
        Some(key) => Err(ConfigError::new(
            format!("gateway.backend.{key}"),
            format!("unknown key `{key}` in gateway.backend (the memory backend has no settings)"),
        )),
        None => Ok(()),
    }
}
