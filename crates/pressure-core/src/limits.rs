//! What a resource may admit: the user-facing [`Limits`] (JSON names in
//! camelCase, as in the gateway config) and their validated, compiled form
//! [`LimitSpec`] that backends count against.

use crate::calendar::Calendar;
use crate::limits_error::LimitsError;
use crate::ppm::PPM;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// Largest value accepted for any limit; keeps every product in the window
/// and GCRA arithmetic inside 128-bit range with room to spare.
pub const MAX_LIMIT: u64 = 1_000_000_000_000;

/// Default lease time-to-live of a concurrency permit.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// Number of sub-windows the `window` algorithm splits a window into.
///
/// The bound that follows: under saturation at least
/// `SUB_WINDOWS / (SUB_WINDOWS + 1)` (96.7 %) of `N` is admitted per window,
/// and never more than `N` in any interval of the window's length.
pub const SUB_WINDOWS: u64 = 30;

/// How a rate dimension counts; see the crate docs for the exact bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// Strict sliding window: in any interval of length W at most N units.
    #[default]
    Window,
    /// Generic cell rate algorithm (a token bucket with continuous refill):
    /// exact wait times, O(1) state, future slots can be booked.
    Gcra,
}

/// The limits of one resource. Any subset may be set; an acquisition must fit
/// all of them at once (all reserved or none).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Limits {
    /// Requests admitted per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_second: Option<u64>,
    /// Requests admitted per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u64>,
    /// Requests admitted per hour (a sliding hour, like every window here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_hour: Option<u64>,
    /// Requests admitted in any 24 hours (sliding, not a calendar day: no
    /// 2N across midnight), e.g. Envoy rate limit configs' `unit: day`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_24_hours: Option<u64>,
    /// Input plus output tokens per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_minute: Option<u64>,
    /// Input (prompt) tokens per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens_per_minute: Option<u64>,
    /// Output (completion) tokens per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_per_minute: Option<u64>,
    /// Live permits held at once (leases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_requests: Option<u64>,
    /// Requests admitted per UTC calendar day (a fixed window: the count
    /// resets at 00:00:00 UTC). `algorithm` and `burst` do not apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_day: Option<u64>,
    /// Input plus output tokens admitted per UTC calendar day (fixed window,
    /// reconciled to the actual usage like the other token dimensions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_day: Option<u64>,
    /// Cost in micro-USD (1 USD = 1 000 000) admitted per UTC calendar day
    /// (resets at 00:00:00 UTC): a daily budget. Each call reserves its
    /// estimated cost and is reconciled to the billed cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_micro_usd_per_day: Option<u64>,
    /// Cost in micro-USD admitted per UTC calendar month (resets on the
    /// first at 00:00:00 UTC): a monthly budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_micro_usd_per_month: Option<u64>,
    /// Counting algorithm of every sliding rate dimension of this resource
    /// (the calendar dimensions are always fixed UTC windows).
    #[serde(default)]
    pub algorithm: Algorithm,
    /// `gcra` only: most requests admitted at once on the request dimensions
    /// (bucket size). Defaults to the dimension's limit. Token dimensions
    /// always have a bucket of their full per-minute limit, like providers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// Lease time-to-live of a concurrency permit, in milliseconds; a holder
    /// that stops renewing loses its slot after this long. Default 30 000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ttl_ms: Option<u64>,
    /// Quota leasing for a hot key (`{"maxShare": 0.1, "ttlMs": 1000}`): a
    /// distributed backend (Redis) lets each instance reserve a batch of
    /// units in one store call and decide from it in memory. Off by
    /// default; ignored by the memory backend (one process: nothing to
    /// lease); never applies to `maxConcurrentRequests` or the calendar
    /// dimensions (see `pressure_redis` docs, "Quota leasing").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leasing: Option<crate::Leasing>,
    /// Shadow mode: the limit decides and counts exactly as an enforcing
    /// one (a shadow denial consumes nothing, like a real denial), but the
    /// caller admits the request anyway and counts the would-be refusal as
    /// `shadowDenied` (stats) and `pressure_shadow_denied_total` (metrics).
    /// Switching it by reload or override keeps the usage counted so far.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shadow: bool,
}

