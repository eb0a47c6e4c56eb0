//! The upstream deadline (`timeouts.totalMs`) of the requests of one
//! client connection, kept by one timer that each request lends in turn.
//!
//! A fresh `tokio::time::timeout` per request enters the runtime's timer
//! wheel on its first poll and leaves it when dropped: under the driver's
//! lock both times, a few hundred instructions of the pass path. A
//! keep-alive connection's requests come one after another, each deadline
//! later than the last, so the connection keeps one `Sleep` and moves it
//! on: pushing a registered timer's deadline later is one compare-and-swap
//! (the wheel re-files the entry when the old deadline comes round). A
//! request that finds the timer lent out (an HTTP/2 connection's streams
//! overlap) times itself with a timer of its own.
//!
//! The kept timer may fire once after the connection's last request, when
//! that request's deadline passes: a spurious wake-up of the connection's
//! task, which then finds nothing to do.

use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// One connection's upstream timer, while no request holds it. Cheap to
/// clone: clones share it.
#[derive(Clone, Default)]
pub(crate) struct ConnTimer {
    home: Arc<Mutex<Option<Pin<Box<Sleep>>>>>,
}

impl std::fmt::Debug for ConnTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnTimer").finish_non_exhaustive()
    }
}

impl ConnTimer {
    /// The timer, due `total` from now, lent until the returned deadline is
    /// dropped; a new one when it is lent out already (or not made yet).
    /// Must run inside the runtime that serves the connection.
    pub(crate) fn arm(&self, total: Duration) -> Deadline {
        let at = Instant::now() + total;
        let lent = self.home.lock().take();
        let sleep = match lent {
            Some(mut sleep) => {
                sleep.as_mut().reset(at);
                sleep
            }
            None => Box::pin(tokio::time::sleep_until(at)),
        };
        Deadline {
            sleep: Some(sleep),
            home: Arc::clone(&self.home),
        }
    }
}

/// A lent timer: resolves when the request's time is up, and goes back to
/// its connection when dropped.
pub(crate) struct Deadline {
    sleep: Option<Pin<Box<Sleep>>>,
    home: Arc<Mutex<Option<Pin<Box<Sleep>>>>>,
}

impl Future for Deadline {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.sleep.as_mut() {
            Some(sleep) => sleep.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        if let Some(sleep) = self.sleep.take() {
            let mut home = self.home.lock();
            if home.is_none() {
                *home = Some(sleep);
            }
        }
    }
}

/// `fut`'s output, or `Err(())` when `deadline` passes first (as
/// `tokio::time::timeout`: the future is polled first).
pub(crate) async fn within<F: Future>(deadline: Deadline, fut: F) -> Result<F::Output, ()> {
    let mut fut = std::pin::pin!(fut);
    let mut deadline = deadline;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = fut.as_mut().poll(cx) {
            return Poll::Ready(Ok(out));
        }
        Pin::new(&mut deadline).poll(cx).map(Err)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_timer_serves_the_requests_of_a_connection_in_turn() {
        let timer = ConnTimer::default();
        // The first request makes it; the next ones get the same one back.
        let first = timer.arm(Duration::from_secs(30));
        let made: *const Sleep = &**first.sleep.as_ref().expect("lent");
        drop(first);
        for _ in 0..3 {
            let again = timer.arm(Duration::from_secs(30));
            assert!(std::ptr::eq(&**again.sleep.as_ref().expect("lent"), made));
            assert_eq!(within(again, async { 7 }).await, Ok(7));
        }
        // While it is lent, a second request has one of its own, and only
        // one goes back.
        let a = timer.arm(Duration::from_secs(1));
        let b = timer.arm(Duration::from_secs(1));
        assert!(!std::ptr::eq(&**b.sleep.as_ref().expect("lent"), made));
        drop(a);
        drop(b);
        assert!(timer.home.lock().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_holds_after_a_later_and_an_earlier_one() {
        let timer = ConnTimer::default();
        // Moved later, then earlier: each request is cut at its own time.
        for total in [
            Duration::from_secs(5),
            Duration::from_secs(60),
            Duration::from_millis(10),
        ] {
            let start = Instant::now();
            let out = within(timer.arm(total), std::future::pending::<()>()).await;
            assert_eq!(out, Err(()));
            assert_eq!(Instant::now() - start, total);
        }
        // A request that answers in time is not cut, and a fired timer
        // serves the next request.
        let out = within(
            timer.arm(Duration::from_secs(1)),
            tokio::time::sleep(Duration::from_millis(999)),
        )
        .await;
        assert_eq!(out, Ok(()));
    }
}
