//! Gateway configuration: types, loading with JSON-path errors, and plugin
//! manifests. The semantic checks are the building of the plan
//! ([`crate::plan::Plan::check`], which [`validate`] runs).

mod decisions;
mod error;
mod files;
mod load;
pub mod manifest;
pub mod reference;
mod rls;
pub mod schema;
mod shape;
mod tls;
mod types;

pub use decisions::{DecisionsConfig, DEFAULT_MAX_PERMITS};
pub use error::{ConfigError, ConfigErrors};
pub(crate) use files::resolve;
pub use load::{load, parse, parse_in, parse_shape, validate};
pub use manifest::{LoadedManifest, PluginManifest};
pub use rls::RlsConfig;
pub use tls::{ListenerTlsConfig, UpstreamTlsConfig};
pub use types::*;
