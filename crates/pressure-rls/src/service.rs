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
//! Only an undecided call is `UNAVAILABLE`: when the store fails on one
//! descriptor the others are still asked, and when one of them is over its
//! limit (or blocked, or asks more than its limit) the answer is
//! `OVER_LIMIT` all the same (the undecided statuses `UNKNOWN`); a
//! shadow-mode descriptor the store cannot decide changes nothing.
//!
//! `hits_addend` is any `u64` Envoy sends: a demand above the rule's limit
//! is over without asking the store (it can never fit), and every metric
//! adds with saturation, so no value wraps a counter or reaches the store
//! as a number it cannot hold.
//!
//! Descriptor counters are bounded without forgetting live ones (see
//! `counters.rs`): past `--max-counters` live counters, new values share
//! their rule's overflow counter.

use crate::config::{Domain, Plan, Quota, Rule, TimeUnit};
use crate::counters::{Counter, Counters, Found};
use crate::headers::{self, HeaderQuota};
use crate::id::{overflow_id, resource_id};
use crate::metrics::{add, Metrics, Series};
use crate::proto::{self, Code, DescriptorStatus, RateLimitRequest, RateLimitResponse};
use arc_swap::ArcSwap;
use pressure_core::clock::Clock;
use pressure_core::{
    AcquireOptions, Acquisition, Backend, Dimension, Error as CoreError, Grant, LimitTemplate, ResourceBroker,
};
use std::collections::HashSet;
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
    counters: Counters<B>,
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
        hits: u64,
        outcome: Outcome<B>,
    },
}

enum Outcome<B: Backend> {
    /// Counted on this counter.
    Granted(Grant, Arc<Counter<B>>),
    Refused(Duration),
    /// Never fits (`hits_addend` above the limit): not asked.
    TooLarge,
    /// The store could not decide (or was not asked after it failed on an
    /// earlier descriptor).
    Undecided,
}

impl<B: Backend> RateLimiter<B> {
    /// A service answering by `plan` on `broker`.
    /// At most [`pressure_core::DEFAULT_MAX_LAZY_RESOURCES`] descriptor
    /// counters, kept in this process ([`RateLimiter::max_counters`],
    /// [`RateLimiter::store_keeps_state`]).
    pub fn new(broker: ResourceBroker<B>, plan: Plan) -> Self {
        Self {
            broker,
            plan: ArcSwap::from_pointee(plan),
            metrics: Arc::new(Metrics::default()),
            counters: Counters::new(pressure_core::DEFAULT_MAX_LAZY_RESOURCES),
        }
    }

    /// Keeps at most `n` descriptor counters (`--max-counters`). Only a
    /// counter whose windows have passed is dropped to make room; when all
    /// are live, a new value is counted on its rule's shared overflow
    /// counter (`counters.rs`). Give the broker room for `n` +
    /// [`RateLimiter::MAX_OVERFLOW_COUNTERS`] lazy resources.
    #[must_use]
    pub fn max_counters(mut self, n: usize) -> Self {
        self.counters.set_max(n);
        self
    }

    /// Overflow counters kept at most, besides [`RateLimiter::max_counters`].
    pub const MAX_OVERFLOW_COUNTERS: usize = crate::counters::MAX_OVERFLOW;

    /// `true` when the broker's backend keeps every count in a shared
    /// store (Redis): a local handle may then be dropped at any time (the
    /// count stays in the store), so no bound of this service applies and
    /// the broker's own lazy bound evicts idle handles.
    #[must_use]
    pub fn store_keeps_state(mut self, yes: bool) -> Self {
        self.counters.set_store_keeps_state(yes);
        self
    }

