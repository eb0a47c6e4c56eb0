//! TEMPORARY stand-ins for the broker API landing in pressure-core
//! (`set_limits`, `unregister`, `resource_ids`, `Denial::unavailable`).
#![allow(missing_docs, unreachable_pub, dead_code)]

use crate::backend::Broker;
use pressure_core::{Denial, Error, Limits};

pub trait BrokerReload {
    fn set_limits(&self, id: &str, limits: Limits) -> Result<(), Error>;
    fn unregister(&self, id: &str) -> bool;
    fn resource_ids(&self) -> Vec<String>;
}

impl BrokerReload for Broker {
    fn set_limits(&self, id: &str, limits: Limits) -> Result<(), Error> {
        match self.register_limit(id, limits) {
            Err(Error::AlreadyRegistered(_)) | Ok(()) => Ok(()),
            Err(e) => Err(e),
        }
    }
    fn unregister(&self, _id: &str) -> bool {
        false
    }
    fn resource_ids(&self) -> Vec<String> {
        self.local_stats().into_iter().map(|s| s.resource).collect()
    }
}

pub fn unavailable(_d: &Denial) -> bool {
    false
}
