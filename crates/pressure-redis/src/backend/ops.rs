//! The `Backend` operations of [`RedisBackend`]: attaching a resource's
//! limits, acquiring (deny cache, quota lease, then the store), releasing,
//! renewing, reconciling and reading usage, each as one script call.

use super::acquire_args::AcquireArgs;
use super::dims::dims_of;
use super::reconcile::{changes, delta_frees, reconcile_invocation};
use super::{local_limits, RedisBackend, RedisHandle};
use crate::config::FailureMode;
use crate::keys::{member, ResourceKeys};
use crate::lease;
use crate::scripts;
use crate::shape::{calendar_kind, Shape};
use crate::store::{release_invocation, Failure, LostKind};
use parking_lot::Mutex;
use pressure_core::{
    Backend, BackendError, Counts, Decision, Demand, Dimension, Grant, LimitSpec, NestedDecision, Reserved,
    Usage,
};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl RedisBackend {
    /// The handle of `resource`, in `group` when given (its keys then carry
    /// the group's hash tag, [`ResourceKeys::grouped`]). A resource in the
    /// group named by its own id — a hierarchy's root — keeps its plain
    /// keys ([`ResourceKeys::new`]), which carry that tag already: the root
    /// is in its hierarchy's slot whether it was registered in the group
    /// or not, and never moves between the two.
    fn attach_in(
        &self,
        resource: &str,
        group: Option<&str>,
        spec: Arc<LimitSpec>,
    ) -> Result<RedisHandle, BackendError> {
        let dims = dims_of(&spec)?;
        let local = match self.store.config.failure_mode {
            FailureMode::Local => {
                let limits = local_limits(&spec.limits, self.store.config.local_share);
                let local_spec = limits
                    .compile()
                    .map_err(|e| BackendError::Unsupported(format!("local share of the limits: {e}")))?;
                Some(self.store.local.attach(resource, Arc::new(local_spec))?)
            }
            _ => None,
        };
        let steps: Vec<u64> = dims.iter().map(|d| d.step_us).collect();
        let shaped = Shape::of(&spec, &steps).and_then(|s| self.store.shape_script(s));
        let prefix = &self.store.config.key_prefix;
        let group = group.unwrap_or(resource);
        let keys = if group == resource {
            ResourceKeys::new(prefix, resource)
        } else {
            ResourceKeys::grouped(prefix, group, resource)
        };
        let one = Demand {
            lease: false,
            ..Demand::default()
        };
        let leases = lease::Book::new(
            Arc::clone(&self.store),
            keys.state.clone(),
            &spec,
            AcquireArgs {
                dims: &dims,
                spec: &spec,
                demand: &one,
                conc: 0,
                member: &member(0),
                offset_us: 0,
            }
            .generic(),
        )
        .map(Box::new);
        Ok(RedisHandle {
            keys,
            group: Box::from(group),
            leases,
            spec,
            dims: dims.into(),
            local,
            deny: Mutex::new(None),
            tally: Arc::default(),
            shaped,
        })
    }
}

impl Backend for RedisBackend {
    type Handle = RedisHandle;

    fn attach(&self, resource: &str, spec: Arc<LimitSpec>) -> Result<RedisHandle, BackendError> {
        self.attach_in(resource, None, spec)
    }

    /// The resource's keys carry the group's hash tag
    /// ([`ResourceKeys::grouped`]): one Redis Cluster slot per group.
    fn attach_grouped(
        &self,
        resource: &str,
        group: &str,
        spec: Arc<LimitSpec>,
    ) -> Result<RedisHandle, BackendError> {
        self.attach_in(resource, Some(group), spec)
    }

    /// A resource registered without a group is in the group named by its
    /// own id (its keys carry that tag).
    fn in_group(&self, h: &RedisHandle, group: &str) -> bool {
        *h.group == *group
    }

    async fn acquire_nested(
        &self,
        levels: &[(&RedisHandle, &Demand)],
    ) -> Result<NestedDecision, BackendError> {
        self.nested(levels).await
    }

