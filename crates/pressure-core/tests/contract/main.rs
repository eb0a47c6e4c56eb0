//! The backend contract suite against `MemoryBackend`.

use pressure_core::contract::Harness;
use pressure_core::{MemoryBackend, ResourceBroker};

/// Brokers over independent in-memory backends (each its own "process").
struct Memory;

impl Harness for Memory {
    type B = MemoryBackend;

    async fn broker(&self) -> ResourceBroker<MemoryBackend> {
        ResourceBroker::builder(MemoryBackend::new()).build()
    }

    fn unique(&self, name: &str) -> String {
        format!("contract:{name}")
    }

    fn shared_store(&self) -> bool {
        false
    }
}

pressure_core::contract_suite!(Memory);
