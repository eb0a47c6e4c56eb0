//! Cancellation checks: a caller that goes away at an await point of an
//! acquisition, a queued request, or a permit's release, renewal or
//! reconcile leaves the resource as if it had never asked — usage back to
//! its previous value within a short bound, never the lease TTL.
//!
//! A backend whose calls wait for a store gives the suite a [`StoreGate`]
//! ([`Harness::gated`]): the check holds the store, starts the call, lets it
//! get in flight (sent, unanswered), drops it, then opens the store. A
//! backend that answers in this process never leaves a call in flight; its
//! checks show that it never does and that the same sequences settle.
//!
//! The await points covered, per call:
//! * `try_acquire`, on a window + tokens + concurrency limit and on a
//!   gcra + concurrency limit: right after its first poll (the command
//!   handed to the connection, perhaps not written yet) and while the store
//!   holds its answer (sent, unanswered);
//! * `enqueue`: waiting in the queue for capacity;
//! * `Permit::reconcile`, `Permit::renew`, `Permit::release`: the same two
//!   points.

use super::{Harness, StoreGate};
use crate::{
    AcquireOptions, ActualUsage, Backend, Limits, Request, ResourceBroker, ResourceConfig, TaskError,
};
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// How long a cut call is left in flight before it is dropped.
const IN_FLIGHT: Duration = Duration::from_millis(100);

/// The lease TTL of the checks' resources: far longer than [`SETTLED`], so
/// a slot that comes back only by expiring fails the check.
const LEASE_TTL: Duration = Duration::from_secs(60);

/// How soon after the store answers again the resource must be settled.
const SETTLED: Duration = Duration::from_secs(5);

/// Usage of every dimension of `id`, as the backend counts it.
async fn usage_of<B: Backend>(b: &ResourceBroker<B>, id: &str) -> BTreeMap<String, u64> {
    b.resource_stats(id).await.expect("registered").usage
}

