//! Gateway configuration: types, loading with JSON-path errors, semantic
//! validation, and plugin manifests.

mod types;

pub use types::*;
