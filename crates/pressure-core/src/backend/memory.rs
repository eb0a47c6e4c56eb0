//! [`MemoryBackend`]: limiter state in this process.
//!
//! A resource with a single `gcra` rate dimension and no concurrency limit
//! (the common "N per second" case) is one atomic word updated with a
//! compare-and-swap, plus its grant and denial counters: no lock, no
//! allocation. Every other
//! resource keeps its dimensions and counters behind one short mutex, which
//! is what makes a multi-dimension acquisition all-or-nothing.

use super::{Backend, BackendError, Counts, Decision, Denial, Grant, LeaseId, Reserved, SyncBackend, Usage};
use crate::algo::{gcra, leases::LeaseSet, window::WindowState};
use crate::clock::{Clock, MonotonicClock};
use crate::limits::{Algorithm, Demand, Dimension, LimitSpec, RateSpec};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// In-process backend; the default. Cheap to clone (shares its clock).
#[derive(Debug, Clone)]
pub struct MemoryBackend {
    clock: Arc<dyn Clock>,
}

impl MemoryBackend {
    /// A backend on the production monotonic clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(MonotonicClock::new()))
    }

    /// A backend on the given clock (tests use `TokioClock` or `ManualClock`).
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self { clock }
    }

    /// The clock this backend counts with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    fn release_sync(&self, h: &MemoryHandle, grant: &Grant) {
        if let (Some(lease), State::Locked(m)) = (grant.lease, &h.state) {
            m.lock().leases.remove(lease.0);
        }
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

/// Per-resource state of the [`MemoryBackend`].
#[derive(Debug)]
pub struct MemoryHandle {
    spec: Arc<LimitSpec>,
    state: State,
}

#[derive(Debug)]
enum State {
    /// One `gcra` dimension, no concurrency: the TAT in a lock-free word,
    /// next to its counters (one cache line).
    Fast {
        rate: RateSpec,
        tat: AtomicU64,
        allowed: AtomicU64,
        denied: AtomicU64,
    },
    /// Anything else: all dimensions under one lock.
    Locked(Mutex<Counters>),
}

#[derive(Debug)]
struct Counters {
    dims: Vec<DimState>,
    leases: LeaseSet,
    next_lease: u64,
    allowed: u64,
    denied: u64,
}

#[derive(Debug)]
enum DimState {
    Gcra(u64),
    Window(WindowState),
}

#[inline]
fn fast_acquire(
    rate: &RateSpec,
    [tat, allowed, denied]: [&AtomicU64; 3],
    now: u64,
    demand: &Demand,
) -> Decision {
    let units = rate.units(demand);
    let cap = RateSpec::scaled(rate.capacity, demand.ceiling_ppm);
    let mut cur = tat.load(Ordering::Acquire);
    loop {
        let (next, delay) = match gcra::check(rate, cur, now, units, cap) {
            Ok(next) => (next, 0),
            Err(wait) if demand.book_within_ns > 0 && wait <= demand.book_within_ns => {
                (gcra::book(rate, cur, now + wait, units), wait)
            }
            Err(wait) => {
                if demand.count_denial {
                    denied.fetch_add(1, Ordering::Relaxed);
                }
                return Decision::Denied(Denial {
                    wait: Duration::from_nanos(wait),
                    dimension: rate.dimension,
                });
            }
        };
        if next == cur
            || tat
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            allowed.fetch_add(1, Ordering::Relaxed);
            return granted(now, delay, None, demand);
        }
        cur = tat.load(Ordering::Acquire);
    }
}

#[inline]
fn granted(now: u64, delay_ns: u64, lease: Option<LeaseId>, demand: &Demand) -> Decision {
    Decision::Granted(Grant {
        at_ns: now,
        delay_ns,
        lease,
        reserved: Reserved::from(demand),
        fallback: false,
    })
}

impl Counters {
    fn new(spec: &LimitSpec) -> Self {
        let dims = spec
            .rates
            .iter()
            .map(|r| match r.algorithm {
                Algorithm::Gcra => DimState::Gcra(0),
                Algorithm::Window => DimState::Window(WindowState::default()),
            })
            .collect();
        Self {
            dims,
            leases: LeaseSet::default(),
            next_lease: 1,
            allowed: 0,
            denied: 0,
        }
    }

