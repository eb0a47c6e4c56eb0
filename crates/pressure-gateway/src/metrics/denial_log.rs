//! Denial log lines that a flood cannot turn into the bottleneck.
//!
//! The seed's rule stands: allowed requests log nothing and every refusal by
//! a limit logs one structured line (`pressure::denial`). At flood rates
//! that line would cost more than the 429 it describes (a callgrind profile
//! put the JSON line at about a third of a 429's instructions), so each
//! resource gets a budget of `gateway.denialLog.linesPerResourcePerSecond`
//! lines per one-second window. Past the budget, denials are only counted;
//! when the window ends, one summary line says how many lines were left
//! out (`denials suppressed`, with `resource`, `layer`, `suppressed`,
//! `window_ms`). The metrics still count every denial.
//!
//! The summary is written by whichever comes first: the resource's next
//! refusal after its window ended, or a flusher task that runs only while
//! some window holds suppressed lines (so a flood that stops still gets
//! its summary, about a second later).

use super::layer::Layer;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::time::Instant;

/// The length of one budget window.
pub(crate) const WINDOW: Duration = Duration::from_secs(1);

/// Above this many tracked resources, windows that ended with nothing
/// suppressed are swept on the next refusal (a tenant flood cannot grow
/// the map past the live resources).
const SWEEP_ABOVE: usize = 1_024;

/// Which lines a [`DenialLog`] bounds: its summary line says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineKind {
    /// `request denied` (a limit refused; info).
    Denied,
    /// `limiter unavailable` (the store could not decide; warn).
    Unavailable,
}

/// One resource's window closed with lines left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Summary {
    /// The resource.
    pub resource: String,
    /// The layer that charged it.
    pub layer: Layer,
    /// Lines left out in the window.
    pub suppressed: u64,
}

#[derive(Debug)]
struct Window {
    start: Instant,
    logged: u32,
    suppressed: u64,
    layer: Layer,
}

#[derive(Debug)]
struct Budgets {
    windows: HashMap<Box<str>, Window, ahash::RandomState>,
    /// Whether a flusher task is running (changed under the lock, so a
    /// suppression never misses a flusher that is about to exit).
    flusher: bool,
}

#[derive(Debug)]
struct LogState {
    kind: LineKind,
    state: Mutex<Budgets>,
}

/// Per-resource line budgets for one [`LineKind`] of line; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct DenialLog {
    inner: Arc<LogState>,
}

impl DenialLog {
    /// An empty log for lines of `kind`.
    pub(crate) fn new(kind: LineKind) -> Self {
        Self {
            inner: Arc::new(LogState {
                kind,
                state: Mutex::new(Budgets {
                    windows: HashMap::default(),
                    flusher: false,
                }),
            }),
        }
    }

    /// Whether a refusal of `resource` at `now` writes its own line, with
    /// `budget` lines per window (0: every refusal does). Writes the
    /// summary of the resource's previous window when that window ended
    /// with lines left out, and starts the flusher on the first line left
    /// out.
    pub(crate) fn admit(&self, resource: &str, layer: Layer, budget: u32, now: Instant) -> bool {
        if budget == 0 {
            return true;
        }
        let (admit, summary, spawn) = {
            let mut state = self.inner.state.lock();
            if state.windows.len() > SWEEP_ABOVE {
                state
                    .windows
                    .retain(|_, w| w.suppressed > 0 || now.duration_since(w.start) < WINDOW);
            }
            let window = match state.windows.get_mut(resource) {
                Some(w) => w,
                None => state
                    .windows
                    .entry(resource.into())
                    .or_insert_with(|| Window::new(now, layer)),
            };
            let mut summary = None;
            if now.duration_since(window.start) >= WINDOW {
                summary = window.close(resource);
                *window = Window::new(now, layer);
            }
            let admit = window.logged < budget;
            if admit {
                window.logged += 1;
            } else {
                window.suppressed += 1;
            }
            let spawn = !admit && !state.flusher;
            if spawn {
                state.flusher = true;
            }
            (admit, summary, spawn)
        };
        if let Some(s) = summary {
            self.write(&s);
        }
        if spawn {
            self.spawn_flusher();
        }
        admit
    }

