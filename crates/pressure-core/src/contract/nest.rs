//! The contract checks of nested acquisitions ([`Nest`]): all or nothing
//! over several resources registered in one group (the hierarchy's root),
//! the refusal naming its level and dimension, permits that release,
//! reconcile, refund and renew per level, exact counts when many nests race
//! over a three-level hierarchy, and a nest of one that is `try_acquire`.

use super::Harness;
use crate::{
    AcquireOptions, Acquisition, Backend, DenialCause, Dimension, Error, LimitTemplate, Limits, Nest,
    NestAcquisition, Reserved, ResourceBroker, ResourceHandle,
};
use std::collections::HashMap;

async fn usage<B: Backend>(b: &ResourceBroker<B>, id: &str, dim: &str) -> u64 {
    let s = b.resource_stats(id).await.expect("registered");
    s.usage.get(dim).copied().unwrap_or(0)
}

async fn counts<B: Backend>(b: &ResourceBroker<B>, id: &str) -> (u64, u64) {
    let s = b.resource_stats(id).await.expect("registered");
    (s.allowed, s.denied)
}

/// A level of a hierarchy rooted at `root`: registered lazily in the
/// root's group, as a gateway registers its tenants.
fn level<B: Backend>(b: &ResourceBroker<B>, id: &str, root: &str, limits: Limits) -> ResourceHandle<B> {
    let template = LimitTemplate::new(&limits).expect("valid");
    b.lazy_limit_in_group(id, root, &template).expect("registers")
}

/// A refusal on the last level leaves the first two exactly as they were:
/// usage equal, nothing counted there, and a following nest that fits
/// still fits. The refusal names the level and its dimension, and counts
/// as a denial on that level only.
pub async fn nest_denial_on_one_level_charges_no_level<H: Harness>(h: &H) {
    let b = h.broker().await;
    let (key, team, org) = (
        h.unique("nest-a-key"),
        h.unique("nest-a-team"),
        h.unique("nest-a-org"),
    );
    let nest = Nest::new(vec![
        level(
            &b,
            &key,
            &org,
            Limits::default()
                .requests_per_minute(100)
                .tokens_per_minute(1_000),
        ),
        level(
            &b,
            &team,
            &org,
            Limits::default()
                .requests_per_minute(100)
                .max_concurrent_requests(10),
        ),
        level(&b, &org, &org, Limits::default().tokens_per_minute(500)),
    ]);
    let first = nest
        .try_acquire(AcquireOptions::default().tokens(300, 0))
        .await
        .expect("answers");
    let held = first.into_permits().expect("fits every level");
    assert_eq!(held.len(), 3);
    let before = (
        usage(&b, &key, "requestsPerMinute").await,
        usage(&b, &key, "tokensPerMinute").await,
        usage(&b, &team, "requestsPerMinute").await,
        usage(&b, &team, "maxConcurrentRequests").await,
    );
    assert_eq!(before, (1, 300, 1, 1));
    for _ in 0..3 {
        let refused = nest
            .try_acquire(AcquireOptions::default().tokens(300, 0))
            .await
            .expect("answers");
        let (lvl, denial) = refused.denial().expect("the organisation has 200 tokens left");
        assert_eq!(lvl, 2);
        assert_eq!(denial.dimension, Dimension::TokensPerMinute);
        assert_eq!(denial.cause, DenialCause::Exhausted);
    }
    let after = (
        usage(&b, &key, "requestsPerMinute").await,
        usage(&b, &key, "tokensPerMinute").await,
        usage(&b, &team, "requestsPerMinute").await,
        usage(&b, &team, "maxConcurrentRequests").await,
    );
    assert_eq!(after, before, "a refusal on level 2 charged levels 0 and 1");
    assert_eq!(usage(&b, &org, "tokensPerMinute").await, 300);
    assert_eq!(counts(&b, &key).await, (1, 0));
    assert_eq!(counts(&b, &team).await, (1, 0));
    assert_eq!(counts(&b, &org).await, (1, 3));
    let fits = nest
        .try_acquire(AcquireOptions::default().tokens(200, 0))
        .await
        .expect("answers");
    assert!(fits.allowed(), "exactly the room left fits: {fits:?}");
    assert_eq!(usage(&b, &org, "tokensPerMinute").await, 500);
    assert_eq!(usage(&b, &key, "tokensPerMinute").await, 500);
    assert_eq!(usage(&b, &team, "maxConcurrentRequests").await, 2);
    // A demand that can never fit a level is an error naming it, and
    // charges nothing.
    let never = nest
        .try_acquire(AcquireOptions::default().tokens(800, 0))
        .await
        .expect_err("800 tokens never fit the organisation's 500");
    assert_eq!(never.level, 2);
    assert!(matches!(never.error, Error::DemandTooLarge { .. }), "{never}");
    assert_eq!(usage(&b, &key, "tokensPerMinute").await, 500);
}

