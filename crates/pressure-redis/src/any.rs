//! [`AnyBackend`]: the backend chosen at run time (memory or Redis), so a
//! program that picks its store by config (the gateway, the rate limit
//! service, the bindings) has one concrete broker type.

use crate::{RedisBackend, RedisConfig, RedisHandle};
use pressure_core::{
    Backend, BackendError, CompactDecision, Counts, Decision, Demand, Grant, LimitSpec, MemoryBackend,
    NestedDecision, Reserved,
};
use pressure_core::{MemoryHandle, Usage};
use std::sync::Arc;

/// Memory or Redis, as configured.
#[derive(Debug, Clone)]
pub enum AnyBackend {
    /// In this process.
    Memory(MemoryBackend),
    /// In Redis.
    Redis(RedisBackend),
}

impl AnyBackend {
    /// In memory without `redis`; else Redis, started even when it is down
    /// (the failure mode applies and the backend reconnects by itself; the
    /// outage at start is logged once). The Redis backend is also returned
    /// on its own, for its status.
    pub async fn start(redis: Option<&RedisConfig>) -> Result<(Self, Option<RedisBackend>), BackendError> {
        let Some(rc) = redis else {
            return Ok((AnyBackend::Memory(MemoryBackend::new()), None));
        };
        let r = RedisBackend::start(rc.clone()).await?;
        let status = r.status();
        if !status.healthy {
            tracing::warn!(
                url = status.url.as_str(),
                error = status.last_error.as_deref().unwrap_or("unknown"),
                failure_mode = ?rc.failure_mode,
                "Redis is unavailable at start; serving in the failure mode until it answers"
            );
        }
        Ok((AnyBackend::Redis(r.clone()), Some(r)))
    }
}

/// The handle of the backend in use. Two words: the Redis handle (keys,
/// script arguments, its local fallback) is boxed, so a broker entry on the
/// memory backend — a gateway's lazily registered tenant — does not carry
/// its size (a pointer more to follow next to a network round trip).
#[derive(Debug)]
pub enum AnyHandle {
    /// Of [`AnyBackend::Memory`].
    Memory(MemoryHandle),
    /// Of [`AnyBackend::Redis`].
    Redis(Box<RedisHandle>),
}

fn mismatch() -> BackendError {
    BackendError::Protocol("handle of another backend".into())
}

impl Backend for AnyBackend {
    type Handle = AnyHandle;

    fn attach(&self, resource: &str, spec: Arc<LimitSpec>) -> Result<AnyHandle, BackendError> {
        match self {
            AnyBackend::Memory(b) => b.attach(resource, spec).map(AnyHandle::Memory),
            AnyBackend::Redis(b) => b.attach(resource, spec).map(|h| AnyHandle::Redis(Box::new(h))),
        }
    }

    fn attach_grouped(
        &self,
        resource: &str,
        group: &str,
        spec: Arc<LimitSpec>,
    ) -> Result<AnyHandle, BackendError> {
        match self {
            AnyBackend::Memory(b) => b.attach_grouped(resource, group, spec).map(AnyHandle::Memory),
            AnyBackend::Redis(b) => b
                .attach_grouped(resource, group, spec)
                .map(|h| AnyHandle::Redis(Box::new(h))),
        }
    }

    fn in_group(&self, handle: &AnyHandle, group: &str) -> bool {
        match (self, handle) {
            (AnyBackend::Memory(b), AnyHandle::Memory(h)) => b.in_group(h, group),
            (AnyBackend::Redis(b), AnyHandle::Redis(h)) => b.in_group(h, group),
            _ => true,
        }
    }

    async fn acquire_nested(&self, levels: &[(&AnyHandle, &Demand)]) -> Result<NestedDecision, BackendError> {
        match self {
            AnyBackend::Memory(b) => {
                let mut inner = Vec::with_capacity(levels.len());
                for (h, d) in levels {
                    match h {
                        AnyHandle::Memory(h) => inner.push((h, *d)),
                        AnyHandle::Redis(_) => return Err(mismatch()),
                    }
                }
                b.acquire_nested(&inner).await
            }
            AnyBackend::Redis(b) => {
                let mut inner = Vec::with_capacity(levels.len());
                for (h, d) in levels {
                    match h {
                        AnyHandle::Redis(h) => inner.push((&**h, *d)),
                        AnyHandle::Memory(_) => return Err(mismatch()),
                    }
                }
                b.acquire_nested(&inner).await
            }
        }
    }

    fn reattach(
        &self,
        resource: &str,
        old: &AnyHandle,
        spec: Arc<LimitSpec>,
    ) -> Result<AnyHandle, BackendError> {
        match (self, old) {
            (AnyBackend::Memory(b), AnyHandle::Memory(h)) => {
                b.reattach(resource, h, spec).map(AnyHandle::Memory)
            }
            (AnyBackend::Redis(b), AnyHandle::Redis(h)) => b
                .reattach(resource, h, spec)
                .map(|h| AnyHandle::Redis(Box::new(h))),
            _ => Err(mismatch()),
        }
    }

