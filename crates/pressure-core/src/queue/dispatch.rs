//! The dispatcher of one queue: a task that lives while the queue is not
//! empty, hands capacity to waiters in priority order, and sleeps exactly
//! until the backend says capacity returns (or a local release wakes it).

use crate::acquisition::Acquisition;
use crate::backend::Backend;
use crate::clock::duration_to_nanos;
use crate::entry::{Entry, Rejection};
use crate::ppm::PPM;
use crate::priority::Priority;
use std::sync::Arc;
use tokio::time::Instant;

/// Serves `entry`'s queue until it is empty.
pub(crate) async fn run<B: Backend>(entry: Arc<Entry<B>>) {
    let Some(queue) = entry.queue.as_deref() else {
        return;
    };
    loop {
        let now = Instant::now();
        let next = match queue.next(now) {
            Ok(n) => n,
            Err(Some(until)) => {
                tokio::time::sleep_until(until).await;
                continue;
            }
            Err(None) => return,
        };
        if next.deadline <= now {
            reject(&entry, next.id, Rejection::PastDeadline);
            continue;
        }
        let mut demand = next.demand;
        demand.ceiling_ppm = match next.priority {
            Priority::Interactive => PPM,
            Priority::Batch => entry.batch_ceiling_ppm,
        };
        // The limits may have changed since the waiter arrived: book by the
        // newest version (the attempt runs on it too).
        if entry.current().spec.all_gcra() {
            demand.book_within_ns = duration_to_nanos(next.deadline - now);
        }
        // Register interest before the attempt so a release racing with it
        // is not lost.
        let notified = queue.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        match entry.attempt(&demand).await {
            Ok(Acquisition::Granted(permit)) => {
                if let Some(w) = queue.take(next.id) {
                    queue.granted(&w, Instant::now());
                    // A waiter that gave up in the meantime drops the permit,
                    // which releases it.
                    let _ = w.tx.send(Ok(permit));
                }
            }
            Ok(Acquisition::Denied(d)) => {
                let now = Instant::now();
                if d.is_exact() && now + d.wait > next.deadline {
                    reject(&entry, next.id, Rejection::PastDeadline);
                    continue;
                }
                let until = (now + d.wait).min(next.deadline);
                tokio::select! {
                    _ = tokio::time::sleep_until(until) => {}
                    _ = &mut notified => {}
                }
            }
            Err(crate::Error::Backend(e)) => reject(&entry, next.id, Rejection::Backend(e)),
            Err(_) => reject(&entry, next.id, Rejection::PastDeadline),
        }
    }
}

fn reject<B: Backend>(entry: &Entry<B>, id: u64, why: Rejection) {
    if let Some(w) = entry.queue.as_deref().and_then(|q| q.take(id)) {
        let _ = w.tx.send(Err(why));
    }
}
