//! Loading the gateway config: read the file, parse its shape with
//! `serde_path_to_error` so that every shape error (unknown key, wrong type,
//! negative number, missing key) names its JSON path, run the semantic checks
//! of `validate.rs`, then merge the plugin manifests of `manifest.rs`.
//!
//! Paths use the dotted, indexed form `gateway.pressure.perRoute[1].limits`;
//! relative file names in the config (`pressure.manifestsDir`,
//! `auth.jwt.publicKeyFile`, the TLS files) are relative to the config
//! file's directory; the TLS ones are made absolute here, at load.

use super::error::ConfigError;
use super::manifest;
use super::types::{ConfigFile, GatewayConfig};
use super::validate::validate;
use serde::de::DeserializeOwned;
use serde_json::error::Category;
use std::path::Path;

/// Parses, validates and completes (plugin manifests) a config given as
/// text. Relative file names in it are resolved against the current
/// directory; use [`load`] to resolve them against the file's directory.
pub fn parse(json: &str) -> Result<GatewayConfig, ConfigError> {
    parse_in(json, Path::new("."))
}

/// Like [`parse`], with relative file names resolved against `base_dir`.
pub fn parse_in(json: &str, base_dir: &Path) -> Result<GatewayConfig, ConfigError> {
    let mut cfg = parse_shape(json)?;
    super::tls::resolve_files(&mut cfg, base_dir);
    validate(&cfg, base_dir)?;
    manifest::apply_manifests(&mut cfg, base_dir)?;
    Ok(cfg)
}

/// Reads the config file at `path`, then does what [`parse_in`] does with
/// the file's directory as the base of relative file names.
pub fn load(path: &Path) -> Result<GatewayConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError::new(path.display().to_string(), format!("cannot read: {e}")).with_file(path)
    })?;
    parse_in(&text, base_dir_of(path))
}

/// The directory relative names in the file at `path` are resolved against.
pub(crate) fn base_dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

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

/// Deserializes `json` into `T`; errors carry the JSON path, prefixed by
/// `prefix` (a file name such as `manifests/github.json: `, or empty).
pub(crate) fn deserialize_with_path<T: DeserializeOwned>(json: &str, prefix: &str) -> Result<T, ConfigError> {
    let mut de = serde_json::Deserializer::from_str(json);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let mut error = shape_error(&e, prefix);
        if let Some(hint) = near_key_hint(json, &e) {
            error.problem.push_str(&hint);
        }
        error
    })?;
    // Trailing garbage after the document is a syntax error too.
    de.end().map_err(|e| {
        ConfigError::new(
            format!("{prefix}(root)"),
            format!(
                "invalid JSON: {} at line {} column {}",
                message_of(&e),
                e.line(),
                e.column()
            ),
        )
    })?;
    Ok(value)
}

/// For a missing key, a key of the same object that looks like a typo of it:
/// ` (found `gatway`; did you mean `gateway`?)`.
fn near_key_hint(json: &str, err: &serde_path_to_error::Error<serde_json::Error>) -> Option<String> {
    let msg = message_of(err.inner());
    let rest = msg.strip_prefix("missing field `")?;
    let (missing, _) = split_quoted(rest);
    let mut node: serde_json::Value = serde_json::from_str(json).ok()?;
    for segment in err.path().iter() {
        node = match segment {
            serde_path_to_error::Segment::Map { key } => node.get_mut(key.as_str())?.take(),
            serde_path_to_error::Segment::Seq { index } => node.get_mut(*index)?.take(),
            _ => return None,
        };
    }
    let found = node
        .as_object()?
        .keys()
        .filter(|k| k.as_str() != missing)
        .map(|k| (edit_distance(k, missing), k))
        .filter(|(d, _)| *d <= 2)
        .min()?
        .1
        .clone();
    Some(format!(" (found `{found}`; did you mean `{missing}`?)"))
}

