//! The gateway config as data: its types, its shape parsed with JSON-path
//! errors, its schema and reference, and the plugin manifests' files. What
//! the values mean is checked where the plan is built (`crate::plan`): the
//! public [`crate::config`] joins the two.

mod decisions;
mod error;
mod files;
pub mod manifest;
mod parse;
pub mod reference;
mod rls;
pub mod schema;
mod shape;
mod tenant_override;
mod tls;
mod tracing;
mod types;

pub use decisions::{DecisionsConfig, DEFAULT_MAX_PERMITS};
pub use error::{ConfigError, ConfigErrors};
pub(crate) use files::{base_dir_of, env_value, resolve, resolve_llm_files};
pub use manifest::{LoadedManifest, PluginManifest};
pub use parse::parse_shape;
pub use rls::RlsConfig;
pub use tenant_override::TenantOverride;
pub(crate) use tls::{resolve_files, watched_files};
pub use tls::{ListenerTlsConfig, UpstreamTlsConfig};
pub(crate) use tracing::check as check_tracing;
pub use tracing::{resolve_tracing, OtlpProtocol, ResolvedTracing, TracingConfig};
pub use types::*;