/// Waits (bounded by [`SETTLED`]) until `id`'s usage equals `want`.
async fn settles_to<B: Backend>(b: &ResourceBroker<B>, id: &str, want: &BTreeMap<String, u64>, what: &str) {
    let deadline = Instant::now() + SETTLED;
    loop {
        let now = usage_of(b, id).await;
        if &now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: usage {now:?}, expected {want:?} within {SETTLED:?} (the lease TTL is {LEASE_TTL:?})"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Where a call is dropped.
#[derive(Debug, Clone, Copy)]
enum Cut {
    /// Right after its first poll, with no yield in between: its command
    /// may not have reached the connection's writer yet (a multiplexed
    /// connection skips a command whose caller is gone).
    FirstPoll,
    /// After [`IN_FLIGHT`] with the store held (when there is a gate): sent
    /// and unanswered.
    InFlight,
}

/// Drops `fut` at `at`, opening the store again if it was held. Returns its
/// output when it finished before the cut (even a store call can, at its
/// first poll, if this thread was preempted while the store answered); with
/// a gate, an [`Cut::InFlight`] call must still be in flight.
async fn cut<F: Future>(fut: F, at: Cut, gate: Option<&dyn StoreGate>, what: &str) -> Option<F::Output> {
    let mut fut = Box::pin(fut);
    match at {
        Cut::FirstPoll => match futures::poll!(fut.as_mut()) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        },
        Cut::InFlight => {
            if let Some(g) = gate {
                g.hold();
            }
            let out = tokio::time::timeout(IN_FLIGHT, &mut fut).await.ok();
            drop(fut);
            if let Some(g) = gate {
                g.open();
                assert!(out.is_none(), "{what}: answered although the store was held");
            }
            out
        }
    }
}

/// A broker (gated when the harness has a gate) and the gate.
async fn broker_and_gate<H: Harness>(h: &H) -> (ResourceBroker<H::B>, Option<Box<dyn StoreGate>>) {
    match h.gated().await {
        Some((b, g)) => (b, Some(g)),
        None => (h.broker().await, None),
    }
}

/// An acquisition dropped while the store holds its answer leaves nothing:
/// no lease, no units, and every slot usable at once afterwards.
pub async fn acquisition_dropped_in_flight_leaves_nothing<H: Harness>(h: &H) {
    let (b, gate) = broker_and_gate(h).await;
    let shapes = [
        (
            "cutw",
            Limits::default()
                .requests_per_minute(1_000)
                .tokens_per_minute(100_000)
                .max_concurrent_requests(4)
                .lease_ttl(LEASE_TTL),
        ),
        (
            "cutg",
            Limits::default()
                // One unit a minute: a unit's usage stays counted for the
                // whole check (a faster refill would make usage a function
                // of time), the burst of 100 covers every acquisition here.
                .requests_per_minute(1)
                .gcra(Some(100))
                .max_concurrent_requests(4)
                .lease_ttl(LEASE_TTL),
        ),
    ];
    for (name, limits) in shapes {
        let id = h.unique(name);
        b.register_limit(&id, limits).expect("valid");
        let mut baseline = usage_of(&b, &id).await;
        for at in [Cut::FirstPoll, Cut::InFlight, Cut::FirstPoll, Cut::InFlight] {
            let what = format!("{id}: acquisition cut at {at:?}");
            let acquired = cut(
                b.try_acquire(&id, AcquireOptions::default().tokens(500, 0)),
                at,
                gate.as_deref(),
                &what,
            )
            .await;
            // Finished before the cut (a backend that answers at once; or,
            // at the first poll, a store that answered while this thread
            // was preempted): it was granted, the permit goes back by its
            // drop and the units stay counted, as for any grant.
            if let Some(a) = acquired {
                assert!(a.expect("answers").allowed(), "{what}: denied");
                baseline = usage_of(&b, &id).await;
                baseline.insert("maxConcurrentRequests".into(), 0);
            }
            settles_to(&b, &id, &baseline, &what).await;
        }
        let all: Vec<_> =
            futures::future::join_all((0..4).map(|_| b.try_acquire(&id, AcquireOptions::default()))).await;
        assert!(
            all.iter().all(|a| a.as_ref().is_ok_and(|a| a.allowed())),
            "{id}: every slot usable at once: {all:?}"
        );
        assert_eq!(b.resource_stats(&id).await.expect("registered").active, Some(4));
    }
}

/// A queued request dropped while it waits for capacity leaves no queue
/// entry, no lease and no permit: the slot its holder frees goes to the
/// next caller.
pub async fn enqueue_dropped_while_queued_leaves_nothing<H: Harness>(h: &H) {
    let b = h.broker().await;
    let id = h.unique("cutq");
    b.register(
        &id,
        ResourceConfig::new(Limits::default().max_concurrent_requests(1).lease_ttl(LEASE_TTL)),
    )
    .expect("valid");
    let holder = b
        .try_acquire(&id, AcquireOptions::default())
        .await
        .expect("answers");
    assert!(holder.allowed());
    let queued = b.enqueue(Request::new(&id, |_| async { Ok::<_, TaskError<()>>(()) }));
    assert!(
        cut(queued, Cut::InFlight, None, "queued").await.is_none(),
        "the request ran although the only slot was held"
    );
    drop(holder);
    let idle: BTreeMap<String, u64> = [("maxConcurrentRequests".to_owned(), 0)].into();
    settles_to(&b, &id, &idle, "queued request cut").await;
    let s = b.resource_stats(&id).await.expect("registered");
    assert_eq!((s.active, s.queued), (Some(0), Some(0)), "{s:?}");
    let next = b
        .try_acquire(&id, AcquireOptions::default())
        .await
        .expect("answers");
    assert!(next.allowed(), "the freed slot went to no one");
}

/// A permit's reconcile, renewal and release dropped while the store holds
/// their answers are settled all the same: the correction applies once
/// (a second reconcile to the same usage changes nothing), the renewal
/// leaves the lease held, and the release gives the slot back.
pub async fn permit_calls_dropped_in_flight_are_settled<H: Harness>(h: &H) {
    let (b, gate) = broker_and_gate(h).await;
    for at in [Cut::FirstPoll, Cut::InFlight] {
        permit_calls_cut(h, &b, gate.as_deref(), at).await;
    }
}

async fn permit_calls_cut<H: Harness>(
    h: &H,
    b: &ResourceBroker<H::B>,
    gate: Option<&dyn StoreGate>,
    at: Cut,
) {
    let id = h.unique(&format!("cutp{at:?}"));
    b.register_limit(
        &id,
        Limits::default()
            .tokens_per_minute(100_000)
            .max_concurrent_requests(2)
            .lease_ttl(LEASE_TTL),
    )
    .expect("valid");
    let mut permit = b
        .try_acquire(&id, AcquireOptions::default().tokens(1_000, 0))
        .await
        .expect("answers")
        .into_permit()
        .expect("granted");
    let actual = ActualUsage {
        requests: 1,
        input_tokens: 100,
        output_tokens: 0,
        cost_micro_usd: 0,
    };
    let held: BTreeMap<String, u64> = [
        ("maxConcurrentRequests".to_owned(), 1),
        ("tokensPerMinute".to_owned(), 100),
    ]
    .into();

    if let Some(r) = cut(permit.reconcile(actual), at, gate, "reconcile").await {
        r.expect("reconciled");
    }
    settles_to(b, &id, &held, &format!("reconcile cut at {at:?}")).await;
    permit.reconcile(actual).await.expect("reconciled");
    assert_eq!(usage_of(b, &id).await, held, "the correction applied twice");

    if let Some(r) = cut(permit.renew(), at, gate, "renew").await {
        assert!(r.expect("renewed"), "the lease was lost");
    }
    assert!(
        permit.renew().await.expect("renewed"),
        "a cut renewal lost the lease"
    );
    assert_eq!(usage_of(b, &id).await, held);

    if let Some(r) = cut(permit.release(), at, gate, "release").await {
        r.expect("released");
    }
    let released: BTreeMap<String, u64> = [
        ("maxConcurrentRequests".to_owned(), 0),
        ("tokensPerMinute".to_owned(), 100),
    ]
    .into();
    settles_to(b, &id, &released, &format!("release cut at {at:?}")).await;
    assert!(!permit.is_live());
    drop(permit);
    let both: Vec<_> =
        futures::future::join_all((0..2).map(|_| b.try_acquire(&id, AcquireOptions::default()))).await;
    assert!(
        both.iter().all(|a| a.as_ref().is_ok_and(|a| a.allowed())),
        "both slots usable: {both:?}"
    );
}

/// A nested acquisition dropped right after its first poll or while the
/// store holds its answer leaves nothing on any level: no lease, no units.
pub async fn nest_dropped_in_flight_leaves_nothing<H: Harness>(h: &H) {
    let (b, gate) = broker_and_gate(h).await;
    let root = h.unique("cutnest-org");
    let ids = [h.unique("cutnest-key"), root.clone()];
    let limits = Limits::default()
        .requests_per_minute(1_000)
        .tokens_per_minute(100_000)
        .max_concurrent_requests(4)
        .lease_ttl(LEASE_TTL);
    let template = crate::LimitTemplate::new(&limits).expect("valid");
    let nest = crate::Nest::new(
        ids.iter()
            .map(|id| b.lazy_limit_in_group(id, &root, &template).expect("registers"))
            .collect(),
    );
    let mut baseline = Vec::new();
    for id in &ids {
        baseline.push(usage_of(&b, id).await);
    }
    for at in [Cut::FirstPoll, Cut::InFlight, Cut::FirstPoll, Cut::InFlight] {
        let what = format!("nest cut at {at:?}");
        let acquired = cut(
            nest.try_acquire(AcquireOptions::default().tokens(500, 0)),
            at,
            gate.as_deref(),
            &what,
        )
        .await;
        if let Some(a) = acquired {
            assert!(a.expect("answers").allowed(), "{what}: denied");
            for (id, base) in ids.iter().zip(baseline.iter_mut()) {
                *base = usage_of(&b, id).await;
                base.insert("maxConcurrentRequests".into(), 0);
            }
        }
        for (id, base) in ids.iter().zip(&baseline) {
            settles_to(&b, id, base, &format!("{what}, {id}")).await;
        }
    }
    let all: Vec<_> =
        futures::future::join_all((0..4).map(|_| nest.try_acquire(AcquireOptions::default()))).await;
    assert!(
        all.iter().all(|a| a.as_ref().is_ok_and(|a| a.allowed())),
        "every slot of every level usable at once: {all:?}"
    );
}
