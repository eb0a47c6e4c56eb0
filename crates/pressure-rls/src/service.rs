//! The decision of one `ShouldRateLimit` call: [`RateLimiter`].
//!
//! 1. Each request descriptor is matched against its domain's tree
//!    ([`crate::config::Domain::rule_for`]), or takes the limit Envoy sent
//!    with it (`limit`, as upstream: it wins over the config).
//! 2. `replaces`: a matched rule whose `name` another matched rule
//!    replaces is dropped (answered OK, nothing counted), as upstream.
//! 3. Every remaining rule is charged in descriptor order on its own
//!    resource (`rls:<domain>:<entries>`, registered lazily and bounded),
//!    `hits_addend` units each.
//! 4. **All must pass, and a denial consumes nothing — reserve then
//!    refund:** when any descriptor (not in shadow mode) is over its limit,
//!    the grants already taken for this request are given back
//!    ([`pressure_core::ResourceHandle::refund`]). Each descriptor is
//!    still asked, so every status says truly whether that descriptor
//!    alone was over. Between a grant and its refund (one backend call)
//!    a concurrent request may see those units counted: the only
//!    inexactness, always on the refusing side, never above N.
//! 5. `shadow_mode`: counted like any rule, answered OK, counted in the
//!    `shadow_mode` metric when it would have refused.
//!
//! A call dropped half-way (Envoy's `timeout` passed and it went on
//! without an answer) keeps what it had reserved: Envoy's failure mode then
//! decides whether that request passes, and counting it can only refuse
//! sooner, never admit more than N. Every reservation and refund sent to
//! the store is settled by the backend even if the call is dropped.
//!
//! When the backend cannot decide (Redis down and failure mode `closed`,
//! or a backend error), the call fails with gRPC `UNAVAILABLE` after giving
//! back what it took: Envoy's `failure_mode_deny` then decides (deny with
//! 500, or let the request through), which is the knob Envoy users already
//! set for an unreachable rate limit service. Failure modes `open` and
//! `local` answer as they do everywhere in pressure (allow; count locally).

use crate::config::{Plan, Quota, Rule, TimeUnit};
use crate::headers::{self, HeaderQuota};
use crate::id::resource_id;
use crate::metrics::{Metrics, Series};
use crate::proto::{self, Code, DescriptorStatus, RateLimitRequest, RateLimitResponse};
use arc_swap::ArcSwap;
use pressure_core::{
    AcquireOptions, Acquisition, Backend, Dimension, Error as CoreError, Grant, LimitTemplate,
    ResourceBroker, ResourceHandle,
};
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The share of a limit at which admitted units count as `near_limit`
/// (upstream's default, 80 %), in percent.
pub(crate) const NEAR_LIMIT_PERCENT: u64 = 80;

/// Why a call got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecisionError {
    /// The request is malformed (empty domain, no descriptors).
    #[error("{0}")]
    InvalidArgument(String),
    /// The backend could not decide and its failure mode refuses.
    #[error("rate limit backend unavailable: {0}")]
    Unavailable(String),
}

impl From<DecisionError> for tonic::Status {
    fn from(e: DecisionError) -> Self {
        match e {
            DecisionError::InvalidArgument(m) => tonic::Status::invalid_argument(m),
            DecisionError::Unavailable(m) => tonic::Status::unavailable(m),
        }
    }
}

/// Envoy's rate limit service on a pressure broker: the plan (swapped whole
/// on reload), the broker holding every descriptor's counter, the metrics.
#[derive(Debug)]
pub struct RateLimiter<B: Backend> {
    broker: ResourceBroker<B>,
    plan: ArcSwap<Plan>,
    metrics: Arc<Metrics>,
}

/// One descriptor on its way through a decision.
enum Slot<B: Backend> {
    /// No rule applies: OK.
    Free,
    /// The rule answers without counting (unlimited, or 0 per unit).
    Fixed(Arc<Rule>, Arc<Series>),
    /// Counted on a resource.
    Counted {
        rule: Arc<Rule>,
        series: Arc<Series>,
        handle: ResourceHandle<B>,
        hits: u64,
        outcome: Outcome,
    },
}