/// One builder method per count of [`Limits`]: `$setter(n)` sets `$json`.
macro_rules! count_setters {
    ($($setter:ident => $json:literal),* $(,)?) => {
        impl Limits {
            $(
                #[doc = concat!("Sets `", $json, "`.")]
                pub fn $setter(mut self, n: u64) -> Self {
                    self.$setter = Some(n);
                    self
                }
            )*
        }
    };
}

count_setters! {
    requests_per_second => "requestsPerSecond",
    requests_per_minute => "requestsPerMinute",
    requests_per_hour => "requestsPerHour",
    requests_per_24_hours => "requestsPer24Hours",
    tokens_per_minute => "tokensPerMinute",
    input_tokens_per_minute => "inputTokensPerMinute",
    output_tokens_per_minute => "outputTokensPerMinute",
    max_concurrent_requests => "maxConcurrentRequests",
    requests_per_day => "requestsPerDay",
    tokens_per_day => "tokensPerDay",
    cost_micro_usd_per_day => "costMicroUsdPerDay",
    cost_micro_usd_per_month => "costMicroUsdPerMonth",
}

impl Limits {
    /// Chooses the `gcra` algorithm with the given burst on request dimensions.
    pub fn gcra(mut self, burst: Option<u64>) -> Self {
        self.algorithm = Algorithm::Gcra;
        self.burst = burst;
        self
    }
    /// Sets the concurrency lease TTL.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl_ms = Some(crate::clock::duration_to_millis(ttl));
        self
    }
    /// Sets shadow mode (see [`Limits::shadow`]).
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }
    /// Turns quota leasing on (see [`crate::Leasing`]).
    pub fn leasing(mut self, leasing: crate::Leasing) -> Self {
        self.leasing = Some(leasing);
        self
    }

    /// The configured value of `dimension`, if set.
    pub fn get(&self, dimension: Dimension) -> Option<u64> {
        match dimension {
            Dimension::RequestsPerSecond => self.requests_per_second,
            Dimension::RequestsPerMinute => self.requests_per_minute,
            Dimension::RequestsPerHour => self.requests_per_hour,
            Dimension::RequestsPer24Hours => self.requests_per_24_hours,
            Dimension::TokensPerMinute => self.tokens_per_minute,
            Dimension::InputTokensPerMinute => self.input_tokens_per_minute,
            Dimension::OutputTokensPerMinute => self.output_tokens_per_minute,
            Dimension::MaxConcurrentRequests => self.max_concurrent_requests,
            Dimension::RequestsPerDay => self.requests_per_day,
            Dimension::TokensPerDay => self.tokens_per_day,
            Dimension::CostMicroUsdPerDay => self.cost_micro_usd_per_day,
            Dimension::CostMicroUsdPerMonth => self.cost_micro_usd_per_month,
        }
    }

    /// The same limits with every count set to `f` of it (what a process
    /// may use alone, a scaled tier): `f` sees each set value in turn.
    pub fn map_values(&self, f: impl Fn(u64) -> u64) -> Self {
        let f = |v: Option<u64>| v.map(&f);
        Self {
            requests_per_second: f(self.requests_per_second),
            requests_per_minute: f(self.requests_per_minute),
            requests_per_hour: f(self.requests_per_hour),
            requests_per_24_hours: f(self.requests_per_24_hours),
            tokens_per_minute: f(self.tokens_per_minute),
            input_tokens_per_minute: f(self.input_tokens_per_minute),
            output_tokens_per_minute: f(self.output_tokens_per_minute),
            max_concurrent_requests: f(self.max_concurrent_requests),
            requests_per_day: f(self.requests_per_day),
            tokens_per_day: f(self.tokens_per_day),
            cost_micro_usd_per_day: f(self.cost_micro_usd_per_day),
            cost_micro_usd_per_month: f(self.cost_micro_usd_per_month),
            burst: f(self.burst),
            ..self.clone()
        }
    }

    /// Checks the limits and compiles them into the form backends count with.
    pub fn compile(&self) -> Result<LimitSpec, LimitsError> {
        LimitSpec::new(self)
    }
}

