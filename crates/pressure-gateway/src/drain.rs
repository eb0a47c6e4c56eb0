//! The one drain routine of a serving gateway, for [`crate::run`] (the
//! process, several server threads) and [`crate::Gateway::serve`] (one
//! task): what stops, and in which order, when the gateway is told to stop;
//! and [`Serving`], a listener serving in a background task.

use futures::future::BoxFuture;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long the decision listener is given to finish its requests.
const DECISIONS_GRACE: Duration = Duration::from_secs(2);

/// What a serving gateway stops when it drains.
pub(crate) struct Listening {
    /// Tells the proxy listener (its acceptor and server threads, and an
    /// embedded rate limit service) to stop accepting and drain.
    pub(crate) stop_proxy: watch::Sender<bool>,
    /// Done when the proxy has drained: the connections dropped at the end
    /// of the grace period.
    pub(crate) proxy_drained: BoxFuture<'static, usize>,
    /// The decision listener, when there is one.
    pub(crate) decisions: Option<Serving>,
    /// Tells the admin listener to stop.
    pub(crate) stop_admin: watch::Sender<bool>,
    /// The admin listener's task.
    pub(crate) admin: JoinHandle<crate::http::server::Drained>,
}

/// Drains `listening`: `set_draining` first (`/readyz` turns 503 ; the admin listener
/// answers on while the rest drains), then the proxy stops accepting and
/// lets its requests finish within its grace, then the decision listener,
/// then admin. Answers the connections dropped at the end of the grace
/// (each caller says so in its own words: the process logs its stop).
pub(crate) async fn drain(set_draining: impl FnOnce(), listening: Listening) -> usize {
    set_draining();
    let _ = listening.stop_proxy.send(true);
    let dropped = listening.proxy_drained.await;
    if let Some(decisions) = listening.decisions {
        decisions.stop(DECISIONS_GRACE).await;
    }
    let _ = listening.stop_admin.send(true);
    let _ = listening.admin.await;
    dropped
}

/// A gateway serving in a background task (from `Gateway::spawn`): what
/// tests, examples and the chaos stand hold to stop it. Dropping it aborts
/// the task at once; [`Serving::stop`] shuts down gracefully.
#[derive(Debug)]
pub struct Serving {
    pub(crate) stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub(crate) task: Option<tokio::task::JoinHandle<()>>,
}

impl Serving {
    /// Stops accepting, lets requests in flight finish, and waits at most
    /// `grace` for that; `false` when the grace ran out and the task was
    /// aborted.
    pub async fn stop(mut self, grace: std::time::Duration) -> bool {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let Some(mut task) = self.task.take() else {
            return true;
        };
        if tokio::time::timeout(grace, &mut task).await.is_ok() {
            return true;
        }
        task.abort();
        false
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}
