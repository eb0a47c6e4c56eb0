//! `docs/config.md`: the config reference, rendered from the JSON Schema
//! ([`super::schema::schema`]), so every key, type, default and description
//! comes from the config types and their doc comments.
//!
//! One section per object type, titled by the first key path where it
//! appears (`gateway.upstreams.<name>`, `gateway.pressure.perRoute[]`); a
//! type met again links to its section.

use serde_json::{Map, Value};
use std::collections::{BTreeSet, VecDeque};
use std::fmt::Write;

/// The Markdown reference of the whole config file.
pub fn markdown() -> String {
    Renderer::new(super::schema::schema()).render()
}

struct Renderer {
    defs: Map<String, Value>,
    root: Value,
    /// Definitions already given a section (or queued for one), with their path.
    placed: Vec<(String, String)>,
    queue: VecDeque<(String, Value)>,
}

/// The first paragraph of a description, on one line, safe inside a table.
fn summary(description: Option<&str>) -> String {
    let text = description.unwrap_or("");
    let first = text.split("\n\n").next().unwrap_or("");
    first
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// A GitHub-style anchor of a heading made of `path` in backticks.
fn anchor(path: &str) -> String {
    path.chars()
        .filter_map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '_' => Some(c),
            'A'..='Z' => Some(c.to_ascii_lowercase()),
            ' ' => Some('-'),
            _ => None,
        })
        .collect()
}

fn def_name(reference: &str) -> Option<&str> {
    reference.strip_prefix("#/$defs/")
}

impl Renderer {
    fn new(mut root: Value) -> Self {
        let defs = root
            .as_object_mut()
            .and_then(|o| o.remove("$defs"))
            .and_then(|d| d.as_object().cloned())
            .unwrap_or_default();
        Self {
            defs,
            root,
            placed: Vec::new(),
            queue: VecDeque::new(),
        }
    }

    fn render(mut self) -> String {
        let mut out = String::from(
            "# Configuration reference\n\n\
             Generated from the config types: do not edit by hand. Regenerate with\n\
             `cargo run -p pressure-cli -- config reference > docs/config.md`\n\
             (a test fails when this file is stale). The same facts as a JSON Schema:\n\
             `pressure config schema`. `pressure check-config FILE` validates a file\n\
             and names the JSON path of the first problem.\n\n\
             A config file is a JSON object; the gateway reads its `gateway` key and\n\
             ignores the others. Keys are camelCase and unknown keys are errors.\n\
             *required* marks a key without a default; durations are milliseconds\n\
             (`…Ms`), sizes bytes.\n",
        );
        let root = self.root.clone();
        self.queue.push_back(("top level".into(), root));
        while let Some((path, schema)) = self.queue.pop_front() {
            self.section(&mut out, &path, &schema);
        }
        out
    }

    /// The definition `schema` points at (itself when it is no reference).
    fn resolve<'a>(&'a self, schema: &'a Value) -> &'a Value {
        match schema.get("$ref").and_then(Value::as_str).and_then(def_name) {
            Some(name) => self.defs.get(name).unwrap_or(schema),
            None => schema,
        }
    }

    /// A link to the section of definition `name`, placing it at `path` on
    /// first sight.
    fn link(&mut self, name: &str, path: &str) -> String {
        let at = match self.placed.iter().find(|(n, _)| n == name) {
            Some((_, at)) => at.clone(),
            None => {
                let def = self.defs.get(name).cloned().unwrap_or(Value::Null);
                if !self.is_object(&def) {
                    return self.describe_inline(&def, path);
                }
                self.placed.push((name.to_owned(), path.to_owned()));
                self.queue.push_back((path.to_owned(), def));
                path.to_owned()
            }
        };
        format!("[object](#{})", anchor(&format!("`{at}`")))
    }

    fn is_object(&self, schema: &Value) -> bool {
        schema.get("properties").is_some()
            || schema
                .get("oneOf")
                .and_then(Value::as_array)
                .is_some_and(|v| v.iter().any(|s| s.get("properties").is_some()))
    }

