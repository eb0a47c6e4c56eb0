//! Counting a refusal in the metrics and logging it, once, where it is
//! rendered ([`Rejection::record`]).
//!
//! A limit's refusal (a 429 of a layer, a spent tenant budget of the LLM
//! pipeline) and a limiter that could not decide are counted per resource
//! and logged under the target `pressure::denial`, at most
//! `denialLog.linesPerResourcePerSecond` lines per resource per second
//! (`crate::metrics::denial_log`); a refused credential is counted by
//! reason; an upstream failure by cause, and logged; a fault of the
//! gateway logged. The rest — a client's malformed request — is counted
//! by status with every answer (`crate::metrics::traffic`).

use super::{Level, RateLimited, Rejection, UpstreamFailure};
use crate::metrics::{GatewayMetrics, Layer};
use crate::resources;
use pressure_llm::pipeline::LlmError;
use std::time::Duration;

/// A `tracing` event at a [`Level`] known only at run time.
macro_rules! log_at {
    ($level:expr, $($event:tt)+) => {
        match $level {
            Level::Info => tracing::info!($($event)+),
            Level::Warn => tracing::warn!($($event)+),
            Level::Error => tracing::error!($($event)+),
        }
    };
}

impl Rejection {
    /// Counts it in `metrics` and logs it (one structured line; denials at
    /// `info` under the target `pressure::denial`, at most `denial_lines`
    /// per resource per second, see `crate::metrics::denial_log`; 0: no
    /// bound).
    pub fn record(&self, metrics: &GatewayMetrics, denial_lines: u32) {
        match self {
            Self::RateLimited(r) => denied(metrics, denial_lines, &Denied::of(r)),
            Self::Llm(e) => {
                if let Some(d) = Denied::spent(e) {
                    denied(metrics, denial_lines, &d);
                }
            }
            Self::LimiterUnavailable {
                resource,
                layer,
                reason,
                ..
            } => {
                metrics.limiter_unavailable(*layer);
                if metrics.denial_logs().unavailable.admit(
                    resource,
                    *layer,
                    denial_lines,
                    tokio::time::Instant::now(),
                ) {
                    log_at!(
                        self.describe().level,
                        target: "pressure::denial",
                        resource = resource.as_str(),
                        layer = layer.as_str(),
                        reason = reason.as_str(),
                        "limiter unavailable"
                    );
                }
            }
            Self::Unauthorized(e) => metrics.unauthorized(e.reason()),
            Self::ServiceToken { .. } => metrics.unauthorized("service_token"),
            Self::TooManyPermits { max } => {
                log_at!(
                    self.describe().level,
                    max_permits = max,
                    "decision listener: too many permits held"
                );
            }
            Self::UpstreamUnavailable {
                upstream,
                reason,
                kind,
            } => {
                metrics.upstream_error("unavailable");
                metrics.traffic().upstream_failure(upstream, kind.as_str());
                log_at!(
                    self.describe().level,
                    upstream = upstream.as_str(),
                    error = reason.as_str(),
                    "cannot connect to upstream"
                );
            }
            Self::UpstreamError {
                upstream,
                reason,
                kind,
            } => {
                metrics.upstream_error("error");
                metrics.traffic().upstream_failure(upstream, kind.as_str());
                log_at!(
                    self.describe().level,
                    upstream = upstream.as_str(),
                    error = reason.as_str(),
                    "upstream exchange failed"
                );
            }
            Self::UpstreamTimeout { upstream, after_ms } => {
                metrics.upstream_error("timeout");
                metrics
                    .traffic()
                    .upstream_failure(upstream, UpstreamFailure::Timeout.as_str());
                log_at!(
                    self.describe().level,
                    upstream = upstream.as_str(),
                    total_ms = after_ms,
                    "upstream did not answer in time"
                );
            }
            Self::Internal(m) => log_at!(self.describe().level, error = m.as_str(), "internal error"),
            Self::Event { rejection, .. } => rejection.record(metrics, denial_lines),
            // A client's fault: counted by status with every answer.
            Self::BadRequest(_)
            | Self::UseCaseNotAllowed(_)
            | Self::InvalidRequest { .. }
            | Self::NotFound(_)
            | Self::RequestTimeout { .. }
            | Self::PayloadTooLarge { .. }
            | Self::UnknownResource(_)
            | Self::PermitGone => {}
        }
    }
}