/// Levenshtein distance, for typo hints (keys are short).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// Turns a `serde_path_to_error` error into a [`ConfigError`] with the path
/// in our dotted/indexed form and a message meant for operators.
fn shape_error(err: &serde_path_to_error::Error<serde_json::Error>, prefix: &str) -> ConfigError {
    let mut path = render_path(err.path());
    let inner = err.inner();
    let msg = message_of(inner);
    let root = |p: &str| {
        if p.is_empty() {
            format!("{prefix}(root)")
        } else {
            format!("{prefix}{p}")
        }
    };
    match inner.classify() {
        Category::Syntax | Category::Eof | Category::Io => ConfigError::new(
            root(&path),
            format!(
                "invalid JSON: {msg} at line {} column {}",
                inner.line(),
                inner.column()
            ),
        ),
        Category::Data => {
            if let Some(rest) = msg.strip_prefix("unknown field `") {
                let (key, expected) = split_quoted(rest);
                if !path.ends_with(&format!(".{key}")) && path != key {
                    path = join(&path, key);
                }
                let known = match expected.strip_prefix(", expected one of ") {
                    Some(list) => format!(" (known keys: {list})"),
                    None => match expected.strip_prefix(", expected ") {
                        Some(some) if some.contains(" or ") => format!(" (known keys: {some})"),
                        Some(one) => format!(" (known key: {one})"),
                        None => " (no keys are allowed here)".to_string(),
                    },
                };
                let parent = match path.rfind('.') {
                    Some(i) => path[..i].to_string(),
                    None => "the top level".to_string(),
                };
                ConfigError::new(root(&path), format!("unknown key `{key}` in {parent}{known}"))
            } else if let Some(rest) = msg.strip_prefix("missing field `") {
                let (key, _) = split_quoted(rest);
                ConfigError::new(root(&join(&path, key)), "is required")
            } else if let Some(rest) = msg.strip_prefix("unknown variant `") {
                let (value, expected) = split_quoted(rest);
                let expected = expected.strip_prefix(", expected ").unwrap_or(expected);
                ConfigError::new(
                    root(&path),
                    format!("unknown value `{value}` (expected {expected})"),
                )
            } else if let Some(rest) = msg
                .strip_prefix("invalid type: ")
                .or_else(|| msg.strip_prefix("invalid value: "))
            {
                match rest.split_once(", expected ") {
                    Some((got, expected)) => ConfigError::new(
                        root(&path),
                        format!(
                            "must be {} (got {})",
                            describe_expected(expected),
                            describe_got(got)
                        ),
                    ),
                    None => ConfigError::new(root(&path), rest.to_string()),
                }
            } else if msg.starts_with("invalid length") && msg.contains("expected struct") {
                // serde_json accepts a struct written as an array; say what we mean.
                ConfigError::new(root(&path), "must be an object")
            } else {
                ConfigError::new(root(&path), msg)
            }
        }
    }
}

/// `a.b` + `c` → `a.b.c`; `` + `c` → `c`.
fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Splits `` key`, rest `` into `key` and `, rest`.
fn split_quoted(s: &str) -> (&str, &str) {
    match s.split_once('`') {
        Some((quoted, rest)) => (quoted, rest),
        None => (s, ""),
    }
}

/// serde's name of an expected type, in the words of a JSON user.
fn describe_expected(expected: &str) -> String {
    match expected {
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a non-negative integer".into(),
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "an integer".into(),
        "f32" | "f64" => "a number".into(),
        "a sequence" => "an array".into(),
        "a map" => "an object".into(),
        e if e.starts_with("struct ") || e.contains("enum ") || e.starts_with("a map") => "an object".into(),
        e => e.to_string(),
    }
}

/// serde_json's description of an unexpected value, e.g. ``integer `-5` ``.
fn describe_got(got: &str) -> String {
    match got {
        "map" => "an object".into(),
        "sequence" => "an array".into(),
        g => {
            let g = g.replace('`', "");
            match g
                .strip_prefix("integer ")
                .or_else(|| g.strip_prefix("floating point "))
            {
                Some(number) => number.to_string(),
                None => g,
            }
        }
    }
}

/// serde_json's message without its ` at line L column C` suffix.
fn message_of(err: &serde_json::Error) -> String {
    let full = err.to_string();
    let suffix = format!(" at line {} column {}", err.line(), err.column());
    match full.strip_suffix(&suffix) {
        Some(m) => m.to_string(),
        None => full,
    }
}

/// Renders a tracked path as `gateway.pressure.perRoute[1].limits`.
fn render_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => {}
        }
    }
    out
}