/// One counted dimension of a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Dimension {
    /// `requestsPerSecond`.
    RequestsPerSecond,
    /// `requestsPerMinute`.
    RequestsPerMinute,
    /// `tokensPerMinute`.
    TokensPerMinute,
    /// `inputTokensPerMinute`.
    InputTokensPerMinute,
    /// `outputTokensPerMinute`.
    OutputTokensPerMinute,
    /// `maxConcurrentRequests`.
    MaxConcurrentRequests,
    /// `requestsPerHour` (after the others: indices are stored in Redis).
    RequestsPerHour,
    /// `requestsPer24Hours`.
    RequestsPer24Hours,
    /// `requestsPerDay` (a UTC calendar day).
    RequestsPerDay,
    /// `tokensPerDay` (a UTC calendar day, input plus output tokens).
    TokensPerDay,
    /// `costMicroUsdPerDay` (a UTC calendar day, micro-USD).
    CostMicroUsdPerDay,
    /// `costMicroUsdPerMonth` (a UTC calendar month, micro-USD).
    CostMicroUsdPerMonth,
}

impl Dimension {
    /// The JSON name of the dimension.
    pub fn as_str(self) -> &'static str {
        match self {
            Dimension::RequestsPerSecond => "requestsPerSecond",
            Dimension::RequestsPerMinute => "requestsPerMinute",
            Dimension::TokensPerMinute => "tokensPerMinute",
            Dimension::InputTokensPerMinute => "inputTokensPerMinute",
            Dimension::OutputTokensPerMinute => "outputTokensPerMinute",
            Dimension::MaxConcurrentRequests => "maxConcurrentRequests",
            Dimension::RequestsPerHour => "requestsPerHour",
            Dimension::RequestsPer24Hours => "requestsPer24Hours",
            Dimension::RequestsPerDay => "requestsPerDay",
            Dimension::TokensPerDay => "tokensPerDay",
            Dimension::CostMicroUsdPerDay => "costMicroUsdPerDay",
            Dimension::CostMicroUsdPerMonth => "costMicroUsdPerMonth",
        }
    }

    /// Units of `demand` this dimension counts: requests, tokens (input,
    /// output or both), micro-USD of cost, or nothing (concurrency counts
    /// leases).
    #[inline]
    pub fn units(self, demand: &Demand) -> u64 {
        match self {
            Dimension::RequestsPerSecond
            | Dimension::RequestsPerMinute
            | Dimension::RequestsPerHour
            | Dimension::RequestsPer24Hours
            | Dimension::RequestsPerDay => demand.requests,
            Dimension::TokensPerMinute | Dimension::TokensPerDay => {
                demand.input_tokens.saturating_add(demand.output_tokens)
            }
            Dimension::InputTokensPerMinute => demand.input_tokens,
            Dimension::OutputTokensPerMinute => demand.output_tokens,
            Dimension::CostMicroUsdPerDay | Dimension::CostMicroUsdPerMonth => demand.cost_micro_usd,
            Dimension::MaxConcurrentRequests => 0,
        }
    }

    /// The calendar period of a fixed UTC calendar dimension
    /// (`requestsPerDay`, `tokensPerDay`, `costMicroUsdPerDay`,
    /// `costMicroUsdPerMonth`); `None` for the sliding ones and concurrency.
    pub fn calendar(self) -> Option<Calendar> {
        match self {
            Dimension::RequestsPerDay | Dimension::TokensPerDay | Dimension::CostMicroUsdPerDay => {
                Some(Calendar::Day)
            }
            Dimension::CostMicroUsdPerMonth => Some(Calendar::Month),
            _ => None,
        }
    }

    /// Whether the dimension counts requests (else tokens or leases).
    #[inline]
    pub fn counts_requests(self) -> bool {
        matches!(
            self,
            Dimension::RequestsPerSecond
                | Dimension::RequestsPerMinute
                | Dimension::RequestsPerHour
                | Dimension::RequestsPer24Hours
                | Dimension::RequestsPerDay
        )
    }

    /// The length of the dimension's sliding window; `None` for the
    /// concurrency limit, which has none, and for the calendar dimensions,
    /// whose windows are fixed UTC periods of varying length (a month has
    /// 28 to 31 days): see [`Dimension::calendar`] and
    /// [`Calendar::next_reset`].
    pub fn window(self) -> Option<Duration> {
        Some(Duration::from_secs(match self {
            Dimension::RequestsPerSecond => 1,
            Dimension::RequestsPerMinute
            | Dimension::TokensPerMinute
            | Dimension::InputTokensPerMinute
            | Dimension::OutputTokensPerMinute => 60,
            Dimension::RequestsPerHour => 3_600,
            Dimension::RequestsPer24Hours => 86_400,
            Dimension::MaxConcurrentRequests
            | Dimension::RequestsPerDay
            | Dimension::TokensPerDay
            | Dimension::CostMicroUsdPerDay
            | Dimension::CostMicroUsdPerMonth => return None,
        }))
    }

    /// Every dimension, in [`Dimension::index`] order.
    pub const ALL: [Dimension; 12] = [
        Dimension::RequestsPerSecond,
        Dimension::RequestsPerMinute,
        Dimension::TokensPerMinute,
        Dimension::InputTokensPerMinute,
        Dimension::OutputTokensPerMinute,
        Dimension::MaxConcurrentRequests,
        Dimension::RequestsPerHour,
        Dimension::RequestsPer24Hours,
        Dimension::RequestsPerDay,
        Dimension::TokensPerDay,
        Dimension::CostMicroUsdPerDay,
        Dimension::CostMicroUsdPerMonth,
    ];

    /// A stable small index (0..12), used by backends and scripts.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The dimension of [`Dimension::index`] `i`.
    pub fn from_index(i: usize) -> Option<Self> {
        Self::ALL.get(i).copied()
    }
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One rate dimension, compiled: everything the algorithms need, in
/// nanoseconds and units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateSpec {
    /// Which dimension.
    pub dimension: Dimension,
    /// N: units admitted per window.
    pub limit: u64,
    /// W in nanoseconds.
    pub window_ns: u64,
    /// Counting algorithm.
    pub algorithm: Algorithm,
    /// `gcra`: bucket capacity in units (at most this many at once).
    pub capacity: u64,
    /// `gcra`: emission interval per unit, `ceil(W / N)` nanoseconds.
    pub emission_ns: u64,
    /// `window`: sub-window length, `ceil(W / SUB_WINDOWS)` nanoseconds.
    pub sub_window_ns: u64,
}

