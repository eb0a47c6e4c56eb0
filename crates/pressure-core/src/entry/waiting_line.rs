//! [`WaitingLine`]: the waiting line of one `queue` resource, shared by every
//! version of its [`Entry`](super::Entry) — two FIFO classes, the starvation
//! rule, bounds, and the wait-time histogram for stats. Waiters receive a
//! [`Permit`] (or a [`Rejection`]) from the dispatcher in `queue/dispatch.rs`.

use super::Permit;
use crate::backend::{Backend, BackendError};
use crate::limits::Demand;
use crate::priority::Priority;
use crate::queue_config::QueueConfig;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

/// Why the dispatcher turned a waiter away.
#[derive(Debug)]
pub(crate) enum Rejection {
    /// Capacity returns only after the waiter's deadline.
    PastDeadline,
    /// The backend failed.
    Backend(BackendError),
}

pub(crate) type Handoff<B> = Result<Permit<B>, Rejection>;

pub(crate) struct Waiter<B: Backend> {
    pub(crate) id: u64,
    pub(crate) priority: Priority,
    pub(crate) demand: Demand,
    pub(crate) deadline: Instant,
    pub(crate) enqueued: Instant,
    pub(crate) tx: oneshot::Sender<Handoff<B>>,
}

/// The next waiter to serve, copied out so the lock is not held across the
/// backend call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Next {
    pub(crate) id: u64,
    pub(crate) priority: Priority,
    pub(crate) demand: Demand,
    pub(crate) deadline: Instant,
}

struct Line<B: Backend> {
    interactive: VecDeque<Waiter<B>>,
    batch: VecDeque<Waiter<B>>,
    /// Consecutive interactive grants while batch was waiting.
    streak: u32,
    /// Whether a dispatcher task is alive.
    running: bool,
    /// Downstream asked everyone to hold off until then.
    paused_until: Option<Instant>,
    next_id: u64,
}

pub(crate) struct WaitingLine<B: Backend> {
    pub(crate) config: QueueConfig,
    line: Mutex<Line<B>>,
    wake: Notify,
    waits: Mutex<Option<Histogram<u64>>>,
}

impl<B: Backend> WaitingLine<B> {
    pub(crate) fn new(config: QueueConfig) -> Self {
        Self {
            config,
            line: Mutex::new(Line {
                interactive: VecDeque::new(),
                batch: VecDeque::new(),
                streak: 0,
                running: false,
                paused_until: None,
                next_id: 1,
            }),
            wake: Notify::new(),
            waits: Mutex::new(None),
        }
    }

    /// Wakes the dispatcher (capacity freed or a waiter arrived).
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.wake.notified()
    }

    /// Whether a newcomer may try the backend directly: nobody waits and
    /// downstream has not asked to pause.
    pub(crate) fn is_open(&self, now: Instant) -> bool {
        let l = self.line.lock();
        l.interactive.is_empty() && l.batch.is_empty() && l.paused_until.is_none_or(|t| t <= now)
    }

    /// Adds a waiter. `Ok((id, start_dispatcher))` or `Err(())` when full.
    pub(crate) fn push(
        &self,
        priority: Priority,
        demand: Demand,
        deadline: Instant,
        tx: oneshot::Sender<Handoff<B>>,
    ) -> Result<(u64, bool), ()> {
        let mut l = self.line.lock();
        if l.interactive.len() + l.batch.len() >= self.config.max_queued {
            return Err(());
        }
        let id = l.next_id;
        l.next_id += 1;
        let w = Waiter {
            id,
            priority,
            demand,
            deadline,
            enqueued: Instant::now(),
            tx,
        };
        match priority {
            Priority::Interactive => l.interactive.push_back(w),
            Priority::Batch => l.batch.push_back(w),
        }
        let start = !std::mem::replace(&mut l.running, true);
        drop(l);
        self.wake();
        Ok((id, start))
    }

    /// Removes waiter `id` (cancellation or handoff) and returns it.
    pub(crate) fn take(&self, id: u64) -> Option<Waiter<B>> {
        let mut l = self.line.lock();
        let l = &mut *l;
        for q in [&mut l.interactive, &mut l.batch] {
            if let Some(pos) = q.iter().position(|w| w.id == id) {
                return q.remove(pos);
            }
        }
        None
    }

    /// Picks the next waiter by the priority rule, dropping abandoned ones.
    /// `Err(Some(t))`: paused until `t`; `Err(None)`: empty, and the
    /// dispatcher must stop (its `running` flag is cleared under the lock).
    pub(crate) fn next(&self, now: Instant) -> Result<Next, Option<Instant>> {
        let mut l = self.line.lock();
        if let Some(t) = l.paused_until {
            if t > now {
                return Err(Some(t));
            }
            l.paused_until = None;
        }
        l.interactive.retain(|w| !w.tx.is_closed());
        l.batch.retain(|w| !w.tx.is_closed());
        if l.batch.is_empty() {
            l.streak = 0;
        }
        let batch_turn =
            !l.batch.is_empty() && (l.interactive.is_empty() || l.streak >= self.config.interactive_burst);
        let w = if batch_turn {
            l.batch.front()
        } else {
            l.interactive.front()
        };
        match w {
            Some(w) => Ok(Next {
                id: w.id,
                priority: w.priority,
                demand: w.demand,
                deadline: w.deadline,
            }),
            None => {
                l.running = false;
                Err(None)
            }
        }
    }

    /// Records a grant for the starvation rule and the wait histogram.
    pub(crate) fn granted(&self, w: &Waiter<B>, now: Instant) {
        {
            let mut l = self.line.lock();
            match w.priority {
                Priority::Interactive if !l.batch.is_empty() => l.streak += 1,
                Priority::Interactive => {}
                Priority::Batch => l.streak = 0,
            }
        }
        self.record_wait(now.saturating_duration_since(w.enqueued));
    }

    /// Holds every newcomer and waiter until `until` (downstream said 429).
    pub(crate) fn pause_until(&self, until: Instant) {
        let mut l = self.line.lock();
        if l.paused_until.is_none_or(|t| t < until) {
            l.paused_until = Some(until);
        }
    }

    /// Requests waiting now.
    pub(crate) fn len(&self) -> usize {
        let l = self.line.lock();
        l.interactive.len() + l.batch.len()
    }

    /// Records how long a request waited before it could run.
    pub(crate) fn record_wait(&self, d: Duration) {
        let mut h = self.waits.lock();
        let h = h.get_or_insert_with(|| {
            Histogram::new_with_bounds(1, 3_600_000_000, 2).expect("static histogram bounds are valid")
        });
        let _ = h.record(
            u64::try_from(d.as_micros())
                .unwrap_or(u64::MAX)
                .clamp(1, 3_600_000_000),
        );
    }

    /// Wait-time percentiles in milliseconds: p50, p90, p99, max.
    pub(crate) fn wait_percentiles(&self) -> Option<[f64; 4]> {
        let h = self.waits.lock();
        let h = h.as_ref()?;
        let ms = |v: u64| v as f64 / 1000.0;
        Some([
            ms(h.value_at_quantile(0.5)),
            ms(h.value_at_quantile(0.9)),
            ms(h.value_at_quantile(0.99)),
            ms(h.max()),
        ])
    }
}