    fn acquire(&mut self, spec: &LimitSpec, now: u64, demand: &Demand) -> Decision {
        let decision = self.decide(spec, now, demand);
        match decision {
            Decision::Granted(_) => self.allowed += 1,
            Decision::Denied(_) if demand.count_denial => self.denied += 1,
            Decision::Denied(_) => {}
        }
        decision
    }

    fn decide(&mut self, spec: &LimitSpec, now: u64, demand: &Demand) -> Decision {
        let lease = match (demand.lease, spec.concurrency) {
            (true, Some(limit)) => Some((limit, self.next_lease)),
            _ => None,
        };
        let mut worst: Option<(u64, Dimension)> = None;
        let mut note = |wait: u64, dim: Dimension| {
            if worst.is_none_or(|(w, _)| wait > w) {
                worst = Some((wait, dim));
            }
        };
        for (r, st) in spec.rates.iter().zip(self.dims.iter_mut()) {
            let units = r.units(demand);
            let res = match st {
                DimState::Gcra(tat) => {
                    let cap = RateSpec::scaled(r.capacity, demand.ceiling_ppm);
                    gcra::check(r, *tat, now, units, cap).map(|_| ())
                }
                DimState::Window(w) => {
                    w.evict(r, now);
                    w.check(r, now, units, RateSpec::scaled(r.limit, demand.ceiling_ppm))
                }
            };
            if let Err(wait) = res {
                note(wait, r.dimension);
            }
        }
        if let Some((limit, _)) = lease {
            if let Err(wait) = self
                .leases
                .check(now, RateSpec::scaled(limit, demand.ceiling_ppm))
            {
                note(wait, Dimension::MaxConcurrentRequests);
            }
        }
        let delay = match worst {
            None => 0,
            Some((wait, dimension)) => match self.bookable_start(spec, now, demand, lease.is_some()) {
                Some(start) => start - now,
                None => {
                    return Decision::Denied(Denial {
                        wait: Duration::from_nanos(wait),
                        dimension,
                    })
                }
            },
        };
        let start = now + delay;
        for (r, st) in spec.rates.iter().zip(self.dims.iter_mut()) {
            let units = r.units(demand);
            match st {
                DimState::Gcra(tat) => *tat = gcra::book(r, *tat, start, units),
                DimState::Window(w) => w.commit(r, now, units),
            }
        }
        let lease = lease.map(|(_, id)| {
            self.next_lease += 1;
            self.leases.insert(id, now + spec.lease_ttl_ns);
            LeaseId(id)
        });
        granted(now, delay, lease, demand)
    }

    /// The start time of a booked future slot, when booking is possible and
    /// within the caller's horizon.
    fn bookable_start(&self, spec: &LimitSpec, now: u64, demand: &Demand, lease: bool) -> Option<u64> {
        if demand.book_within_ns == 0 || lease || !spec.all_gcra() {
            return None;
        }
        let mut start = now;
        for (r, st) in spec.rates.iter().zip(self.dims.iter()) {
            if let DimState::Gcra(tat) = st {
                let units = r.units(demand);
                if units == 0 {
                    continue;
                }
                let cap = RateSpec::scaled(r.capacity, demand.ceiling_ppm);
                start = start.max(gcra::earliest(
                    *tat,
                    now,
                    gcra::increment(r, units),
                    gcra::tolerance(r, cap),
                ));
            }
        }
        (start - now <= demand.book_within_ns).then_some(start)
    }

    fn reconcile(&mut self, spec: &LimitSpec, now: u64, grant: &Grant, actual: &Reserved) {
        let before = Demand::from(&grant.reserved);
        let after = Demand::from(actual);
        for (r, st) in spec.rates.iter().zip(self.dims.iter_mut()) {
            let delta = r.units(&after) as i64 - r.units(&before) as i64;
            if delta == 0 {
                continue;
            }
            match st {
                DimState::Gcra(tat) => *tat = gcra::adjust(r, *tat, delta),
                DimState::Window(w) => w.adjust(r, now, grant.at_ns, delta),
            }
        }
    }

