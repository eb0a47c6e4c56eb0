//! [`WhenWoken`]: a future polled only when its own waker has fired.
//!
//! A connection's task awaits its HTTP connection beside a watchdog and a
//! stop signal. Every wake of the task polls all three, though the socket
//! woke it: a timer and a watch channel polled for nothing, twice or more
//! per request (about 600 instructions of the ~23,000 a proxied request
//! costs). Wrapped in [`WhenWoken`], the watchdog and the stop signal cost
//! a flag check on those wakes instead.

use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// What the inner future's waker sets: a flag, then wakes the task. The
/// task's waker stays registered across wakes (a wake does not take it),
/// so it is registered again only when the task's waker changes.
#[derive(Default)]
struct Flag {
    woken: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        if let Some(task) = &*self.task.lock() {
            task.wake_by_ref();
        }
    }
}

/// `inner`, polled on its first poll and then only after it asked to be
/// woken and was: the task's other wakes return `Pending` at once.
pub(crate) struct WhenWoken<F> {
    inner: Pin<Box<F>>,
    flag: Arc<Flag>,
    /// The flag as a waker, made once.
    waker: Waker,
    /// The task waker last registered with the flag (compared, not
    /// registered again, on every poll).
    task: Option<Waker>,
}

impl<F: Future> WhenWoken<F> {
    /// `inner`, to be polled only when woken.
    pub(crate) fn new(inner: F) -> Self {
        let flag = Arc::new(Flag::default());
        flag.woken.store(true, Ordering::Relaxed);
        Self {
            inner: Box::pin(inner),
            waker: Waker::from(Arc::clone(&flag)),
            flag,
            task: None,
        }
    }
}

impl<F: Future> Future for WhenWoken<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        if !this.task.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            *this.flag.task.lock() = Some(cx.waker().clone());
            this.task = Some(cx.waker().clone());
        }
        if !this.flag.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        this.inner.as_mut().poll(&mut Context::from_waker(&this.waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    /// Counts its polls; ready once `ready` is set, waking through the
    /// waker it was last given when `wake` is called.
    struct Counted {
        polls: Arc<AtomicUsize>,
        ready: Arc<AtomicBool>,
        waker: Arc<std::sync::Mutex<Option<Waker>>>,
    }

    impl Future for Counted {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.ready.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            *self.waker.lock().unwrap_or_else(|e| e.into_inner()) = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    #[test]
    fn the_inner_future_is_polled_first_and_then_only_after_its_own_wake() {
        let polls = Arc::new(AtomicUsize::new(0));
        let ready = Arc::new(AtomicBool::new(false));
        let inner_waker = Arc::new(std::sync::Mutex::new(None::<Waker>));
        let mut fut = WhenWoken::new(Counted {
            polls: Arc::clone(&polls),
            ready: Arc::clone(&ready),
            waker: Arc::clone(&inner_waker),
        });
        let task = Arc::new(CountingWake::default());
        let task_waker = Waker::from(Arc::clone(&task));
        let mut cx = Context::from_waker(&task_waker);
        assert!(Pin::new(&mut fut).poll(&mut cx).is_pending());
        assert_eq!(
            polls.load(Ordering::SeqCst),
            1,
            "the first poll reaches the inner future"
        );
        // The task is woken by something else, ten times: not polled.
        for _ in 0..10 {
            assert!(Pin::new(&mut fut).poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::SeqCst), 1, "other wakes do not reach it");
        // Its own wakes, again and again: each wakes the task, and the
        // next poll reaches it.
        let wake_own = || {
            let own = inner_waker.lock().unwrap_or_else(|e| e.into_inner()).take();
            own.expect("the inner future kept a waker").wake();
        };
        for round in 1..=3 {
            wake_own();
            assert_eq!(
                task.wakes.load(Ordering::SeqCst),
                round,
                "its wake {round} wakes the task"
            );
            assert!(Pin::new(&mut fut).poll(&mut cx).is_pending());
            assert_eq!(polls.load(Ordering::SeqCst), 1 + round);
            assert!(Pin::new(&mut fut).poll(&mut cx).is_pending());
            assert_eq!(polls.load(Ordering::SeqCst), 1 + round, "and only that poll");
        }
        ready.store(true, Ordering::SeqCst);
        wake_own();
        assert!(Pin::new(&mut fut).poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 5);
    }

    #[derive(Default)]
    struct CountingWake {
        wakes: AtomicUsize,
    }
    impl Wake for CountingWake {
        fn wake(self: Arc<Self>) {
            self.wakes.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_new_task_waker_is_the_one_woken() {
        let ready = Arc::new(AtomicBool::new(false));
        let inner_waker = Arc::new(std::sync::Mutex::new(None::<Waker>));
        let mut fut = WhenWoken::new(Counted {
            polls: Arc::new(AtomicUsize::new(0)),
            ready,
            waker: Arc::clone(&inner_waker),
        });
        let first = Arc::new(CountingWake::default());
        let second = Arc::new(CountingWake::default());
        let w1 = Waker::from(Arc::clone(&first));
        let w2 = Waker::from(Arc::clone(&second));
        assert!(Pin::new(&mut fut)
            .poll(&mut Context::from_waker(&w1))
            .is_pending());
        assert!(Pin::new(&mut fut)
            .poll(&mut Context::from_waker(&w2))
            .is_pending());
        let own = inner_waker.lock().unwrap_or_else(|e| e.into_inner()).take();
        own.expect("the inner future kept a waker").wake();
        assert_eq!(first.wakes.load(Ordering::SeqCst), 0);
        assert_eq!(second.wakes.load(Ordering::SeqCst), 1);
    }

    /// A real timer inside, beside a future that keeps the task busy: the
    /// timer's wake reaches it (bounded: 5 s).
    #[tokio::test]
    async fn a_timer_inside_fires_beside_a_busy_future() {
        let task = async {
            let mut sleep = WhenWoken::new(tokio::time::sleep(Duration::from_millis(20)));
            let mut busy = 0u32;
            loop {
                tokio::select! {
                    biased;
                    () = &mut sleep => break,
                    () = tokio::task::yield_now() => busy += 1,
                }
            }
            busy
        };
        let busy = tokio::time::timeout(Duration::from_secs(5), task).await;
        assert!(
            busy.is_ok_and(|n| n > 0),
            "the sleep inside fired while the task was busy"
        );
    }
}