impl RateSpec {
    /// Units of `demand` this dimension counts.
    #[inline]
    pub fn units(&self, demand: &Demand) -> u64 {
        self.dimension.units(demand)
    }

    /// Largest demand this dimension can ever admit at once.
    pub fn max_demand(&self) -> u64 {
        match self.algorithm {
            Algorithm::Window => self.limit,
            Algorithm::Gcra => self.capacity,
        }
    }

    /// The effective limit for a caller allowed only `ceiling_ppm` parts per
    /// million of it (batch headroom); never below 1.
    #[inline]
    pub fn scaled(value: u64, ceiling_ppm: u32) -> u64 {
        if ceiling_ppm >= PPM {
            return value;
        }
        let v =
            u64::try_from(u128::from(value) * u128::from(ceiling_ppm) / u128::from(PPM)).unwrap_or(u64::MAX);
        v.max(1)
    }
}

/// The units one acquisition asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Demand {
    /// Requests (usually 1).
    pub requests: u64,
    /// Input tokens (counted before the call).
    pub input_tokens: u64,
    /// Output tokens (an estimate, typically `max_tokens`).
    pub output_tokens: u64,
    /// Cost in micro-USD (an estimate before the call), counted by the
    /// `costMicroUsdPer*` dimensions.
    pub cost_micro_usd: u64,
    /// Whether to take a concurrency lease when the resource has a
    /// concurrency limit.
    pub lease: bool,
    /// Share of every limit this caller may fill, in parts per million
    /// (`PPM` = all of it). Batch traffic uses less so interactive traffic
    /// keeps headroom across a fleet without coordination.
    pub ceiling_ppm: u32,
    /// `gcra` only: if the demand does not fit now but would within this many
    /// nanoseconds, book the future slot instead of denying.
    pub book_within_ns: u64,
    /// Whether a denial counts in the resource's `denied` counter (false for
    /// a queue's internal retries, which are not refusals).
    pub count_denial: bool,
}