    /// The clock telling when a counter's windows have passed: the memory
    /// backend's (default: a monotonic clock).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.counters.set_clock(clock);
        self
    }

    /// Descriptor counters held now (overflow counters not included; none
    /// with [`RateLimiter::store_keeps_state`]).
    pub fn counters(&self) -> usize {
        self.counters.len()
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
        check_request(req)?;
        add(&self.metrics.requests, 1);
        let plan = self.plan.load();
        // 1. Rules.
        let rules = rules_of(plan.domain(&req.domain), &req.descriptors);
        // 2. Replaces.
        let replaced = replaced_names(&rules);
        // 3. Charge.
        let request_hits = u64::from(req.hits_addend.max(1));
        let mut slots: Vec<Slot<B>> = Vec::with_capacity(rules.len());
        // The first store failure.
        let mut failure: Option<String> = None;
        let mut undecided = false;
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
            let outcome = if hits > u64::from(rule.requests_per_unit) {
                // Can never fit in one unit: over, and nothing to ask.
                Outcome::TooLarge
            } else {
                // Asked even after a failure on an earlier descriptor: this
                // one may refuse (a local deny cache needs no store), and
                // one refusal decides the call.
                match self
                    .charge(&req.domain, d, &rule, is_override, template, hits)
                    .await
                {
                    Ok(o) => o,
                    Err(e) => {
                        failure.get_or_insert(e);
                        Outcome::Undecided
                    }
                }
            };
            if matches!(outcome, Outcome::Undecided) && !rule.shadow {
                undecided = true;
            }
            slots.push(Slot::Counted {
                rule,
                series,
                hits,
                outcome,
            });
        }
        // 4. All must pass: one descriptor over decides, whatever the store
        // said of the others.
        let over = slots.iter().any(|s| match s {
            Slot::Free => false,
            Slot::Fixed(rule, _) => !rule.shadow && matches!(rule.quota, Quota::Blocked),
            Slot::Counted { rule, outcome, .. } => {
                !rule.shadow && matches!(outcome, Outcome::Refused(_) | Outcome::TooLarge)
            }
        });
        if over || undecided {
            self.give_back(&slots).await;
        }
        if !over && undecided {
            let why = failure.unwrap_or_else(|| "the store could not decide".into());
            return Err(self.unavailable(why));
        }
        if let Some(why) = &failure {
            tracing::debug!(error = %why, over, "store failure on a descriptor that did not decide the answer");
        }
        Ok(self.answer(&slots, over, request_hits).await)
    }

    /// Counts `hits` of descriptor `d` on its counter: the outcome, or why
    /// the store could not decide.
    async fn charge(
        &self,
        domain: &str,
        d: &proto::RateLimitDescriptor,
        rule: &Rule,
        is_override: bool,
        template: &LimitTemplate,
        hits: u64,
    ) -> Result<Outcome<B>, String> {
        let id = resource_id(domain, &d.entries, is_override);
        let overflow = || {
            let name = if is_override {
                format!(
                    "override/{}s/{}",
                    rule.unit.map_or(0, |u| u.length().as_secs()),
                    rule.requests_per_unit
                )
            } else {
                format!("rule/{}", rule.metric)
            };
            overflow_id(domain, &name)
        };
        let counter = match self.counters.get(&self.broker, &id, template, overflow) {
            Ok(Found::Counter(c)) => c,
            Ok(Found::Full) => {
                add(&self.metrics.overflow, 1);
                return Ok(Outcome::Refused(
                    rule.unit.map_or(Duration::ZERO, TimeUnit::length),
                ));
            }
            Err(e) => return Err(e.to_string()),
        };
        if counter.overflow {
            add(&self.metrics.overflow, 1);
        }
        let handle = &counter.handle;
        if handle.limits() != template.limits() {
            // A reload changed the rule's limits: change them in place.
            self.broker
                .set_limits(handle.id(), template.limits().clone())
                .map_err(|e| e.to_string())?;
        }
        match handle.try_acquire(AcquireOptions::default().requests(hits)).await {
            Ok(Acquisition::Granted(permit)) => {
                counter.touch(self.counters.now());
                Ok(Outcome::Granted(*permit.grant(), counter))
            }
            Ok(Acquisition::Denied(denial)) if denial.is_unavailable() => {
                Err("the store cannot be reached (failure mode closed)".into())
            }
            Ok(Acquisition::Denied(denial)) => Ok(Outcome::Refused(denial.wait)),
            Err(CoreError::DemandTooLarge { .. }) => Ok(Outcome::TooLarge),
            Err(e) => Err(e.to_string()),
        }
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
        add(&self.metrics.unavailable, 1);
        DecisionError::Unavailable(e.to_string())
    }

    /// Gives back every grant in `slots` (the request is refused).
    async fn give_back(&self, slots: &[Slot<B>]) {
        for s in slots {
            if let Slot::Counted {
                outcome: Outcome::Granted(grant, counter),
                ..
            } = s
            {
                if let Err(e) = counter.handle.refund(grant).await {
                    add(&self.metrics.refund_errors, 1);
                    // The id is bounded (`id.rs`): no request string makes
                    // this line long.
                    tracing::warn!(resource = counter.handle.id(), error = %e, "could not give back a grant of a refused request");
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
                    hits,
                    outcome,
                } => {
                    let (status, quota) =
                        counted_status(rule, series, *hits, outcome, over, &mut retry).await;
                    quotas.extend(quota);
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
    add(&series.total_hits, 1);
    if blocked {
        add(&series.over_limit, 1);
        if rule.shadow {
            add(&series.shadow_mode, 1);
        }
    } else {
        add(&series.within_limit, 1);
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
/// refusal's wait goes into `retry`. An undecided descriptor (the store
/// failed, yet another one refused the call) is `UNKNOWN`, without quota.
async fn counted_status<B: Backend>(
    rule: &Rule,
    series: &Series,
    hits: u64,
    outcome: &Outcome<B>,
    over: bool,
    retry: &mut Option<Duration>,
) -> (DescriptorStatus, Option<HeaderQuota>) {
    add(&series.total_hits, hits);
    let limit = u64::from(rule.requests_per_unit);
    let window = rule.unit.map_or(Duration::ZERO, TimeUnit::length);
    let (code, remaining, reset) = match outcome {
        Outcome::Granted(_, counter) => {
            // Read after the grant (and any refund): one read of the
            // backend's state.
            let used = match counter.handle.usage().await {
                Ok(u) => u.dimensions.first().map_or(0, |(_, n)| *n),
                Err(_) => 0,
            };
            let remaining = limit.saturating_sub(used);
            if !over {
                add(&series.within_limit, hits);
                if u128::from(used) * 100 >= u128::from(limit) * u128::from(NEAR_LIMIT_PERCENT) {
                    add(&series.near_limit, hits);
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
        Outcome::Undecided => {
            let status = DescriptorStatus {
                code: Code::Unknown.into(),
                current_limit: Some(current_limit(rule)),
                limit_remaining: 0,
                duration_until_reset: None,
            };
            return (status, None);
        }
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
    (status, Some(quota))
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
    add(&series.over_limit, hits);
    if rule.shadow {
        add(&series.shadow_mode, hits);
        return (Code::Ok, 0, wait);
    }
    *retry = (*retry).max(Some(wait));
    (Code::OverLimit, 0, wait)
}

/// Refuses a call without a domain or without descriptors, as Envoy's
/// reference service does.
fn check_request(req: &RateLimitRequest) -> Result<(), DecisionError> {
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
    Ok(())
}

/// Per descriptor, its rule and whether it is the descriptor's own
/// override: none in an unknown domain, an override's rule when the
/// descriptor carries one, else the domain's rule for its entries.
fn rules_of(
    domain: Option<&Domain>,
    descriptors: &[proto::RateLimitDescriptor],
) -> Vec<Option<(Arc<Rule>, bool)>> {
    descriptors
        .iter()
        .map(|d| match (domain, d.limit) {
            (None, _) => None,
            (Some(_), Some(o)) => override_rule(o).map(|r| (r, true)),
            (Some(dom), None) => dom.rule_for(&d.entries).map(|r| (Arc::clone(r), false)),
        })
        .collect()
}

/// The names of the rules that `rules` replace (their `replaces`): those
/// rules are not counted in this call.
fn replaced_names(rules: &[Option<(Arc<Rule>, bool)>]) -> HashSet<String> {
    rules
        .iter()
        .flatten()
        .flat_map(|(r, _)| r.replaces.iter().cloned())
        .collect()
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