    fn usage(&mut self, spec: &LimitSpec, now: u64) -> Usage {
        self.leases.sweep(now);
        let dimensions = spec
            .rates
            .iter()
            .zip(self.dims.iter_mut())
            .map(|(r, st)| {
                let used = match st {
                    DimState::Gcra(tat) => gcra::used(r, *tat, now),
                    DimState::Window(w) => {
                        w.evict(r, now);
                        w.sum()
                    }
                };
                (r.dimension, used)
            })
            .collect();
        Usage {
            dimensions,
            leases: self.leases.len() as u64,
        }
    }

    fn at_rest(&mut self, spec: &LimitSpec, now: u64) -> bool {
        self.leases.sweep(now);
        self.leases.is_empty()
            && spec
                .rates
                .iter()
                .zip(self.dims.iter_mut())
                .all(|(r, st)| match st {
                    DimState::Gcra(tat) => *tat <= now,
                    DimState::Window(w) => {
                        w.evict(r, now);
                        w.is_empty()
                    }
                })
    }
}

impl Backend for MemoryBackend {
    type Handle = MemoryHandle;

    fn attach(&self, _resource: &str, spec: Arc<LimitSpec>) -> Result<MemoryHandle, BackendError> {
        let state = match spec.rates.as_slice() {
            [rate] if rate.algorithm == Algorithm::Gcra && spec.concurrency.is_none() => State::Fast {
                rate: *rate,
                tat: AtomicU64::new(0),
                allowed: AtomicU64::new(0),
                denied: AtomicU64::new(0),
            },
            _ => State::Locked(Mutex::new(Counters::new(&spec))),
        };
        Ok(MemoryHandle { spec, state })
    }

    #[inline]
    fn acquire_now(&self, handle: &MemoryHandle, demand: &Demand) -> Option<Result<Decision, BackendError>> {
        Some(Ok(self.acquire_sync(handle, demand)))
    }

    fn counts(&self, handle: &MemoryHandle) -> Counts {
        match &handle.state {
            State::Fast { allowed, denied, .. } => Counts {
                allowed: allowed.load(Ordering::Relaxed),
                denied: denied.load(Ordering::Relaxed),
            },
            State::Locked(m) => {
                let c = m.lock();
                Counts {
                    allowed: c.allowed,
                    denied: c.denied,
                }
            }
        }
    }

    #[inline]
    fn acquire(
        &self,
        handle: &MemoryHandle,
        demand: &Demand,
    ) -> impl std::future::Future<Output = Result<Decision, BackendError>> + Send {
        std::future::ready(Ok(self.acquire_sync(handle, demand)))
    }

    fn release(
        &self,
        handle: &MemoryHandle,
        grant: &Grant,
    ) -> impl std::future::Future<Output = Result<(), BackendError>> + Send {
        self.release_sync(handle, grant);
        std::future::ready(Ok(()))
    }

    #[inline]
    fn release_detached(&self, handle: &MemoryHandle, grant: Grant) {
        self.release_sync(handle, &grant);
    }

    fn renew(
        &self,
        handle: &MemoryHandle,
        grant: &Grant,
    ) -> impl std::future::Future<Output = Result<bool, BackendError>> + Send {
        let now = self.clock.now_nanos();
        let ok = match (&handle.state, grant.lease) {
            (State::Locked(m), Some(lease)) => {
                m.lock()
                    .leases
                    .renew(lease.0, now, now + handle.spec.lease_ttl_ns)
            }
            _ => false,
        };
        std::future::ready(Ok(ok))
    }

