//! Nested acquisitions on Redis ([`Backend::acquire_nested`]): every level
//! of a nest in ONE script call (`lua/nested.lua`), so the store charges
//! all of them or none. On Redis Cluster the levels' keys must share a
//! hash slot (resources registered in one group, [`ResourceKeys::grouped`]);
//! a nest across slots is refused as [`BackendError::Unsupported`] before
//! anything is sent.
//!
//! Around the call, as for a single acquisition: the local deny cache of
//! each level, the failure mode while the slot's shard is out or the call
//! fails (`local`: the nested decision of the in-memory fallback, all or
//! nothing too), and the settling of a call whose caller went away or
//! whose reply was lost — every level's lease released (with a tombstone
//! when the reply was lost), every level's units refunded when the caller
//! went away after a grant.
//!
//! [`Backend::acquire_nested`]: pressure_core::Backend::acquire_nested
//! [`ResourceKeys::grouped`]: crate::keys::ResourceKeys::grouped

use super::acquire_args::AcquireArgs;
use super::lost::LostAcquisition;
use super::{closed, RedisBackend, RedisHandle};
use crate::config::FailureMode;
use crate::health::slot;
use crate::keys::member;
use crate::scripts;
use crate::store::{Failure, LostKind};
use pressure_core::{
    Backend, BackendError, Decision, Demand, Grant, LeaseId, NestedDecision, RateSpec, Reserved,
};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl RedisBackend {
    /// One nested acquisition (see the module docs), counted on the levels'
    /// tallies: a grant on every level, a denial on the refusing one.
    pub(super) async fn nested(
        &self,
        levels: &[(&RedisHandle, &Demand)],
    ) -> Result<NestedDecision, BackendError> {
        let decision = self.nested_decision(levels).await?;
        match &decision {
            NestedDecision::Granted(_) => {
                for (h, _) in levels {
                    h.tally.allowed.fetch_add(1, Ordering::Relaxed);
                }
            }
            NestedDecision::Denied { level, .. } => {
                if let Some((h, d)) = levels.get(*level) {
                    if d.count_denial {
                        h.tally.denied.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        Ok(decision)
    }

    async fn nested_decision(
        &self,
        levels: &[(&RedisHandle, &Demand)],
    ) -> Result<NestedDecision, BackendError> {
        let Some((first, _)) = levels.first() else {
            return Ok(NestedDecision::Granted(Vec::new()));
        };
        let key = &first.keys.state;
        if !self.store.config.cluster_nodes.is_empty() {
            let s0 = slot(key);
            for (level, (h, _)) in levels.iter().enumerate() {
                let s = slot(&h.keys.state);
                if s != s0 {
                    return Err(BackendError::Unsupported(format!(
                        "a nested acquisition needs every level in one Redis Cluster hash slot: \
                         level {level} ({}) is in slot {s}, level 0 ({key}) in slot {s0}; register \
                         the levels in one group (ResourceBroker::lazy_limit_in_group)",
                        h.keys.state
                    )));
                }
            }
        }
        // The local deny cache: a level that surely refuses refuses the
        // nest without a call (nothing is charged anywhere).
        for (level, (h, d)) in levels.iter().enumerate() {
            if let Some(Decision::Denied(denial)) = self.cached_denial(h, d) {
                return Ok(NestedDecision::Denied { level, denial });
            }
        }
        let health = &self.store.health;
        let shard = health.shard(key);
        if !health.should_try(&shard) {
            return Ok(self.nested_fallback(levels).await);
        }
        let leases: Vec<Option<u64>> = levels
            .iter()
            .map(|(h, d)| (d.lease && h.spec.concurrency.is_some()).then(rand::random::<u64>))
            .collect();
        match self.nested_remote(levels, &leases).await {
            Ok(d) => {
                if matches!(d, NestedDecision::Granted(_)) {
                    health.written(&shard);
                }
                Ok(d)
            }
            Err(f) => {
                if f.sent && !f.owned {
                    // The script may still run: give its leases back.
                    for ((h, _), lease) in levels.iter().zip(&leases) {
                        if let Some(lease) = lease {
                            self.lose(h, *lease, LostKind::Acquisition);
                        }
                    }
                }
                match f.error {
                    BackendError::Protocol(e) => Err(BackendError::Protocol(e)),
                    _ => Ok(self.nested_fallback(levels).await),
                }
            }
        }
    }

    /// The failure mode's answer for a whole nest: `local` decides it on
    /// the in-memory fallback (all or nothing there too), `open` grants
    /// every level, `closed` refuses at the first level.
    async fn nested_fallback(&self, levels: &[(&RedisHandle, &Demand)]) -> NestedDecision {
        self.store.health.fallbacks.fetch_add(1, Ordering::Relaxed);
        let first = levels[0].0;
        match self.store.config.failure_mode {
            FailureMode::Local => {
                let local: Option<Vec<_>> = levels
                    .iter()
                    .map(|(h, d)| h.local.as_ref().map(|l| (l, *d)))
                    .collect();
                let Some(local) = local else {
                    return closed_nest(first);
                };
                match self.store.local.acquire_nested(&local).await {
                    Ok(NestedDecision::Granted(mut grants)) => {
                        for g in &mut grants {
                            g.fallback = true;
                        }
                        NestedDecision::Granted(grants)
                    }
                    Ok(denied) => denied,
                    Err(_) => closed_nest(first),
                }
            }
            FailureMode::Open => NestedDecision::Granted(
                levels
                    .iter()
                    .map(|(_, d)| Grant {
                        at_ns: 0,
                        delay_ns: 0,
                        lease: None,
                        reserved: Reserved::from(*d),
                        fallback: true,
                    })
                    .collect(),
            ),
            _ => closed_nest(first),
        }
    }

    /// The one script call, as a settled call: a caller that goes away
    /// before the answer leaves nothing on any level.
    async fn nested_remote(
        &self,
        levels: &[(&RedisHandle, &Demand)],
        leases: &[Option<u64>],
    ) -> Result<NestedDecision, Failure> {
        let offset_us = self.offset_us();
        let mut args = vec![levels.len().to_string()];
        for ((h, d), lease) in levels.iter().zip(leases) {
            let demand = Demand {
                book_within_ns: 0,
                ..**d
            };
            let conc = match (lease, h.spec.concurrency) {
                (Some(_), Some(c)) => RateSpec::scaled(c, demand.ceiling_ppm),
                _ => 0,
            };
            let lease_member = member(lease.unwrap_or(0));
            let level = AcquireArgs {
                dims: &h.dims,
                spec: &h.spec,
                demand: &demand,
                conc,
                member: &lease_member,
                offset_us,
            }
            .generic();
            args.push(level.len().to_string());
            args.extend(level);
        }
        let keys: Vec<String> = levels.iter().map(|(h, _)| h.keys.state.clone()).collect();
        let key = keys[0].clone();
        let call = {
            let (store, key) = (Arc::clone(&self.store), key.clone());
            async move {
                let mut inv = scripts::NESTED.prepare_invoke();
                for k in &keys {
                    inv.key(k);
                }
                for a in &args {
                    inv.arg(a);
                }
                store.call_untimed::<Vec<i64>>(&key, inv).await
            }
        };
        let lost: Vec<LostAcquisition> = levels
            .iter()
            .zip(leases)
            .map(|((h, d), lease)| LostAcquisition {
                store: Arc::clone(&self.store),
                key: h.keys.state.clone(),
                lease: *lease,
                lease_ttl_ns: h.spec.lease_ttl_ns,
                dims: Arc::clone(&h.dims),
                spec: Arc::clone(&h.spec),
                demand: **d,
            })
            .collect();
        let v = self
            .store
            .call_settled(&key, call, move |answer| settle(lost, answer))
            .await?;
        self.nested_reply(levels, leases, &v)
    }

    /// The decision of a `lua/nested.lua` reply.
    fn nested_reply(
        &self,
        levels: &[(&RedisHandle, &Demand)],
        leases: &[Option<u64>],
        v: &[i64],
    ) -> Result<NestedDecision, Failure> {
        let protocol = || Failure {
            error: BackendError::Protocol(format!("nested acquire returned {v:?}")),
            sent: true,
            owned: false,
        };
        match v {
            [1, rest @ ..] if rest.len() == 2 * levels.len() => Ok(NestedDecision::Granted(
                levels
                    .iter()
                    .zip(leases)
                    .zip(rest.chunks_exact(2))
                    .map(|(((_, d), lease), pair)| Grant {
                        at_ns: scripts::reply_u64(pair[0]).saturating_mul(1_000),
                        delay_ns: scripts::reply_u64(pair[1]).saturating_mul(1_000),
                        lease: lease.map(LeaseId),
                        reserved: Reserved::from(*d),
                        fallback: false,
                    })
                    .collect(),
            )),
            [flag @ (0 | 2), at, wait, dim] => {
                let level = usize::try_from(*at)
                    .ok()
                    .and_then(|l| l.checked_sub(1))
                    .filter(|l| *l < levels.len())
                    .ok_or_else(protocol)?;
                let (h, d) = levels[level];
                let denial = if *flag == 2 {
                    // The lease id was already given up: nothing reserved.
                    match closed(h) {
                        Decision::Denied(denial) => denial,
                        Decision::Granted(_) => return Err(protocol()),
                    }
                } else {
                    match self.decide(h, d, None, &[0, *wait, *dim])? {
                        Decision::Denied(denial) => denial,
                        Decision::Granted(_) => return Err(protocol()),
                    }
                };
                Ok(NestedDecision::Denied { level, denial })
            }
            _ => Err(protocol()),
        }
    }
}

/// The `closed` failure mode's refusal of a nest, at its first level.
fn closed_nest(first: &RedisHandle) -> NestedDecision {
    match closed(first) {
        Decision::Denied(denial) => NestedDecision::Denied { level: 0, denial },
        Decision::Granted(_) => NestedDecision::Granted(Vec::new()),
    }
}

/// Settles the answer of a nested call whose caller went away: a grant is
/// given back on every level (each as a lost single acquisition's grant);
/// a refusal holds nothing; no answer leaves every level's lease to the
/// background release with a tombstone.
fn settle(lost: Vec<LostAcquisition>, answer: Option<Result<Vec<i64>, Failure>>) {
    match answer {
        Some(Ok(v)) => {
            let n = lost.len();
            if let [1, rest @ ..] = &v[..] {
                if rest.len() == 2 * n {
                    for (l, pair) in lost.into_iter().zip(rest.chunks_exact(2)) {
                        l.settle(Some(Ok(vec![1, pair[0], pair[1]])));
                    }
                }
            }
        }
        Some(Err(f)) => {
            for l in lost {
                l.settle(Some(Err(Failure {
                    error: f.error.clone(),
                    sent: f.sent,
                    owned: f.owned,
                })));
            }
        }
        None => {
            for l in lost {
                l.settle(None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! `lua/nested.lua` on a real Redis (the testkit's): a refusal at the
    //! last level puts every earlier level back byte for byte.

    use super::super::acquire_args::AcquireArgs;
    use super::super::dims::dims_of;
    use crate::keys::member;
    use crate::scripts;
    use pressure_core::{Demand, LimitSpec, Limits, RateSpec};
    use redis::Commands;

    fn connection() -> redis::Connection {
        redis::Client::open(pressure_testkit::redis_url().as_str())
            .and_then(|c| c.get_connection())
            .expect("test redis answers")
    }

    /// The script's arguments for `levels` (spec, lease id), one demand of
    /// one request and 10 tokens each.
    fn args(levels: &[(&LimitSpec, u64)]) -> Vec<String> {
        let demand = Demand {
            input_tokens: 10,
            ..Demand::default()
        };
        let mut out = vec![levels.len().to_string()];
        for (spec, lease) in levels {
            let dims = dims_of(spec).expect("dims");
            let lease_member = member(*lease);
            let level = AcquireArgs {
                dims: &dims,
                spec,
                demand: &demand,
                conc: spec
                    .concurrency
                    .map_or(0, |c| RateSpec::scaled(c, demand.ceiling_ppm)),
                member: &lease_member,
                offset_us: 0,
            }
            .generic();
            out.push(level.len().to_string());
            out.extend(level);
        }
        out
    }

    fn run(con: &mut redis::Connection, keys: &[String], args: &[String]) -> Vec<i64> {
        let mut inv = scripts::NESTED.prepare_invoke();
        for k in keys {
            inv.key(k);
        }
        for a in args {
            inv.arg(a);
        }
        inv.invoke(con).expect("nested.lua runs")
    }

    fn hash(con: &mut redis::Connection, key: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut h: Vec<(Vec<u8>, Vec<u8>)> = con.hgetall(key).expect("HGETALL");
        h.sort();
        h
    }

    #[test]
    fn a_refusal_at_the_last_level_restores_the_earlier_levels_byte_for_byte() {
        let mut con = connection();
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut con).expect("TIME");
        let keys: Vec<String> = (0..3)
            .map(|i| format!("pressure:{{gnest{secs}{micros}}}:l{i}:s"))
            .collect();
        // A window, a lease and a calendar day; gcra buckets; the root
        // admits one request per minute.
        let key_spec = Limits::default()
            .requests_per_minute(100)
            .tokens_per_minute(1_000)
            .max_concurrent_requests(5)
            .requests_per_day(50)
            .compile()
            .expect("valid");
        let team_spec = Limits {
            algorithm: pressure_core::Algorithm::Gcra,
            ..Limits::default().requests_per_second(10).tokens_per_minute(1_000)
        }
        .compile()
        .expect("valid");
        let root_spec = Limits::default().requests_per_minute(1).compile().expect("valid");
        let first = run(
            &mut con,
            &keys,
            &args(&[(&key_spec, 1), (&team_spec, 0), (&root_spec, 0)]),
        );
        assert_eq!(first.len(), 7, "granted on all three levels: {first:?}");
        assert_eq!(first[0], 1);
        let before: Vec<_> = keys[..2].iter().map(|k| hash(&mut con, k)).collect();
        let ttl_before: Vec<i64> = keys[..2].iter().map(|k| con.pttl(k).expect("PTTL")).collect();
        assert!(before.iter().all(|h| !h.is_empty()));
        assert!(ttl_before.iter().all(|t| *t > 0), "{ttl_before:?}");
        let refused = run(
            &mut con,
            &keys,
            &args(&[(&key_spec, 2), (&team_spec, 0), (&root_spec, 0)]),
        );
        assert_eq!(refused.len(), 4, "{refused:?}");
        assert_eq!(
            (refused[0], refused[1]),
            (0, 3),
            "refused at level 3: {refused:?}"
        );
        assert_eq!(
            refused[3],
            i64::try_from(pressure_core::Dimension::RequestsPerMinute.index()).expect("small")
        );
        let after: Vec<_> = keys[..2].iter().map(|k| hash(&mut con, k)).collect();
        assert_eq!(after, before, "levels 1 and 2 are exactly as before");
        for (k, before) in keys[..2].iter().zip(ttl_before) {
            let ttl: i64 = con.pttl(k).expect("PTTL");
            assert!(ttl > 0 && ttl <= before, "{k}: PTTL {ttl}, was {before}");
        }
        // A level that did not exist before a refusal is gone after it.
        let fresh = format!("pressure:{{gnest{secs}{micros}}}:fresh:s");
        let refused = run(
            &mut con,
            &[fresh.clone(), keys[2].clone()],
            &args(&[(&key_spec, 3), (&root_spec, 0)]),
        );
        assert_eq!((refused[0], refused[1]), (0, 2), "{refused:?}");
        let exists: bool = con.exists(&fresh).expect("EXISTS");
        assert!(!exists, "the refused nest left {fresh}");
        let _: () = con.del(&keys).expect("DEL");
    }
}
