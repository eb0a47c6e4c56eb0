//! Shape errors that an operator can act on: deserializing JSON with
//! `serde_path_to_error`, so that every unknown key, wrong type, negative
//! number or missing key names its JSON path (in the dotted, indexed form
//! `gateway.pressure.perRoute[1].limits`) and says what was expected, with a
//! hint for a key that looks like a typo. Used for the config and for the
//! plugin manifests.

use super::error::ConfigError;
use serde::de::DeserializeOwned;
use serde_json::error::Category;

/// Deserializes `json` into `T`; errors carry the JSON path, prefixed by
/// `prefix` (a file name such as `manifests/github.json: `, or empty).
pub(super) fn deserialize_with_path<T: DeserializeOwned>(json: &str, prefix: &str) -> Result<T, ConfigError> {
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
pub(super) fn join(path: &str, key: &str) -> String {
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
pub(super) fn message_of(err: &serde_json::Error) -> String {
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