impl Default for Demand {
    fn default() -> Self {
        Self {
            requests: 1,
            input_tokens: 0,
            output_tokens: 0,
            cost_micro_usd: 0,
            lease: true,
            ceiling_ppm: PPM,
            book_within_ns: 0,
            count_denial: true,
        }
    }
}

/// Validated, compiled limits of one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitSpec {
    /// The limits as given.
    pub limits: Limits,
    /// The rate dimensions that are set.
    pub rates: Vec<RateSpec>,
    /// The calendar dimensions that are set (fixed UTC days and months).
    pub calendars: Vec<CalendarSpec>,
    /// `maxConcurrentRequests`, when set.
    pub concurrency: Option<u64>,
    /// Lease TTL in nanoseconds.
    pub lease_ttl_ns: u64,
}

impl LimitSpec {
    fn new(limits: &Limits) -> Result<Self, LimitsError> {
        let dims = Dimension::ALL
            .into_iter()
            .filter(|d| *d != Dimension::MaxConcurrentRequests)
            .filter_map(|d| Some((d, limits.get(d), d.window()?.as_nanos() as u64)));
        if let Some(b) = limits.burst {
            if limits.algorithm != Algorithm::Gcra {
                return Err(LimitsError::new(
                    "burst",
                    "only applies with \"algorithm\": \"gcra\"",
                ));
            }
            check_value("burst", b)?;
        }
        let mut rates = Vec::new();
        for (dimension, value, window_ns) in dims {
            let Some(limit) = value else { continue };
            check_value(dimension.as_str(), limit)?;
            let capacity = match (limits.burst, dimension.counts_requests()) {
                (Some(b), true) => b,
                _ => limit,
            };
            rates.push(RateSpec {
                dimension,
                limit,
                window_ns,
                algorithm: limits.algorithm,
                capacity,
                emission_ns: window_ns.div_ceil(limit),
                sub_window_ns: window_ns.div_ceil(SUB_WINDOWS),
            });
        }
        let mut calendars = Vec::new();
        for dimension in Dimension::ALL {
            let (Some(calendar), Some(limit)) = (dimension.calendar(), limits.get(dimension)) else {
                continue;
            };
            check_value(dimension.as_str(), limit)?;
            calendars.push(CalendarSpec {
                dimension,
                limit,
                calendar,
            });
        }
        if let Some(c) = limits.max_concurrent_requests {
            check_value(Dimension::MaxConcurrentRequests.as_str(), c)?;
        }
        if rates.is_empty() && calendars.is_empty() && limits.max_concurrent_requests.is_none() {
            return Err(LimitsError::new("limits", "at least one limit must be set"));
        }
        let lease_ttl_ns = match limits.lease_ttl_ms {
            None => DEFAULT_LEASE_TTL.as_nanos() as u64,
            Some(0) => return Err(LimitsError::new("leaseTtlMs", "must be > 0")),
            Some(ms) if ms > 86_400_000 => {
                return Err(LimitsError::new(
                    "leaseTtlMs",
                    "must be at most 86400000 (one day)",
                ))
            }
            Some(ms) => ms * 1_000_000,
        };
        if let Some(leasing) = &limits.leasing {
            crate::leasing::check(leasing, !rates.is_empty())?;
        }
        Ok(Self {
            limits: limits.clone(),
            rates,
            calendars,
            concurrency: limits.max_concurrent_requests,
            lease_ttl_ns,
        })
    }