    fn reconcile(
        &self,
        handle: &MemoryHandle,
        grant: &Grant,
        actual: &Reserved,
    ) -> impl std::future::Future<Output = Result<(), BackendError>> + Send {
        let now = self.clock.now_nanos();
        match &handle.state {
            State::Fast { rate, tat, .. } => {
                let delta = rate.units(&Demand::from(actual)) as i64
                    - rate.units(&Demand::from(&grant.reserved)) as i64;
                if delta != 0 {
                    let _ = tat.fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                        Some(gcra::adjust(rate, t, delta))
                    });
                }
            }
            State::Locked(m) => m.lock().reconcile(&handle.spec, now, grant, actual),
        }
        std::future::ready(Ok(()))
    }

    fn usage(
        &self,
        handle: &MemoryHandle,
    ) -> impl std::future::Future<Output = Result<Usage, BackendError>> + Send {
        let now = self.clock.now_nanos();
        let usage = match &handle.state {
            State::Fast { rate, tat, .. } => Usage {
                dimensions: vec![(rate.dimension, gcra::used(rate, tat.load(Ordering::Acquire), now))],
                leases: 0,
            },
            State::Locked(m) => m.lock().usage(&handle.spec, now),
        };
        std::future::ready(Ok(usage))
    }

    fn at_rest(&self, handle: &MemoryHandle) -> bool {
        let now = self.clock.now_nanos();
        match &handle.state {
            State::Fast { tat, .. } => tat.load(Ordering::Acquire) <= now,
            State::Locked(m) => m.try_lock().is_some_and(|mut c| c.at_rest(&handle.spec, now)),
        }
    }
}

impl SyncBackend for MemoryBackend {
    #[inline]
    fn acquire_sync(&self, h: &MemoryHandle, demand: &Demand) -> Decision {
        let now = self.clock.now_nanos();
        match &h.state {
            State::Fast {
                rate,
                tat,
                allowed,
                denied,
            } => fast_acquire(rate, [tat, allowed, denied], now, demand),
            State::Locked(m) => m.lock().acquire(&h.spec, now, demand),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::limits::Limits;
    use futures::FutureExt;

    fn backend() -> (MemoryBackend, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(1_000_000_000));
        (MemoryBackend::with_clock(clock.clone()), clock)
    }

    fn now<T>(f: impl std::future::Future<Output = T>) -> T {
        f.now_or_never().expect("memory backend is synchronous")
    }

    #[test]
    fn denial_on_one_dimension_consumes_nothing_on_others() {
        let (b, _) = backend();
        let spec = Arc::new(
            Limits::default()
                .requests_per_minute(100)
                .tokens_per_minute(1_000)
                .max_concurrent_requests(10)
                .compile()
                .unwrap(),
        );
        let h = b.attach("r", spec).unwrap();
        let big = Demand {
            input_tokens: 900,
            ..Demand::default()
        };
        assert!(matches!(now(b.acquire(&h, &big)).unwrap(), Decision::Granted(_)));
        let too_much = Demand {
            input_tokens: 200,
            ..Demand::default()
        };
        let d = now(b.acquire(&h, &too_much)).unwrap();
        assert!(matches!(
            d,
            Decision::Denied(Denial {
                dimension: Dimension::TokensPerMinute,
                ..
            })
        ));
        let u = now(b.usage(&h)).unwrap();
        assert_eq!(
            u.dimensions,
            vec![
                (Dimension::RequestsPerMinute, 1),
                (Dimension::TokensPerMinute, 900)
            ]
        );
        assert_eq!(u.leases, 1);
    }

    #[test]
    fn gcra_booking_returns_the_exact_delay() {
        let (b, _) = backend();
        let spec = Arc::new(
            Limits::default()
                .requests_per_second(10)
                .gcra(Some(1))
                .compile()
                .unwrap(),
        );
        let h = b.attach("r", spec).unwrap();
        let book = Demand {
            book_within_ns: 1_000_000_000,
            ..Demand::default()
        };
        let delays: Vec<_> = (0..4)
            .map(|_| match now(b.acquire(&h, &book)).unwrap() {
                Decision::Granted(g) => g.delay(),
                Decision::Denied(d) => panic!("denied {d:?}"),
            })
            .collect();
        let ms = |n| Duration::from_millis(n);
        assert_eq!(delays, vec![ms(0), ms(100), ms(200), ms(300)]);
    }
}