    /// Closes every window that ended by `now`: the summaries of those that
    /// left lines out, and whether any window still holds suppressed lines
    /// (when none does, the flusher is marked stopped).
    fn drain(&self, now: Instant) -> (Vec<Summary>, bool) {
        let mut state = self.inner.state.lock();
        let mut out = Vec::new();
        state.windows.retain(|resource, w| {
            if now.duration_since(w.start) < WINDOW {
                return true;
            }
            out.extend(w.close(resource));
            false
        });
        let pending = state.windows.values().any(|w| w.suppressed > 0);
        if !pending {
            state.flusher = false;
        }
        (out, pending)
    }

    /// Writes the summary line of `s`.
    fn write(&self, s: &Summary) {
        write_summary(self.inner.kind, s);
    }

    /// Starts the task that writes summaries of windows nobody refused
    /// after; it ends when no window holds suppressed lines, or with the
    /// log. Outside a runtime (never on the request path) nothing starts
    /// and summaries wait for the resource's next refusal.
    fn spawn_flusher(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.inner.state.lock().flusher = false;
            return;
        };
        let weak: Weak<LogState> = Arc::downgrade(&self.inner);
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(WINDOW / 4).await;
                let Some(inner) = weak.upgrade() else { return };
                let log = DenialLog { inner };
                let (summaries, pending) = log.drain(Instant::now());
                for s in &summaries {
                    log.write(s);
                }
                if !pending {
                    return;
                }
            }
        });
    }
}

/// Writes the summary line of `s` for lines of `kind`.
fn write_summary(kind: LineKind, s: &Summary) {
    let window_ms = u64::try_from(WINDOW.as_millis()).unwrap_or(u64::MAX);
    // The same fields at the kind's level; a macro because tracing fixes an
    // event's level where it is written.
    macro_rules! summary_event {
        ($level:ident, $message:literal) => {
            tracing::$level!(
                target: "pressure::denial",
                resource = s.resource.as_str(),
                layer = s.layer.as_str(),
                suppressed = s.suppressed,
                window_ms,
                $message
            )
        };
    }
    match kind {
        LineKind::Denied => summary_event!(info, "denials suppressed"),
        LineKind::Unavailable => summary_event!(warn, "limiter unavailable lines suppressed"),
    }
}

impl Drop for LogState {
    /// A gateway that stops mid-flood still says what it left out.
    fn drop(&mut self) {
        let state = self.state.get_mut();
        for (resource, w) in state.windows.drain() {
            if let Some(s) = w.close(&resource) {
                write_summary(self.kind, &s);
            }
        }
    }
}

/// The two bounded kinds of line of one gateway, kept across reloads.
#[derive(Debug, Clone)]
pub(crate) struct DenialLogs {
    /// `request denied`.
    pub denied: DenialLog,
    /// `limiter unavailable`.
    pub unavailable: DenialLog,
}

impl Default for DenialLogs {
    fn default() -> Self {
        Self {
            denied: DenialLog::new(LineKind::Denied),
            unavailable: DenialLog::new(LineKind::Unavailable),
        }
    }
}

impl Window {
    fn new(start: Instant, layer: Layer) -> Self {
        Self {
            start,
            logged: 0,
            suppressed: 0,
            layer,
        }
    }