    /// The type column of a property found at `path`.
    fn describe(&mut self, schema: &Value, path: &str) -> String {
        if let Some(name) = schema.get("$ref").and_then(Value::as_str).and_then(def_name) {
            let name = name.to_owned();
            return self.link(&name, path);
        }
        if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
            let parts: Vec<Value> = any
                .iter()
                .filter(|s| s.get("type").and_then(Value::as_str) != Some("null"))
                .cloned()
                .collect();
            let inner: Vec<String> = parts.iter().map(|p| self.describe(p, path)).collect();
            return inner.join(" or ");
        }
        if self.is_object(schema) {
            let key = format!("inline:{path}");
            self.placed.push((key, path.to_owned()));
            self.queue.push_back((path.to_owned(), schema.clone()));
            return format!("[object](#{})", anchor(&format!("`{path}`")));
        }
        self.describe_inline(schema, path)
    }

    fn describe_inline(&mut self, schema: &Value, path: &str) -> String {
        if let Some(c) = schema.get("const") {
            return format!("`{c}`");
        }
        if let Some(values) = schema.get("enum").and_then(Value::as_array) {
            return values
                .iter()
                .map(|v| format!("`{v}`"))
                .collect::<Vec<_>>()
                .join(" \\| ");
        }
        if let Some(one) = schema.get("oneOf").and_then(Value::as_array) {
            let one = one.clone();
            return one
                .iter()
                .map(|s| self.describe_inline(s, path))
                .collect::<Vec<_>>()
                .join(" \\| ");
        }
        let types: Vec<&str> = match schema.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .filter(|t| *t != "null")
                .collect(),
            _ => vec![],
        };
        match types.first().copied() {
            Some("array") => {
                let items = schema.get("items").cloned().unwrap_or(Value::Null);
                format!("array of {}", self.describe(&items, &format!("{path}[]")))
            }
            Some("object") => match schema.get("additionalProperties") {
                Some(v) if v.is_object() => {
                    let v = v.clone();
                    format!("map of {}", self.describe(&v, &format!("{path}.<name>")))
                }
                _ => "object".into(),
            },
            Some(t) => {
                let mut s = t.to_owned();
                if let Some(min) = schema.get("minimum").filter(|_| t != "integer") {
                    let _ = write!(s, " ≥ {min}");
                }
                s
            }
            None => "any".into(),
        }
    }

    fn section(&mut self, out: &mut String, path: &str, schema: &Value) {
        let schema = self.resolve(schema).clone();
        if let Some(variants) = schema.get("oneOf").and_then(Value::as_array) {
            let _ = write!(out, "\n## `{path}`\n");
            self.intro(out, path, &schema);
            out.push_str("\nOne of:\n");
            for v in variants.clone() {
                let tag = v
                    .get("properties")
                    .and_then(Value::as_object)
                    .and_then(|p| p.iter().find(|(_, s)| s.get("const").is_some()))
                    .map(|(k, s)| format!("`{k}: {}`", s["const"]));
                let label = tag.unwrap_or_else(|| {
                    v.get("required")
                        .and_then(Value::as_array)
                        .map(|r| {
                            r.iter()
                                .filter_map(Value::as_str)
                                .map(|k| format!("`{k}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        })
                        .unwrap_or_default()
                });
                let _ = write!(
                    out,
                    "\n### {label} — {}\n",
                    summary(v.get("description").and_then(Value::as_str))
                );
                self.table(out, path, &v);
            }
            return;
        }
        let _ = write!(out, "\n## `{path}`\n");
        self.intro(out, path, &schema);
        self.table(out, path, &schema);
    }

    /// The section's description, unless it only repeats the path.
    fn intro(&self, out: &mut String, path: &str, schema: &Value) {
        let text = summary(schema.get("description").and_then(Value::as_str));
        let bare = text.trim_end_matches('.').trim_matches('`');
        if !text.is_empty() && bare != path {
            let _ = write!(out, "\n{text}\n");
        }
    }

    fn table(&mut self, out: &mut String, path: &str, schema: &Value) {
        let Some(props) = schema.get("properties").and_then(Value::as_object) else {
            return;
        };
        let required: BTreeSet<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        out.push_str("\n| key | type | default | description |\n|---|---|---|---|\n");
        let prefix = if path == "top level" {
            String::new()
        } else {
            format!("{path}.")
        };
        for (key, prop) in props.clone() {
            let ty = self.describe(&prop, &format!("{prefix}{key}"));
            let default = match prop.get("default") {
                _ if required.contains(key.as_str()) => "*required*".to_owned(),
                Some(Value::Null) | None => "—".to_owned(),
                // An object's defaults are in its own section.
                Some(Value::Object(_)) if ty.starts_with("[object]") => "its defaults".to_owned(),
                Some(d) => format!("`{}`", d.to_string().replace('|', "\\|")),
            };
            let description = summary(prop.get("description").and_then(Value::as_str));
            let _ = writeln!(out, "| `{key}` | {ty} | {default} | {description} |");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_gateway_key_gets_a_row() {
        let md = markdown();
        for key in [
            "listen",
            "upstreams",
            "backend",
            "auth",
            "admin",
            "pressure",
            "limits",
            "timeouts",
            "llm",
        ] {
            assert!(md.contains(&format!("| `{key}` |")), "{key} missing");
        }
        // Nested sections are titled by their path and linked.
        assert!(md.contains("## `gateway.upstreams.<name>`"), "{md}");
        assert!(md.contains("## `gateway.pressure.perRoute[]`"), "{md}");
        assert!(md.contains("(#gatewayupstreamsname)"), "{md}");
        assert!(md.contains("`type: \"redis\"`"), "the backend variants: {md}");
    }
}
