//! Gateway configuration: types, loading with JSON-path errors, semantic
//! validation, and plugin manifests.

mod decisions;
mod error;
mod load;
pub mod manifest;
pub mod reference;
mod rls;
pub mod schema;
mod tls;
mod types;
mod validate;

pub use decisions::{DecisionsConfig, DEFAULT_MAX_PERMITS};
pub use error::ConfigError;
pub use load::{load, parse, parse_in, parse_shape};
pub use manifest::{LoadedManifest, PluginManifest};
pub use rls::RlsConfig;
pub use tls::{ListenerTlsConfig, UpstreamTlsConfig};
pub use types::*;
pub(crate) use validate::resolve;
pub use validate::{
    check_limits, validate, JWT_ALGORITHMS, MAX_HEADER_BYTES, MAX_LEEWAY_SECS, MIN_HEADER_BYTES,
};
