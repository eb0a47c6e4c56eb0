//! [`Control`]: what the admin listener may ask of the gateway it belongs
//! to — whether it is stopping, a reload, the plan serving now, a tenant's
//! live override or parent, the keys issued at runtime — and nothing else. `crate::Gateway` implements it; the
//! admin listener holds it as a trait object, so it depends on these
//! methods and not on the gateway's type.

use crate::plan::keys::store::Keys;
use crate::plan::reload::ReloadOutcome;
use crate::plan::Plan;
use crate::settings::ConfigError;
use futures::future::BoxFuture;
use pressure_core::{BackendError, LimitTemplate, Limits};
use std::sync::Arc;

/// The gateway as the admin listener sees it (module docs).
pub trait Control: Send + Sync + 'static {
    /// Whether the gateway is stopping (`/readyz` answers 503).
    fn is_draining(&self) -> bool;

    /// Re-reads the config file and swaps the plan; the old one serves on
    /// when the new one is invalid.
    fn reload(&self) -> Result<ReloadOutcome, ConfigError>;

    /// The plan serving now.
    fn plan(&self) -> Arc<Plan>;

    /// Sets (`Some`) or removes (`None`) the live limit override of
    /// `tenant` for every gateway on the same backend, applied here at once.
    fn write_override(
        &self,
        tenant: String,
        limits: Option<(Limits, LimitTemplate)>,
    ) -> BoxFuture<'_, Result<(), BackendError>>;

    /// Sets (`Some`; `""` for "no parent") or removes (`None`: back to the
    /// config's) the live parent of `tenant` for every gateway on the same
    /// backend, applied here at once.
    fn write_parent(&self, tenant: String, parent: Option<String>)
        -> BoxFuture<'_, Result<(), BackendError>>;

    /// The keys issued at runtime (`crate::plan::keys`).
    fn keys(&self) -> &Keys;
}