/// Permits hold a concurrency lease on every level that has one: a full
/// level refuses (naming `maxConcurrentRequests`) without taking a slot
/// elsewhere, the leases renew, and releasing the permits gives every slot
/// back.
pub async fn nest_permits_hold_and_release_leases_on_every_level<H: Harness>(h: &H) {
    let b = h.broker().await;
    let (key, team, org) = (
        h.unique("nest-l-key"),
        h.unique("nest-l-team"),
        h.unique("nest-l-org"),
    );
    let nest = Nest::new(vec![
        level(&b, &key, &org, Limits::default().max_concurrent_requests(5)),
        level(&b, &team, &org, Limits::default().max_concurrent_requests(1)),
        level(
            &b,
            &org,
            &org,
            Limits::default()
                .max_concurrent_requests(5)
                .requests_per_minute(100),
        ),
    ]);
    let mut held = nest
        .try_acquire(AcquireOptions::default())
        .await
        .expect("answers")
        .into_permits()
        .expect("fits");
    for p in &held {
        assert!(p.grant().lease.is_some(), "{p:?}");
        assert!(!p.lease_ttl().is_zero());
    }
    for p in &mut held {
        assert!(p.renew().await.expect("renews"), "the lease is held");
    }
    let refused = nest
        .try_acquire(AcquireOptions::default())
        .await
        .expect("answers");
    assert_eq!(
        refused.denial().map(|(l, d)| (l, d.dimension)),
        Some((1, Dimension::MaxConcurrentRequests))
    );
    assert_eq!(usage(&b, &key, "maxConcurrentRequests").await, 1);
    assert_eq!(usage(&b, &org, "maxConcurrentRequests").await, 1);
    assert_eq!(usage(&b, &org, "requestsPerMinute").await, 1);
    for p in &mut held {
        p.release().await.expect("releases");
    }
    for id in [&key, &team, &org] {
        assert_eq!(usage(&b, id, "maxConcurrentRequests").await, 0, "{id}");
    }
    let again = nest
        .try_acquire(AcquireOptions::default())
        .await
        .expect("answers");
    assert!(again.allowed(), "every slot came back: {again:?}");
    // Without a lease, the concurrency limits are not charged.
    let unleased = nest
        .try_acquire(AcquireOptions::default().without_lease())
        .await
        .expect("answers");
    assert!(unleased.allowed());
    assert!(unleased
        .permits()
        .expect("granted")
        .iter()
        .all(|p| p.grant().lease.is_none()));
}

/// Each permit of a nest reconciles and refunds its own level only.
pub async fn nest_reconcile_and_refund_per_level<H: Harness>(h: &H) {
    let b = h.broker().await;
    let (key, org) = (h.unique("nest-r-key"), h.unique("nest-r-org"));
    let nest = Nest::new(vec![
        level(&b, &key, &org, Limits::default().tokens_per_minute(1_000)),
        level(&b, &org, &org, Limits::default().tokens_per_minute(1_000)),
    ]);
    let mut held = nest
        .try_acquire(AcquireOptions::default().tokens(100, 400))
        .await
        .expect("answers")
        .into_permits()
        .expect("fits");
    assert_eq!(usage(&b, &key, "tokensPerMinute").await, 500);
    assert_eq!(usage(&b, &org, "tokensPerMinute").await, 500);
    held[0]
        .reconcile(Reserved {
            requests: 1,
            input_tokens: 100,
            output_tokens: 100,
            cost_micro_usd: 0,
        })
        .await
        .expect("reconciles");
    assert_eq!(usage(&b, &key, "tokensPerMinute").await, 200);
    assert_eq!(usage(&b, &org, "tokensPerMinute").await, 500);
    nest.levels()[1].refund(held[1].grant()).await.expect("refunds");
    assert_eq!(usage(&b, &org, "tokensPerMinute").await, 0);
    assert_eq!(usage(&b, &key, "tokensPerMinute").await, 200);
}