    /// The state is in Redis under the resource's key, by dimension: the new
    /// script arguments continue it (window sub-windows count units, a
    /// `gcra` TAT is rescaled by the script to the new emission interval,
    /// leases are fields of the same hash). Only the local fallback state
    /// and the counts are carried here; the deny cache starts empty. The
    /// resource stays in its group (the same keys).
    fn reattach(
        &self,
        resource: &str,
        old: &RedisHandle,
        spec: Arc<LimitSpec>,
    ) -> Result<RedisHandle, BackendError> {
        let mut h = self.attach_in(resource, Some(&old.group), Arc::clone(&spec))?;
        if let (Some(old_local), Some(_)) = (&old.local, &h.local) {
            let limits = local_limits(&spec.limits, self.store.config.local_share);
            let local_spec = limits
                .compile()
                .map_err(|e| BackendError::Unsupported(format!("local share of the limits: {e}")))?;
            h.local = Some(
                self.store
                    .local
                    .reattach(resource, old_local, Arc::new(local_spec))?,
            );
        }
        h.tally = Arc::clone(&old.tally);
        Ok(h)
    }

    async fn acquire(&self, h: &RedisHandle, demand: &Demand) -> Result<Decision, BackendError> {
        let decision = if let Some(d) = self.cached_denial(h, demand) {
            d
        } else if let Some(d) = h.leases.as_ref().and_then(|b| b.serve(demand)) {
            d
        } else {
            self.acquire_in_store(h, demand).await?
        };
        match decision {
            Decision::Granted(_) => h.tally.allowed.fetch_add(1, Ordering::Relaxed),
            Decision::Denied(_) if demand.count_denial => h.tally.denied.fetch_add(1, Ordering::Relaxed),
            Decision::Denied(_) => 0,
        };
        Ok(decision)
    }

    fn counts(&self, h: &RedisHandle) -> Counts {
        Counts {
            allowed: h.tally.allowed.load(Ordering::Relaxed),
            denied: h.tally.denied.load(Ordering::Relaxed),
        }
    }

    async fn release(&self, h: &RedisHandle, grant: &Grant) -> Result<(), BackendError> {
        if grant.fallback {
            if let Some(local) = &h.local {
                self.store.local.release_detached(local, *grant);
            }
            return Ok(());
        }
        let Some(lease) = grant.lease else { return Ok(()) };
        // Settled: a caller that goes away mid-call (or gives up at the
        // timeout) still has its lease released: the connection would drop
        // an unwritten command whose caller is gone.
        let (store, key, ttl) = (Arc::clone(&self.store), h.keys.state.clone(), h.spec.lease_ttl_ns);
        let call = {
            let (store, key) = (Arc::clone(&store), key.clone());
            let members = [member(lease.0)];
            async move {
                store
                    .call_untimed::<i64>(&key, release_invocation(&key, 0, &members))
                    .await
            }
        };
        let answer = self
            .store
            .call_settled(&h.keys.state, call, move |answer| {
                if matches!(answer, Some(Ok(_))) {
                    // Answered past its caller's timeout: around an outage.
                    store.replay_later(&key, member(lease.0), true);
                } else {
                    store.lose(key, lease.0, ttl, LostKind::Release);
                }
            })
            .await;
        match answer {
            Ok(_) => {
                self.store.replay_later(&h.keys.state, member(lease.0), false);
                Ok(())
            }
            Err(f) if f.owned => Err(f.error),
            Err(f) => {
                // Retried in the background until Redis answers.
                self.lose(h, lease.0, LostKind::Release);
                Err(f.error)
            }
        }
    }

    fn release_detached(&self, h: &RedisHandle, grant: Grant) {
        if grant.fallback {
            if let Some(local) = &h.local {
                self.store.local.release_detached(local, grant);
            }
            return;
        }
        let Some(lease) = grant.lease else { return };
        self.store
            .release_detached(h.keys.state.clone(), lease.0, h.spec.lease_ttl_ns);
    }

    async fn renew(&self, h: &RedisHandle, grant: &Grant) -> Result<bool, BackendError> {
        let v = self.renew_many(h, std::slice::from_ref(grant)).await?;
        Ok(v.first().copied().unwrap_or(false))
    }

