//! Store calls that outlive their caller.
//!
//! Tokio cancels a future at any `.await`: a gateway drops the request's
//! future when its client resets the connection, a `select!` drops the
//! branch that lost. A script sent to Redis runs whether or not anyone waits
//! for its answer, and the multiplexed connection drops a command whose
//! caller has gone before it was written. Either way the outcome — a lease
//! granted, a release never delivered — would belong to no one.
//!
//! [`Settled`] owns one store call: polled, it is the call; dropped before
//! the call finished, it hands the call to a task that awaits the answer and
//! passes it to the call's `orphan` handler, which gives back what was
//! granted (or queues what could not be delivered). So once a call has been
//! started its outcome is always settled, and the caller may vanish at any
//! point.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A boxed store call.
type Call<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// One store call whose outcome is settled even when the caller's future is
/// dropped first (see the module docs). The orphan handler gets `Some`
/// answer from the task that finished the call, or `None` when no task
/// could be started (no runtime: the process is going down) or no answer
/// came within [`Settled::orphan_wait`].
#[must_use = "a Settled call does nothing until awaited"]
pub(crate) struct Settled<T: Send + 'static, O: FnOnce(Option<T>) + Send + 'static> {
    call: Option<Call<T>>,
    orphan: Option<O>,
    /// How long the task waits for an orphaned call's answer (`None`: as
    /// long as it takes).
    wait: Option<std::time::Duration>,
}

impl<T: Send + 'static, O: FnOnce(Option<T>) + Send + 'static> Settled<T, O> {
    /// `call`, with `orphan` to settle its answer if the caller goes away.
    pub(crate) fn new(call: impl Future<Output = T> + Send + 'static, orphan: O) -> Self {
        Self {
            call: Some(Box::pin(call)),
            orphan: Some(orphan),
            wait: None,
        }
    }

    /// Bounds the task's wait for an orphaned call's answer: past `wait`
    /// the handler gets `None`, as if no answer could come.
    pub(crate) fn orphan_wait(mut self, wait: std::time::Duration) -> Self {
        self.wait = Some(wait);
        self
    }
}

// The call is pinned in its box and the handler is never pinned.
impl<T: Send + 'static, O: FnOnce(Option<T>) + Send + 'static> Unpin for Settled<T, O> {}

impl<T: Send + 'static, O: FnOnce(Option<T>) + Send + 'static> Future for Settled<T, O> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = self.get_mut();
        let Some(call) = this.call.as_mut() else {
            // Polled after completion: the contract of Future says anything
            // may happen but a panic; never ready again.
            return Poll::Pending;
        };
        match call.as_mut().poll(cx) {
            Poll::Ready(v) => {
                this.call = None;
                this.orphan = None;
                Poll::Ready(v)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: Send + 'static, O: FnOnce(Option<T>) + Send + 'static> Drop for Settled<T, O> {
    fn drop(&mut self) {
        let (Some(call), Some(orphan)) = (self.call.take(), self.orphan.take()) else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                let wait = self.wait;
                rt.spawn(async move {
                    let answer = match wait {
                        Some(wait) => tokio::time::timeout(wait, call).await.ok(),
                        None => Some(call.await),
                    };
                    orphan(answer)
                });
            }
            Err(_) => orphan(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use tokio::sync::oneshot;

    #[tokio::test]
    async fn an_awaited_call_never_reaches_its_orphan_handler() {
        let orphaned = Arc::new(AtomicU32::new(0));
        let o = Arc::clone(&orphaned);
        let v = Settled::new(async { 7 }, move |_| {
            o.fetch_add(1, Ordering::SeqCst);
        })
        .await;
        assert_eq!(v, 7);
        tokio::task::yield_now().await;
        assert_eq!(orphaned.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_dropped_call_is_finished_and_its_answer_settled() {
        let (answer_tx, answer_rx) = oneshot::channel::<u32>();
        let (settled_tx, settled_rx) = oneshot::channel::<Option<u32>>();
        let call = Settled::new(async move { answer_rx.await.unwrap_or(0) }, move |v| {
            let _ = settled_tx.send(v);
        });
        let mut call = Box::pin(call);
        // In flight: pending on its answer, then the caller goes away.
        assert!(futures::poll!(call.as_mut()).is_pending());
        drop(call);
        answer_tx.send(42).expect("the call is still waiting");
        assert_eq!(settled_rx.await.expect("settled"), Some(42));
    }

    #[tokio::test(start_paused = true)]
    async fn an_orphan_that_gets_no_answer_in_its_wait_is_told_so() {
        let (settled_tx, settled_rx) = oneshot::channel::<Option<u32>>();
        let call = Settled::new(std::future::pending::<u32>(), move |v| {
            let _ = settled_tx.send(v);
        })
        .orphan_wait(std::time::Duration::from_secs(10));
        let mut call = Box::pin(call);
        assert!(futures::poll!(call.as_mut()).is_pending());
        drop(call);
        assert_eq!(settled_rx.await.expect("settled"), None);
    }

    #[test]
    fn without_a_runtime_the_orphan_handler_is_told_at_once() {
        let (settled_tx, settled_rx) = std::sync::mpsc::channel::<Option<u32>>();
        let call = Settled::new(std::future::pending::<u32>(), move |v| {
            let _ = settled_tx.send(v);
        });
        drop(call);
        assert_eq!(settled_rx.try_recv().expect("told"), None);
    }
}
