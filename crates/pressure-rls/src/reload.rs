//! Live reload: the config files are read again on SIGHUP and, polled,
//! whenever their contents change (an edit in place, or a symlink swap as
//! Kubernetes ConfigMaps do). A new plan replaces the old one whole; an
//! invalid file changes nothing and is logged and counted. Counters are
//! kept: see [`crate::RateLimiter::set_plan`].

use crate::config::Plan;
use crate::error::ConfigError;
use crate::service::RateLimiter;
use pressure_core::Backend;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How often the files are polled for a change.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(500);

/// Reloads a [`RateLimiter`]'s plan from its files.
#[derive(Debug)]
pub struct Reloader<B: Backend> {
    files: Vec<PathBuf>,
    limiter: Arc<RateLimiter<B>>,
    /// The texts the plan in force was built from.
    last: parking_lot::Mutex<Vec<(String, String)>>,
}

impl<B: Backend> Reloader<B> {
    /// A reloader of `files` into `limiter`, whose plan was built from
    /// `texts` (what [`read`] returned).
    pub fn new(files: Vec<PathBuf>, limiter: Arc<RateLimiter<B>>, texts: Vec<(String, String)>) -> Self {
        Self {
            files,
            limiter,
            last: parking_lot::Mutex::new(texts),
        }
    }

    /// Reads the files and applies them if they changed: `Ok(true)` when a
    /// new plan is in force, `Ok(false)` when nothing changed.
    pub fn reload(&self) -> Result<bool, ConfigError> {
        let texts = read(&self.files)?;
        let mut last = self.last.lock();
        if *last == texts {
            return Ok(false);
        }
        let plan = match Plan::from_texts(&texts) {
            Ok(p) => p,
            Err(e) => {
                // Not again until the files change once more.
                *last = texts;
                return Err(e);
            }
        };
        self.limiter.set_plan(plan);
        *last = texts;
        Ok(true)
    }

    /// [`Reloader::reload`], logged and counted.
    pub fn reload_logged(&self, why: &'static str) {
        let m = self.limiter.metrics();
        match self.reload() {
            Ok(true) => {
                m.reloads.fetch_add(1, Ordering::Relaxed);
                tracing::info!(trigger = why, "rate limit config reloaded");
            }
            Ok(false) => {}
            Err(e) => {
                m.reload_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(trigger = why, error = %e, "rate limit config not reloaded; the previous one stays");
            }
        }
    }

    /// Polls the files every `interval` forever (spawn it).
    pub async fn watch(self: Arc<Self>, interval: Duration) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.reload_logged("file change");
        }
    }

    /// Reloads on every SIGHUP forever (spawn it). Returns at once where
    /// there are no signals.
    pub async fn on_sighup(self: Arc<Self>) {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let Ok(mut hup) = signal(SignalKind::hangup()) else {
                return;
            };
            while hup.recv().await.is_some() {
                self.reload_logged("SIGHUP");
            }
        }
    }
}

/// The contents of `files`: `(name, text)` in order.
pub fn read(files: &[PathBuf]) -> Result<Vec<(String, String)>, ConfigError> {
    files
        .iter()
        .map(|f| {
            let name = f.display().to_string();
            std::fs::read_to_string(f)
                .map(|t| (name.clone(), t))
                .map_err(|e| ConfigError::new(name, "", format!("cannot read: {e}")))
        })
        .collect()
}