    /// One script call renews every remote lease of the batch; local
    /// fallback leases renew in memory.
    async fn renew_many(&self, h: &RedisHandle, grants: &[Grant]) -> Result<Vec<bool>, BackendError> {
        let mut out = vec![false; grants.len()];
        let mut remote = Vec::new();
        for (i, g) in grants.iter().enumerate() {
            match (g.fallback, g.lease, &h.local) {
                (true, Some(_), Some(local)) => out[i] = self.store.local.renew(local, g).await?,
                (false, Some(lease), _) => remote.push((i, member(lease.0))),
                _ => {}
            }
        }
        if remote.is_empty() {
            return Ok(out);
        }
        let mut inv = scripts::RENEW.prepare_invoke();
        inv.key(&h.keys.state).arg(h.spec.lease_ttl_ns / 1_000);
        for (_, m) in &remote {
            inv.arg(m);
        }
        let kept: Vec<i64> = self.call(&h.keys.state, inv).await?;
        if kept.len() != remote.len() {
            return Err(BackendError::Protocol(format!("renew returned {kept:?}")));
        }
        for ((i, _), k) in remote.iter().zip(kept) {
            out[*i] = k == 1;
        }
        Ok(out)
    }

    async fn reconcile(&self, h: &RedisHandle, grant: &Grant, actual: &Reserved) -> Result<(), BackendError> {
        if grant.fallback {
            return match &h.local {
                Some(local) => self.store.local.reconcile(local, grant, actual).await,
                None => Ok(()),
            };
        }
        let before = Demand::from(&grant.reserved);
        let after = Demand::from(actual);
        let changes = changes(&h.dims, &h.spec, |units| (units(&before), units(&after)));
        if changes.is_empty() {
            return Ok(());
        }
        if delta_frees(&before, &after) {
            // Before the call: once it is sent the units may be free, and
            // the call outlives a caller that goes away.
            *h.deny.lock() = None;
        }
        let (store, key, at_us) = (Arc::clone(&self.store), h.keys.state.clone(), grant.at_ns / 1_000);
        let offset_us = self.offset_us();
        let call = async move {
            store
                .call_untimed::<i64>(&key, reconcile_invocation(&key, at_us, &changes, offset_us))
                .await
        };
        match self.store.call_settled(&h.keys.state, call, |_| {}).await {
            // Past the timeout the correction is the backend's to deliver
            // (when Redis answers): the permit counts it as made.
            Ok(_) | Err(Failure { owned: true, .. }) => Ok(()),
            Err(f) => Err(f.error),
        }
    }

    async fn usage(&self, h: &RedisHandle) -> Result<Usage, BackendError> {
        let mut inv = scripts::USAGE.prepare_invoke();
        inv.key(&h.keys.state).arg(h.dims.len());
        for d in h.dims.iter() {
            inv.arg(u8::from(d.gcra))
                .arg(d.rate.dimension.index())
                .arg(d.step_us)
                .arg(d.window_us);
        }
        let cals = &h.spec.calendars;
        inv.arg(cals.len()).arg(self.offset_us());
        for c in cals {
            inv.arg(calendar_kind(c.calendar)).arg(c.dimension.index());
        }
        let v: Vec<i64> = self.call(&h.keys.state, inv).await?;
        let n = h.dims.len();
        if v.len() != n + 2 * cals.len() + 1 {
            return Err(BackendError::Protocol(format!("usage returned {v:?}")));
        }
        let unit = scripts::reply_u64;
        let mut dimensions: Vec<(Dimension, u64)> = h
            .dims
            .iter()
            .zip(&v)
            .map(|(d, used)| (d.rate.dimension, unit(*used)))
            .collect();
        let mut resets = Vec::with_capacity(cals.len());
        for (c, pair) in cals.iter().zip(v[n..].chunks_exact(2)) {
            dimensions.push((c.dimension, unit(pair[0])));
            resets.push((c.dimension, unit(pair[1])));
        }
        Ok(Usage {
            dimensions,
            leases: unit(v[v.len() - 1]),
            resets,
        })
    }

    fn at_rest(&self, _h: &RedisHandle) -> bool {
        // The state lives in Redis and expires there by itself; dropping the
        // local handle loses nothing.
        true
    }
}
