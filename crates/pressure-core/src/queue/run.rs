//! `enqueue` from the caller's side: take a turn (directly when nobody
//! waits, through the dispatcher otherwise), run the task (the broker's
//! renewal task keeps its lease alive), reconcile what it used, and retry on
//! a reported rate limit.

use super::dispatch;
use super::request::{Attempt, Request, Response, TaskError, UsageReport};
use crate::acquisition::Acquisition;
use crate::backend::{Backend, Reserved};
use crate::clock::duration_to_nanos;
use crate::entry::{Entry, Permit, Rejection};
use crate::error::{Error, QueueError};
use crate::limits::Demand;
use crate::priority::Priority;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// Backoff when the task reports a rate limit without a retry-after:
/// 500 ms doubling per attempt, capped at 30 s.
fn default_backoff(attempt: u32) -> Duration {
    let ms = 500u64.saturating_mul(1u64 << attempt.saturating_sub(1).min(16));
    Duration::from_millis(ms.min(30_000))
}

pub(crate) async fn enqueue<B, T, E, F, Fut>(
    entry: Arc<Entry<B>>,
    mut req: Request<F>,
) -> Result<Response<T>, QueueError<E>>
where
    B: Backend,
    F: FnMut(Attempt) -> Fut,
    Fut: Future<Output = Result<T, TaskError<E>>>,
{
    let Some(queue) = entry.queue.as_deref() else {
        return Err(Error::NotAQueue(entry.id.to_string()).into());
    };
    let max_wait = req.max_wait.unwrap_or_else(|| queue.config.max_wait());
    let deadline = Instant::now() + max_wait;
    let demand = Demand {
        // Waiting is not a refusal: only Full and Timeout count as denied.
        count_denial: false,
        ..entry.demand(&req.opts)
    };
    entry.current().check_size(&demand)?;
    let timeout = |entry: &Entry<B>| {
        entry.counters().rejected.fetch_add(1, Ordering::Relaxed);
        QueueError::Timeout {
            resource: entry.id.to_string(),
            max_wait,
        }
    };
    let mut waited = Duration::ZERO;
    let mut attempts = 0u32;
    loop {
        let t0 = Instant::now();
        let mut permit = turn(&entry, demand, req.opts.priority, deadline)
            .await
            .map_err(|e| match e {
                Turn::Full => {
                    entry.counters().rejected.fetch_add(1, Ordering::Relaxed);
                    QueueError::Full {
                        resource: entry.id.to_string(),
                        max_queued: queue.config.max_queued,
                    }
                }
                Turn::Timeout => timeout(&entry),
                Turn::Broker(e) => QueueError::Broker(e),
            })?;
        if !permit.delay().is_zero() {
            tokio::time::sleep(permit.delay()).await;
        }
        waited += t0.elapsed();
        attempts += 1;
        let usage = UsageReport::default();
        let attempt = Attempt {
            number: attempts,
            usage: usage.clone(),
        };
        // The broker's renewal task keeps the lease alive while the task runs.
        let out = (req.task)(attempt).await;
        match out {
            Ok(value) => {
                settle(&mut permit, usage.take()).await;
                return Ok(Response {
                    value,
                    attempts,
                    waited,
                });
            }
            Err(TaskError::Failed(e)) => {
                settle(&mut permit, usage.take()).await;
                return Err(QueueError::Task(e));
            }
            Err(TaskError::RateLimited { retry_after, error }) => {
                // Downstream refused: it processed no tokens and billed
                // nothing, keep only the request.
                let refund = usage.take().unwrap_or(Reserved {
                    requests: req.opts.requests,
                    ..Reserved::default()
                });
                settle(&mut permit, Some(refund)).await;
                let pause = retry_after.unwrap_or_else(|| default_backoff(attempts));
                let resume = Instant::now() + pause;
                queue.pause_until(resume);
                if attempts > queue.config.max_rate_limit_retries || resume > deadline {
                    return Err(QueueError::RateLimited {
                        resource: entry.id.to_string(),
                        attempts,
                        last: error,
                    });
                }
            }
        }
    }
}

async fn settle<B: Backend>(permit: &mut Permit<B>, actual: Option<Reserved>) {
    if let Some(actual) = actual {
        if let Err(e) = permit.reconcile(actual).await {
            tracing::warn!(resource = ?permit.resource(), error = %e, "reconcile failed");
        }
    }
    if let Err(e) = permit.release().await {
        tracing::warn!(resource = ?permit.resource(), error = %e, "release failed; the lease TTL will reclaim it");
    }
}

enum Turn {
    Full,
    Timeout,
    Broker(Error),
}

/// Waits for this request's turn and returns its permit.
async fn turn<B: Backend>(
    entry: &Arc<Entry<B>>,
    demand: Demand,
    priority: Priority,
    deadline: Instant,
) -> Result<Permit<B>, Turn> {
    let Some(queue) = entry.queue.as_deref() else {
        return Err(Turn::Broker(Error::NotAQueue(entry.id.to_string())));
    };
    let now = Instant::now();
    if queue.is_open(now) {
        let mut direct = demand;
        if entry.current().spec.all_gcra() {
            direct.book_within_ns = duration_to_nanos(deadline.saturating_duration_since(now));
        }
        if let Acquisition::Granted(p) = entry.attempt(&direct).await.map_err(Turn::Broker)? {
            queue.record_wait(p.delay());
            return Ok(p);
        }
    }
    let (tx, rx) = oneshot::channel();
    let (id, start) = queue
        .push(priority, demand, deadline, tx)
        .map_err(|()| Turn::Full)?;
    if start {
        tokio::spawn(dispatch::run(Arc::clone(entry)));
    }
    let guard = Leave { entry, id };
    let out = tokio::time::timeout_at(deadline, rx).await;
    drop(guard);
    match out {
        Ok(Ok(Ok(permit))) => Ok(permit),
        Ok(Ok(Err(Rejection::PastDeadline))) | Err(_) => Err(Turn::Timeout),
        Ok(Ok(Err(Rejection::Backend(e)))) => Err(Turn::Broker(Error::Backend(e))),
        Ok(Err(_)) => Err(Turn::Timeout),
    }
}

/// Removes a waiter from the queue when its `enqueue` future ends or is
/// dropped, so cancellation leaves no trace.
struct Leave<'a, B: Backend> {
    entry: &'a Arc<Entry<B>>,
    id: u64,
}

impl<B: Backend> Drop for Leave<'_, B> {
    fn drop(&mut self) {
        if let Some(q) = self.entry.queue.as_deref() {
            if q.take(self.id).is_some() {
                q.wake();
            }
        }
    }
}