enum Outcome {
    Granted(Grant),
    Refused(Duration),
    /// Never fits (`hits_addend` above the limit).
    TooLarge,
}

impl<B: Backend> RateLimiter<B> {
    /// A service answering by `plan` on `broker`.
    pub fn new(broker: ResourceBroker<B>, plan: Plan) -> Self {
        Self {
            broker,
            plan: ArcSwap::from_pointee(plan),
            metrics: Arc::new(Metrics::default()),
        }
    }

    /// Replaces the plan (a reload). Calls in flight finish on the plan
    /// they started with. Counters are kept: a descriptor keeps its
    /// resource id, and a rule whose limits changed changes its
    /// resources' limits in place on their next use (usage carried over).
    pub fn set_plan(&self, plan: Plan) {
        self.plan.store(Arc::new(plan));
    }

    /// The plan in force.
    pub fn plan(&self) -> Arc<Plan> {
        self.plan.load_full()
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The broker.
    pub fn broker(&self) -> &ResourceBroker<B> {
        &self.broker
    }

    /// Answers one `ShouldRateLimit` call (module docs).
    pub async fn should_rate_limit(
        &self,
        req: &RateLimitRequest,
    ) -> Result<RateLimitResponse, DecisionError> {
        if req.domain.is_empty() {
            return Err(DecisionError::InvalidArgument(
                "rate limit domain must not be empty".into(),
            ));
        }
        if req.descriptors.is_empty() {
            return Err(DecisionError::InvalidArgument(
                "rate limit descriptor list must not be empty".into(),
            ));
        }
        self.metrics.requests.fetch_add(1, Ordering::Relaxed);
        let plan = self.plan.load();
        let domain = plan.domain(&req.domain);
        // 1. Rules.
        let mut rules: Vec<Option<(Arc<Rule>, bool)>> = Vec::with_capacity(req.descriptors.len());
        for d in &req.descriptors {
            let rule = match (domain, d.limit) {
                (None, _) => None,
                (Some(_), Some(o)) => override_rule(o).map(|r| (r, true)),
                (Some(dom), None) => dom.rule_for(&d.entries).map(|r| (Arc::clone(r), false)),
            };
            rules.push(rule);
        }
        // 2. Replaces.
        let replaced: HashSet<&str> = rules
            .iter()
            .flatten()
            .flat_map(|(r, _)| r.replaces.iter().map(String::as_str))
            .collect();
        let replaced: HashSet<String> = replaced.into_iter().map(str::to_owned).collect();
        // 3. Charge.
        let request_hits = u64::from(req.hits_addend.max(1));
        let mut slots: Vec<Slot<B>> = Vec::with_capacity(rules.len());
        for (d, rule) in req.descriptors.iter().zip(rules) {
            let Some((rule, is_override)) = rule else {
                slots.push(Slot::Free);
                continue;
            };
            if !rule.name.is_empty() && replaced.contains(&rule.name) {
                slots.push(Slot::Free);
                continue;
            }
            let series = self.series(&req.domain, &rule, &d.entries);
            let template = match &rule.quota {
                Quota::Limited { template } => template,
                Quota::Blocked | Quota::Unlimited => {
                    slots.push(Slot::Fixed(rule, series));
                    continue;
                }
            };
            let hits = d.hits_addend.map_or(request_hits, |h| h.value.max(1));
            let id = resource_id(&req.domain, &d.entries, is_override);
            let handle = match self.handle(&id, template) {
                Ok(h) => h,
                Err(e) => {
                    self.give_back(&slots).await;
                    return Err(self.unavailable(e));
                }
            };
            let outcome = match handle.try_acquire(AcquireOptions::default().requests(hits)).await {
                Ok(Acquisition::Granted(permit)) => Outcome::Granted(*permit.grant()),
                Ok(Acquisition::Denied(denial)) if denial.is_unavailable() => {
                    self.give_back(&slots).await;
                    return Err(self.unavailable("the store cannot be reached (failure mode closed)"));
                }
                Ok(Acquisition::Denied(denial)) => Outcome::Refused(denial.wait),
                Err(CoreError::DemandTooLarge { .. }) => Outcome::TooLarge,
                Err(e) => {
                    self.give_back(&slots).await;
                    return Err(self.unavailable(e));
                }
            };
            slots.push(Slot::Counted {
                rule,
                series,
                handle,
                hits,
                outcome,
            });
        }
        // 4. All must pass.
        let over = slots.iter().any(|s| match s {
            Slot::Free => false,
            Slot::Fixed(rule, _) => !rule.shadow && matches!(rule.quota, Quota::Blocked),
            Slot::Counted { rule, outcome, .. } => !rule.shadow && !matches!(outcome, Outcome::Granted(_)),
        });
        if over {
            self.give_back(&slots).await;
        }
        Ok(self.answer(&slots, over, request_hits).await)
    }

    /// The handle of `id`, registering it on first use; a rule whose
    /// limits changed in a reload changes them on the resource (usage
    /// kept).
    fn handle(&self, id: &str, template: &LimitTemplate) -> Result<ResourceHandle<B>, CoreError> {
        let h = self.broker.lazy_limit(id, template)?;
        if h.limits() != template.limits() {
            self.broker.set_limits(id, template.limits().clone())?;
        }
        Ok(h)
    }

    fn series(&self, domain: &str, rule: &Rule, entries: &[proto::Entry]) -> Arc<Series> {
        if !rule.detailed_metric {
            return self.metrics.series(domain, &rule.metric, &rule.metric);
        }
        let detailed = entries
            .iter()
            .map(|e| format!("{}_{}", e.key, e.value))
            .collect::<Vec<_>>()
            .join(".");
        self.metrics.series(domain, &detailed, &rule.metric)
    }

    fn unavailable(&self, e: impl std::fmt::Display) -> DecisionError {
        self.metrics.unavailable.fetch_add(1, Ordering::Relaxed);
        DecisionError::Unavailable(e.to_string())
    }

    /// Gives back every grant in `slots` (the request is refused).
    async fn give_back(&self, slots: &[Slot<B>]) {
        for s in slots {
            if let Slot::Counted {
                handle,
                outcome: Outcome::Granted(grant),
                ..
            } = s
            {
                if let Err(e) = handle.refund(grant).await {
                    self.metrics.refund_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(resource = handle.id(), error = %e, "could not give back a grant of a refused request");
                }
            }
        }
    }

    async fn answer(&self, slots: &[Slot<B>], over: bool, _hits: u64) -> RateLimitResponse {
        let mut statuses = Vec::with_capacity(slots.len());
        let mut quotas = Vec::with_capacity(slots.len());
        let mut retry: Option<Duration> = None;
        for s in slots {
            let status = match s {
                Slot::Free => DescriptorStatus {
                    code: Code::Ok.into(),
                    current_limit: None,
                    limit_remaining: 0,
                    duration_until_reset: None,
                },
                Slot::Fixed(rule, series) => fixed_status(rule, series, &mut retry),
                Slot::Counted {
                    rule,
                    series,
                    handle,
                    hits,
                    outcome,
                } => {
                    let (status, quota) =
                        counted_status(rule, series, handle, *hits, outcome, over, &mut retry).await;
                    quotas.push(quota);
                    status
                }
            };
            statuses.push(status);
        }
        RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok }.into(),
            statuses,
            response_headers_to_add: headers::render(&quotas, if over { retry } else { None }),
            request_headers_to_add: Vec::new(),
        }
    }
}

