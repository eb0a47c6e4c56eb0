//! The config's JSON Schema, generated from the config types (so it cannot
//! drift from what the loader accepts), and the Markdown reference
//! (`docs/config.md`) rendered from it.

use super::types::ConfigFile;
use serde_json::Value;

/// The JSON Schema (draft 2020-12) of a config file: what `pressure config
/// schema` prints, for editors and CI checks of config repositories.
pub fn schema() -> Value {
    let mut schema = schemars::schema_for!(ConfigFile).to_value();
    if let Some(o) = schema.as_object_mut() {
        o.insert("title".into(), Value::from("pressure gateway config"));
    }
    schema
}
