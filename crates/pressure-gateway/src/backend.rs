//! The gateway's broker over [`AnyBackend`], the backend chosen by config
//! at run time (memory or Redis).

pub use pressure_redis::{AnyBackend, AnyHandle};

/// The gateway's broker.
pub type Broker = pressure_core::ResourceBroker<AnyBackend>;