/// 64 nests race over a three-level hierarchy: four keys of 30 per minute,
/// two teams of 50 sharing an organisation of 40. No level is ever
/// overspent, exactly the organisation's 40 are admitted, and every refusal
/// names a level that is full (nothing is refused while every level has
/// room: the counts only grow during the check, so a level that refused
/// is full at the end).
pub async fn nest_concurrent_never_overspends_and_never_refuses_with_room<H: Harness>(h: &H) {
    let b = h.broker().await;
    let org = h.unique("nest-c-org");
    let teams = [h.unique("nest-c-team1"), h.unique("nest-c-team2")];
    let keys: Vec<String> = (0..4).map(|i| h.unique(&format!("nest-c-key{i}"))).collect();
    let mut limit: HashMap<String, u64> = HashMap::new();
    limit.insert(org.clone(), 40);
    let org_h = level(&b, &org, &org, Limits::default().requests_per_minute(40));
    let team_h: Vec<_> = teams
        .iter()
        .map(|t| {
            limit.insert(t.clone(), 50);
            level(&b, t, &org, Limits::default().requests_per_minute(50))
        })
        .collect();
    let nests: Vec<Nest<H::B>> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            limit.insert(k.clone(), 30);
            let key_h = level(&b, k, &org, Limits::default().requests_per_minute(30));
            Nest::new(vec![key_h, team_h[i / 2].clone(), org_h.clone()])
        })
        .collect();
    // Unequal load: key 0 gets 28 of the 64, so its own limit is near.
    let plan: Vec<usize> = (0..64).map(|i| if i < 28 { 0 } else { 1 + i % 3 }).collect();
    let mut tasks = Vec::new();
    for k in plan {
        let nest = nests[k].clone();
        tasks.push(tokio::spawn(async move {
            (
                k,
                nest.try_acquire(AcquireOptions::default().without_lease()).await,
            )
        }));
    }
    let mut admitted = [0u64; 4];
    let mut refusals = Vec::new();
    for t in tasks {
        let (k, out) = t.await.expect("task");
        match out.expect("answers") {
            NestAcquisition::Granted(p) => {
                assert_eq!(p.len(), 3);
                admitted[k] += 1;
            }
            NestAcquisition::Denied { level, denial } => {
                assert_eq!(denial.cause, DenialCause::Exhausted);
                assert_eq!(denial.dimension, Dimension::RequestsPerMinute);
                refusals.push(nests[k].levels()[level].id().to_owned());
            }
        }
    }
    let total: u64 = admitted.iter().sum();
    assert_eq!(
        total, 40,
        "exactly the organisation's room is admitted: {admitted:?}"
    );
    assert_eq!(usage(&b, &org, "requestsPerMinute").await, 40);
    for (i, k) in keys.iter().enumerate() {
        let used = usage(&b, k, "requestsPerMinute").await;
        assert_eq!(used, admitted[i], "{k}");
        assert!(used <= 30);
    }
    for (t, team) in teams.iter().enumerate() {
        let used = usage(&b, team, "requestsPerMinute").await;
        assert_eq!(used, admitted[2 * t] + admitted[2 * t + 1], "{team}");
        assert!(used <= 50);
    }
    for id in refusals {
        let used = usage(&b, &id, "requestsPerMinute").await;
        assert_eq!(used, limit[&id], "{id} refused while it had room");
    }
}

/// A nest of one level is `try_acquire`: the same grants, the same
/// refusal, the same counts, the same error for a demand that never fits.
pub async fn nest_of_one_is_try_acquire<H: Harness>(h: &H) {
    let b = h.broker().await;
    let (solo, twin) = (h.unique("nest-1-solo"), h.unique("nest-1-twin"));
    let limits = Limits::default()
        .requests_per_minute(3)
        .max_concurrent_requests(2);
    b.register_limit(&solo, limits.clone()).expect("valid");
    b.register_limit(&twin, limits).expect("valid");
    let nest = Nest::new(vec![b.resource(&solo).expect("registered")]);
    let mut kept = Vec::new();
    for i in 0..4 {
        let nested = nest
            .try_acquire(AcquireOptions::default())
            .await
            .expect("answers");
        let plain = b
            .try_acquire(&twin, AcquireOptions::default())
            .await
            .expect("answers");
        assert_eq!(nested.allowed(), plain.allowed(), "acquisition {i}");
        match (&nested, &plain) {
            (NestAcquisition::Granted(p), Acquisition::Granted(q)) => {
                assert_eq!(p.len(), 1);
                assert_eq!(p[0].grant().lease.is_some(), q.grant().lease.is_some());
                assert_eq!(p[0].grant().reserved, q.grant().reserved);
            }
            (NestAcquisition::Denied { level, denial }, Acquisition::Denied(d)) => {
                assert_eq!(*level, 0);
                assert_eq!((denial.dimension, denial.cause), (d.dimension, d.cause));
            }
            _ => unreachable!("checked above"),
        }
        kept.push((nested, plain));
    }
    assert_eq!(counts(&b, &solo).await, counts(&b, &twin).await);
    let never = nest
        .try_acquire(AcquireOptions::default().requests(4))
        .await
        .expect_err("never fits");
    assert_eq!(never.level, 0);
    assert!(
        matches!(
            never.error,
            Error::DemandTooLarge {
                demand: 4,
                max: 3,
                ..
            }
        ),
        "{never}"
    );
}