    /// Whether a permit on this resource has anything to give back or
    /// correct: a lease, or token dimensions to reconcile. Permits of other
    /// resources are inert and cost nothing to hold or drop.
    pub fn permits_hold_state(&self) -> bool {
        self.concurrency.is_some()
            || self.rates.iter().any(|r| !r.dimension.counts_requests())
            || self.calendars.iter().any(|c| !c.dimension.counts_requests())
    }

    /// Whether every rate dimension uses `gcra` (so future slots can be
    /// booked), there is at least one, and there is no calendar dimension
    /// (a calendar count is never booked ahead: its period may end before
    /// the slot).
    pub fn all_gcra(&self) -> bool {
        !self.rates.is_empty()
            && self.calendars.is_empty()
            && self.rates.iter().all(|r| r.algorithm == Algorithm::Gcra)
    }

    /// The first dimension this demand can never fit, with the demand and the
    /// most that dimension can admit at once.
    #[inline]
    pub fn oversized(&self, demand: &Demand) -> Option<(Dimension, u64, u64)> {
        let rates = self.rates.iter().map(|r| (r.dimension, r.max_demand()));
        let calendars = self.calendars.iter().map(|c| (c.dimension, c.limit));
        rates.chain(calendars).find_map(|(dimension, max)| {
            let units = dimension.units(demand);
            let max = RateSpec::scaled(max, demand.ceiling_ppm);
            (units > max).then_some((dimension, units, max))
        })
    }
}

/// One calendar dimension, compiled: a count of units per fixed UTC period
/// (see [`Calendar`]), reset at the period's end. `algorithm` and `burst`
/// never apply; a caller's ceiling (batch headroom) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CalendarSpec {
    /// Which dimension.
    pub dimension: Dimension,
    /// Units admitted per period.
    pub limit: u64,
    /// The period.
    pub calendar: Calendar,
}

impl CalendarSpec {
    /// Units of `demand` this dimension counts.
    #[inline]
    pub fn units(&self, demand: &Demand) -> u64 {
        self.dimension.units(demand)
    }
}