/// A refusal by a limit, as counted and logged.
struct Denied<'a> {
    resource: &'a str,
    layer: Layer,
    wait: Duration,
    namespace_id: Option<&'a str>,
    dimension: &'static str,
}

impl<'a> Denied<'a> {
    /// A layer's 429.
    fn of(r: &'a RateLimited) -> Self {
        Self {
            resource: &r.resource,
            layer: r.layer,
            wait: r.wait,
            namespace_id: r.namespace_id.as_deref(),
            dimension: r.dimension.as_str(),
        }
    }

    /// A tenant's budget the pipeline found spent (`BudgetExceeded`): the
    /// tenant layer's limit, refused later (any other pipeline failure is
    /// counted by the pipeline's own `pressure_llm_errors_total`).
    fn spent(e: &'a LlmError) -> Option<Self> {
        let LlmError::BudgetExceeded {
            resource,
            dimension,
            retry_after,
            ..
        } = e
        else {
            return None;
        };
        Some(Self {
            resource,
            layer: Layer::Tenant,
            wait: *retry_after,
            namespace_id: resource.strip_prefix(resources::TENANT_PREFIX),
            dimension: dimension.as_str(),
        })
    }
}

/// Counts a denial and writes its `request denied` line, within the
/// resource's budget of lines.
fn denied(metrics: &GatewayMetrics, denial_lines: u32, d: &Denied<'_>) {
    metrics.denied(d.resource, d.layer);
    if !metrics
        .denial_logs()
        .denied
        .admit(d.resource, d.layer, denial_lines, tokio::time::Instant::now())
    {
        return;
    }
    tracing::info!(
        target: "pressure::denial",
        resource = d.resource,
        layer = d.layer.as_str(),
        wait_time_ms = u64::try_from(d.wait.as_millis()).unwrap_or(u64::MAX),
        namespace_id = d.namespace_id.unwrap_or(""),
        dimension = d.dimension,
        "request denied"
    );
}

impl Rejection {
    /// Records the refusal on the request's server span: an event
    /// `pressure.admission` (layer, resource, dimension, result, wait) for
    /// a limit, and the span's `error.type` otherwise.
    pub(crate) fn trace(&self, span: &mut pressure_core::trace::Span) {
        use pressure_core::trace::Value;
        let wait_ms = |d: std::time::Duration| Value::from(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        match self {
            Self::RateLimited(r) => {
                let mut attrs = vec![
                    ("pressure.result".into(), Value::from("refused")),
                    ("pressure.layer".into(), Value::from(r.layer.as_str())),
                    ("pressure.resource".into(), Value::from(r.resource.clone())),
                    ("pressure.dimension".into(), Value::from(r.dimension.as_str())),
                    ("pressure.wait_ms".into(), wait_ms(r.wait)),
                ];
                if let Some(ns) = &r.namespace_id {
                    attrs.push(("pressure.tenant".into(), Value::from(ns.clone())));
                }
                span.event("pressure.admission", attrs);
            }
            Self::LimiterUnavailable {
                resource,
                layer,
                retry_after,
                ..
            } => span.event(
                "pressure.admission",
                vec![
                    ("pressure.result".into(), Value::from("unavailable")),
                    ("pressure.layer".into(), Value::from(layer.as_str())),
                    ("pressure.resource".into(), Value::from(resource.clone())),
                    ("pressure.wait_ms".into(), wait_ms(*retry_after)),
                ],
            ),
            _ => {}
        }
    }
}