    fn close(&self, resource: &str) -> Option<Summary> {
        (self.suppressed > 0).then(|| Summary {
            resource: resource.to_owned(),
            layer: self.layer,
            suppressed: self.suppressed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: &str = "gateway:route:hooks";

    #[test]
    fn within_the_budget_every_refusal_logs() {
        let log = DenialLog::new(LineKind::Denied);
        let t = Instant::now();
        assert!((0..5).all(|_| log.admit(R, Layer::PreAuth, 5, t)));
        assert!(
            !log.admit(R, Layer::PreAuth, 5, t),
            "the sixth is over the budget"
        );
    }

    #[test]
    fn a_zero_budget_logs_everything() {
        let log = DenialLog::new(LineKind::Denied);
        let t = Instant::now();
        assert!((0..1_000).all(|_| log.admit(R, Layer::PreAuth, 0, t)));
        assert!(log.inner.state.lock().windows.is_empty());
    }

    #[test]
    fn each_resource_has_its_own_budget_and_windows_restart() {
        let log = DenialLog::new(LineKind::Denied);
        let t = Instant::now();
        let logged = |r: &str, at: Instant| (0..10).filter(|_| log.admit(r, Layer::Tenant, 3, at)).count();
        assert_eq!(logged(R, t), 3);
        assert_eq!(logged("gateway:tenant:a", t), 3);
        assert_eq!(logged(R, t + WINDOW / 2), 0, "same window");
        assert_eq!(logged(R, t + WINDOW), 3, "a new window");
    }

    #[test]
    fn drain_reports_what_was_left_out_once() {
        let log = DenialLog::new(LineKind::Denied);
        let t = Instant::now();
        for _ in 0..25 {
            log.admit(R, Layer::PreAuth, 5, t);
        }
        log.admit("gateway:route:quiet", Layer::PreAuth, 5, t);
        let (early, pending) = log.drain(t + WINDOW / 2);
        assert!(early.is_empty() && pending, "the window is still open");
        let (done, pending) = log.drain(t + WINDOW);
        assert_eq!(
            done,
            [Summary {
                resource: R.into(),
                layer: Layer::PreAuth,
                suppressed: 20
            }]
        );
        assert!(!pending);
        assert!(!log.inner.state.lock().flusher);
        assert!(log.drain(t + 2 * WINDOW).0.is_empty(), "reported once");
    }

    #[test]
    fn idle_windows_are_swept_past_the_bound() {
        let log = DenialLog::new(LineKind::Denied);
        let t = Instant::now();
        for i in 0..=SWEEP_ABOVE {
            log.admit(&format!("gateway:tenant:{i}"), Layer::Tenant, 1, t);
        }
        log.admit(R, Layer::PreAuth, 1, t + WINDOW);
        assert_eq!(log.inner.state.lock().windows.len(), 1);
    }

    #[test]
    fn a_log_dropped_mid_window_writes_its_summaries() {
        use std::sync::Mutex as StdMutex;
        let out = Arc::new(StdMutex::new(Vec::<u8>::new()));
        let sink = Arc::clone(&out);
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_writer(move || Sink(Arc::clone(&sink)))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let log = DenialLog::new(LineKind::Denied);
            let t = Instant::now();
            for _ in 0..7 {
                log.admit(R, Layer::PreAuth, 3, t);
            }
        });
        let text = String::from_utf8(out.lock().expect("sink").clone()).expect("utf-8");
        assert!(text.contains("denials suppressed"), "{text}");
        assert!(text.contains(r#""suppressed":4"#), "{text}");
    }

    /// A writer into a shared buffer, for the test subscriber.
    struct Sink(Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("sink").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_flusher_writes_the_summary_after_the_flood_stops() {
        let log = DenialLog::new(LineKind::Denied);
        let t = Instant::now();
        for _ in 0..10 {
            log.admit(R, Layer::PreAuth, 2, t);
        }
        assert!(
            log.inner.state.lock().flusher,
            "started on the first line left out"
        );
        tokio::time::sleep(2 * WINDOW).await;
        let state = log.inner.state.lock();
        assert!(state.windows.is_empty(), "the flusher closed the window");
        assert!(!state.flusher, "and stopped");
    }
}
