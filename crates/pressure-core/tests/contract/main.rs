//! The backend contract suite against `MemoryBackend`.

use pressure_core::clock::{MonotonicClock, ShiftedClock, WallShift};
use pressure_core::contract::Harness;
use pressure_core::{MemoryBackend, ResourceBroker};
use std::sync::Arc;

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

    async fn shifted_broker(&self) -> (ResourceBroker<MemoryBackend>, WallShift) {
        let shift = WallShift::new();
        let clock = ShiftedClock::new(MonotonicClock::new(), shift.clone());
        let b = ResourceBroker::builder(MemoryBackend::with_clock(Arc::new(clock))).build();
        (b, shift)
    }
}

pressure_core::contract_suite!(Memory);