fn check_value(field: &'static str, v: u64) -> Result<(), LimitsError> {
    if v == 0 {
        return Err(LimitsError::new(field, "must be > 0"));
    }
    if v > MAX_LIMIT {
        return Err(LimitsError::new(field, format!("must be at most {MAX_LIMIT}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_and_overflow_are_rejected_with_the_field_name() {
        let e = Limits::default().requests_per_second(0).compile().unwrap_err();
        assert_eq!(e.to_string(), "requestsPerSecond: must be > 0");
        let e = Limits::default()
            .tokens_per_minute(MAX_LIMIT + 1)
            .compile()
            .unwrap_err();
        assert_eq!(e.field, "tokensPerMinute");
        let e = Limits::default().compile().unwrap_err();
        assert_eq!(e.field, "limits");
        let e = Limits::default()
            .requests_per_second(5)
            .lease_ttl(Duration::ZERO)
            .compile()
            .unwrap_err();
        assert_eq!(e.field, "leaseTtlMs");
    }

    #[test]
    fn burst_needs_gcra() {
        let mut l = Limits::default().requests_per_second(5);
        l.burst = Some(3);
        assert_eq!(l.compile().unwrap_err().field, "burst");
        let spec = l.gcra(Some(3)).compile().unwrap();
        assert_eq!(spec.rates[0].capacity, 3);
        assert_eq!(spec.rates[0].emission_ns, 200_000_000);
    }

    #[test]
    fn json_is_camel_case_and_strict() {
        let l: Limits = serde_json_like(r#"{"requestsPerSecond":5,"maxConcurrentRequests":2}"#);
        assert_eq!(l.requests_per_second, Some(5));
        assert_eq!(l.max_concurrent_requests, Some(2));
        let bad: Result<Limits, _> = serde_json::from_str(r#"{"requestPerSecond":5}"#);
        assert!(bad.is_err());
        let neg: Result<Limits, _> = serde_json::from_str(r#"{"requestsPerSecond":-1}"#);
        assert!(neg.is_err());
    }

    #[test]
    fn hour_and_24_hours_have_their_json_names_windows_and_indices() {
        let l: Limits =
            serde_json_like(r#"{"requestsPerHour":7,"requestsPer24Hours":9,"burst":2,"algorithm":"gcra"}"#);
        assert_eq!((l.requests_per_hour, l.requests_per_24_hours), (Some(7), Some(9)));
        let spec = l.compile().unwrap();
        let dims: Vec<_> = spec
            .rates
            .iter()
            .map(|r| (r.dimension, r.window_ns / 1_000_000_000, r.capacity))
            .collect();
        assert_eq!(
            dims,
            [
                (Dimension::RequestsPerHour, 3_600, 2),
                (Dimension::RequestsPer24Hours, 86_400, 2)
            ],
            "request dimensions take the burst"
        );
        assert!(
            !spec.permits_hold_state(),
            "request dimensions are not reconciled"
        );
        for (i, d) in Dimension::ALL.into_iter().enumerate() {
            assert_eq!((d.index(), Dimension::from_index(i)), (i, Some(d)));
        }
        assert_eq!(Dimension::from_index(12), None);
        // Stored indices of the older dimensions do not move.
        assert_eq!(Dimension::MaxConcurrentRequests.index(), 5);
        assert_eq!(l.map_values(|v| v * 10).requests_per_24_hours, Some(90));
        assert_eq!(l.get(Dimension::RequestsPerHour), Some(7));
    }

    #[test]
    fn calendar_dimensions_compile_apart_from_the_rates() {
        let l: Limits = serde_json_like(
            r#"{"requestsPerDay":7,"tokensPerDay":9,"costMicroUsdPerDay":100,"costMicroUsdPerMonth":1000,"requestsPerSecond":5}"#,
        );
        let spec = l.compile().unwrap();
        assert_eq!(spec.rates.len(), 1, "calendar dimensions are not sliding rates");
        let cal: Vec<_> = spec
            .calendars
            .iter()
            .map(|c| (c.dimension, c.limit, c.calendar))
            .collect();
        assert_eq!(
            cal,
            [
                (Dimension::RequestsPerDay, 7, Calendar::Day),
                (Dimension::TokensPerDay, 9, Calendar::Day),
                (Dimension::CostMicroUsdPerDay, 100, Calendar::Day),
                (Dimension::CostMicroUsdPerMonth, 1000, Calendar::Month),
            ]
        );
        assert!(spec.permits_hold_state(), "tokens and cost are reconciled");
        assert!(!Limits::default()
            .requests_per_day(3)
            .compile()
            .unwrap()
            .permits_hold_state());
        // Stored indices: after every older dimension.
        let idx: Vec<usize> = cal.iter().map(|c| c.0.index()).collect();
        assert_eq!(idx, [8, 9, 10, 11]);
        for (d, _, _) in &cal {
            assert_eq!(d.window(), None, "no fixed length");
            assert_eq!(l.get(*d), l.map_values(|v| v).get(*d));
            let json = serde_json::to_value(&l).unwrap();
            assert!(json.get(d.as_str()).is_some(), "{d}");
        }
        let d = Demand {
            input_tokens: 3,
            output_tokens: 4,
            cost_micro_usd: 101,
            ..Demand::default()
        };
        assert_eq!(
            spec.oversized(&d),
            Some((Dimension::CostMicroUsdPerDay, 101, 100))
        );
        let e = Limits::default()
            .cost_micro_usd_per_month(0)
            .compile()
            .unwrap_err();
        assert_eq!(e.field, "costMicroUsdPerMonth");
        let e = Limits::default()
            .tokens_per_day(MAX_LIMIT + 1)
            .compile()
            .unwrap_err();
        assert_eq!(e.field, "tokensPerDay");
    }

    fn serde_json_like(s: &str) -> Limits {
        serde_json::from_str(s).expect("valid limits json")
    }

    #[test]
    fn oversized_demand_is_found() {
        let spec = Limits::default().tokens_per_minute(100).compile().unwrap();
        let d = Demand {
            input_tokens: 80,
            output_tokens: 30,
            ..Demand::default()
        };
        assert_eq!(spec.oversized(&d), Some((Dimension::TokensPerMinute, 110, 100)));
    }
}