/// The status of a rule that answers without counting (unlimited, or 0
/// per unit), counted in its series; a refusal's unit length goes into
/// `retry`.
fn fixed_status(rule: &Rule, series: &Series, retry: &mut Option<Duration>) -> DescriptorStatus {
    let blocked = matches!(rule.quota, Quota::Blocked);
    series.total_hits.fetch_add(1, Ordering::Relaxed);
    if blocked {
        series.over_limit.fetch_add(1, Ordering::Relaxed);
        if rule.shadow {
            series.shadow_mode.fetch_add(1, Ordering::Relaxed);
        }
    } else {
        series.within_limit.fetch_add(1, Ordering::Relaxed);
    }
    let length = rule.unit.map(TimeUnit::length);
    if blocked && !rule.shadow {
        *retry = (*retry).max(length);
    }
    DescriptorStatus {
        code: if blocked && !rule.shadow {
            Code::OverLimit
        } else {
            Code::Ok
        }
        .into(),
        current_limit: blocked.then(|| current_limit(rule)),
        limit_remaining: if blocked { 0 } else { u32::MAX },
        duration_until_reset: if blocked { length.map(Into::into) } else { None },
    }
}

/// The status and the `RateLimit` header quota of a counted descriptor,
/// counted in its series (`over`: the request as a whole is refused); a
/// refusal's wait goes into `retry`.
async fn counted_status<B: Backend>(
    rule: &Rule,
    series: &Series,
    handle: &ResourceHandle<B>,
    hits: u64,
    outcome: &Outcome,
    over: bool,
    retry: &mut Option<Duration>,
) -> (DescriptorStatus, HeaderQuota) {
    series.total_hits.fetch_add(hits, Ordering::Relaxed);
    let limit = u64::from(rule.requests_per_unit);
    let window = rule.unit.map_or(Duration::ZERO, TimeUnit::length);
    let (code, remaining, reset) = match outcome {
        Outcome::Granted(_) => {
            // Read after the grant (and any refund): one read of the
            // backend's state.
            let used = match handle.usage().await {
                Ok(u) => u.dimensions.first().map_or(0, |(_, n)| *n),
                Err(_) => 0,
            };
            let remaining = limit.saturating_sub(used);
            if !over {
                series.within_limit.fetch_add(hits, Ordering::Relaxed);
                if used * 100 >= limit * NEAR_LIMIT_PERCENT {
                    series.near_limit.fetch_add(hits, Ordering::Relaxed);
                }
            }
            (
                Code::Ok,
                remaining,
                if used == 0 { Duration::ZERO } else { window },
            )
        }
        Outcome::Refused(wait) => refusal(rule, series, hits, *wait, retry),
        Outcome::TooLarge => refusal(rule, series, hits, window, retry),
    };
    let quota = HeaderQuota {
        name: dimension_name(rule.unit),
        quota: limit,
        window_secs: window.as_secs(),
        remaining,
        reset_secs: headers::ceil_secs(reset),
    };
    let status = DescriptorStatus {
        code: code.into(),
        current_limit: Some(current_limit(rule)),
        limit_remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
        duration_until_reset: Some(reset.into()),
    };
    (status, quota)
}