    #[inline]
    fn acquire_now_if_local(
        &self,
        handle: &AnyHandle,
        demand: &Demand,
    ) -> Option<Result<Decision, BackendError>> {
        match (self, handle) {
            (AnyBackend::Memory(b), AnyHandle::Memory(h)) => b.acquire_now_if_local(h, demand),
            _ => None,
        }
    }

    #[inline]
    fn acquire_now_compact_if_local(
        &self,
        handle: &AnyHandle,
        demand: &Demand,
    ) -> Option<Result<CompactDecision, BackendError>> {
        // The memory backend's quick path (no `Grant` built for a plain
        // grant); Redis has no synchronous answer.
        match (self, handle) {
            (AnyBackend::Memory(b), AnyHandle::Memory(h)) => b.acquire_now_compact_if_local(h, demand),
            _ => None,
        }
    }

    fn counts(&self, handle: &AnyHandle) -> Counts {
        match (self, handle) {
            (AnyBackend::Memory(b), AnyHandle::Memory(h)) => b.counts(h),
            (AnyBackend::Redis(b), AnyHandle::Redis(h)) => b.counts(h),
            _ => Counts::default(),
        }
    }

    async fn acquire(&self, handle: &AnyHandle, demand: &Demand) -> Result<Decision, BackendError> {
        match (self, handle) {
            (AnyBackend::Memory(b), AnyHandle::Memory(h)) => b.acquire(h, demand).await,
            (AnyBackend::Redis(b), AnyHandle::Redis(h)) => b.acquire(h, demand).await,
            _ => Err(mismatch()),
        }
    }

    async fn release(&self, handle: &AnyHandle, grant: &Grant) -> Result<(), BackendError> {
        match (self, handle) {
            (AnyBackend::Memory(b), AnyHandle::Memory(h)) => b.release(h, grant).await,
            (AnyBackend::Redis(b), AnyHandle::Redis(h)) => b.release(h, grant).await,
            _ => Err(mismatch()),
        }
    }

    fn release_detached(&self, handle: &AnyHandle, grant: Grant) {
        match (self, handle) {
            (AnyBackend::Memory(b), AnyHandle::Memory(h)) => b.release_detached(h, grant),
            (AnyBackend::Redis(b), AnyHandle::Redis(h)) => b.release_detached(h, grant),
            _ => {}
        }
    }

    async fn renew(&self, handle: &AnyHandle, grant: &Grant) -> Result<bool, BackendError> {
        match (self, handle) {
            (AnyBackend::Memory(b), AnyHandle::Memory(h)) => b.renew(h, grant).await,
            (AnyBackend::Redis(b), AnyHandle::Redis(h)) => b.renew(h, grant).await,
            _ => Err(mismatch()),
        }
    }

    async fn renew_many(&self, handle: &AnyHandle, grants: &[Grant]) -> Result<Vec<bool>, BackendError> {
        match (self, handle) {
            (AnyBackend::Memory(b), AnyHandle::Memory(h)) => b.renew_many(h, grants).await,
            (AnyBackend::Redis(b), AnyHandle::Redis(h)) => b.renew_many(h, grants).await,
            _ => Err(mismatch()),
        }
    }

    async fn reconcile(
        &self,
        handle: &AnyHandle,
        grant: &Grant,
        actual: &Reserved,
    ) -> Result<(), BackendError> {
        match (self, handle) {
            (AnyBackend::Memory(b), AnyHandle::Memory(h)) => b.reconcile(h, grant, actual).await,
            (AnyBackend::Redis(b), AnyHandle::Redis(h)) => b.reconcile(h, grant, actual).await,
            _ => Err(mismatch()),
        }
    }

    async fn usage(&self, handle: &AnyHandle) -> Result<Usage, BackendError> {
        match (self, handle) {
            (AnyBackend::Memory(b), AnyHandle::Memory(h)) => b.usage(h).await,
            (AnyBackend::Redis(b), AnyHandle::Redis(h)) => b.usage(h).await,
            _ => Err(mismatch()),
        }
    }

    fn at_rest(&self, handle: &AnyHandle) -> bool {
        match (self, handle) {
            (AnyBackend::Memory(b), AnyHandle::Memory(h)) => b.at_rest(h),
            (AnyBackend::Redis(b), AnyHandle::Redis(h)) => b.at_rest(h),
            _ => true,
        }
    }

    /// The memory backend's leases are the broker's book of leases to
    /// renew (one lock less per acquisition and per release).
    #[inline]
    fn in_process<'a>(&'a self, handle: &'a AnyHandle) -> Option<(&'a MemoryBackend, &'a MemoryHandle)> {
        match (self, handle) {
            (AnyBackend::Memory(b), AnyHandle::Memory(h)) => b.in_process(h),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every broker entry holds one handle inline: it stays two words, the
    /// memory handle's size, whatever the Redis handle grows to.
    #[test]
    fn a_handle_is_two_words() {
        println!(
            "size_of: AnyHandle {}, MemoryHandle {}, RedisHandle {} (boxed)",
            std::mem::size_of::<AnyHandle>(),
            std::mem::size_of::<MemoryHandle>(),
            std::mem::size_of::<RedisHandle>(),
        );
        assert!(std::mem::size_of::<AnyHandle>() <= 16);
    }
}