/// A refusal of `hits` counted in `series`: `(code, remaining, reset)`,
/// OK in shadow mode, else OVER_LIMIT with `wait` also put into `retry`.
fn refusal(
    rule: &Rule,
    series: &Series,
    hits: u64,
    wait: Duration,
    retry: &mut Option<Duration>,
) -> (Code, u64, Duration) {
    series.over_limit.fetch_add(hits, Ordering::Relaxed);
    if rule.shadow {
        series.shadow_mode.fetch_add(hits, Ordering::Relaxed);
        return (Code::Ok, 0, wait);
    }
    *retry = (*retry).max(Some(wait));
    (Code::OverLimit, 0, wait)
}

/// The rule of a limit Envoy sent with a descriptor; `None` for a unit
/// this service cannot count (answered OK, as upstream skips it).
fn override_rule(o: proto::RateLimitOverride) -> Option<Arc<Rule>> {
    let unit = TimeUnit::from_proto(o.unit)?;
    let quota = if o.requests_per_unit == 0 {
        Quota::Blocked
    } else {
        let limits = unit.limits(o.requests_per_unit);
        Quota::Limited {
            template: LimitTemplate::new(&limits).ok()?,
        }
    };
    Some(Arc::new(Rule {
        name: String::new(),
        replaces: Vec::new(),
        unit: Some(unit),
        requests_per_unit: o.requests_per_unit,
        quota,
        shadow: false,
        detailed_metric: false,
        metric: "override".into(),
    }))
}

fn current_limit(rule: &Rule) -> proto::RateLimit {
    proto::RateLimit {
        name: rule.name.clone(),
        requests_per_unit: rule.requests_per_unit,
        unit: rule.unit.map_or(proto::Unit::Unknown, TimeUnit::to_proto).into(),
    }
}

fn dimension_name(unit: Option<TimeUnit>) -> &'static str {
    unit.map_or(Dimension::RequestsPerMinute, TimeUnit::dimension)
        .as_str()
}
