//! Quota leasing settings of a limit (`"leasing": {"maxShare": 0.1,
//! "ttlMs": 1000}`): how much of a hot key's limit a distributed backend
//! may hand out to instances in batches, and for how long. Kept here, in
//! the limits, so one config names it per limit; only a distributed
//! backend acts on it (`pressure-redis`). The memory backend ignores it:
//! one process has nothing to lease, every decision is already local.

use crate::limits_error::LimitsError;
use crate::ppm::PPM;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Shortest lease accepted (`ttlMs`).
pub const MIN_LEASE_TTL_MS: u64 = 10;
/// Longest lease accepted (`ttlMs`).
pub const MAX_LEASE_TTL_MS: u64 = 60_000;

/// Quota leasing of one limit: an instance reserves a batch of units in
/// one store call, serves decisions from it in memory, and gives back what
/// it did not use when the lease ends. Off unless set.
///
/// Applies to the sliding rate dimensions (`window` and `gcra`); calendar
/// dimensions and `maxConcurrentRequests` are never leased (a lease of
/// concurrency slots would hold slots nobody uses, and a dead holder's
/// slots could only come back at the TTL, which the concurrency lease TTL
/// already is). A limit with no sliding rate dimension is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Leasing {
    /// Most of each rate limit N that all the fleet's outstanding leases
    /// may hold together, as a share in (0, 1] (e.g. 0.1: a tenth of N).
    #[schemars(with = "f64")]
    pub max_share: Share,
    /// How long a lease is served before its unused units go back, in
    /// milliseconds, 10 to 60 000; a dead holder's share of the lease
    /// budget comes back after this long.
    pub ttl_ms: u64,
}

impl Leasing {
    /// Leasing with `max_share` parts per million of N and a TTL in ms.
    pub fn new(max_share_ppm: u32, ttl_ms: u64) -> Self {
        Self {
            max_share: Share::from_ppm(max_share_ppm),
            ttl_ms,
        }
    }
}

/// A share of a limit in parts per million, so [`crate::Limits`] stays
/// `Eq + Hash`; JSON shows it as a number (`0.1`). Values outside (0, 1]
/// deserialize and are refused by [`crate::Limits::compile`] with the
/// field path `leasing.maxShare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Share(u64);

impl Share {
    /// The share of `ppm` parts per million.
    pub fn from_ppm(ppm: u32) -> Self {
        Self(u64::from(ppm))
    }

    /// Parts per million.
    pub fn ppm(self) -> u64 {
        self.0
    }

    /// This share of `n`, rounded down; saturating at `u64::MAX` for a
    /// share above 1 (refused by [`crate::Limits::compile`], but a `Share`
    /// can hold one).
    pub fn of(self, n: u64) -> u64 {
        u64::try_from(u128::from(n) * u128::from(self.0) / u128::from(PPM)).unwrap_or(u64::MAX)
    }
}

impl Serialize for Share {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0 as f64 / f64::from(PPM))
    }
}

impl<'de> Deserialize<'de> for Share {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let x = f64::deserialize(d)?;
        // NaN and negatives become 0 (refused at compile); huge values saturate.
        let ppm = (x * f64::from(PPM)).round();
        Ok(Self(if ppm.is_nan() || ppm <= 0.0 { 0 } else { ppm as u64 }))
    }
}

/// Checks `leasing` against limits that have `has_rates` sliding rate
/// dimensions; the error names the JSON field under `leasing`.
pub(crate) fn check(leasing: &Leasing, has_rates: bool) -> Result<(), LimitsError> {
    let ppm = leasing.max_share.ppm();
    if ppm == 0 || ppm > u64::from(PPM) {
        return Err(LimitsError::at("leasing.maxShare", "must be in (0, 1]"));
    }
    if !(MIN_LEASE_TTL_MS..=MAX_LEASE_TTL_MS).contains(&leasing.ttl_ms) {
        return Err(LimitsError::at(
            "leasing.ttlMs",
            format!("must be in [{MIN_LEASE_TTL_MS}, {MAX_LEASE_TTL_MS}]"),
        ));
    }
    if !has_rates {
        return Err(LimitsError::at(
            "leasing",
            "needs a sliding rate dimension (requestsPerSecond, tokensPerMinute, ...): \
             maxConcurrentRequests and calendar dimensions are never leased",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::Limits;

    fn parse(json: &str) -> Result<Limits, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn a_share_above_one_saturates_and_never_wraps() {
        let share = super::Share::from_ppm(u32::MAX);
        assert_eq!(share.of(u64::MAX), u64::MAX);
        assert_eq!(share.of(1_000_000), 4_294_967_295);
        assert_eq!(super::Share::from_ppm(1_000_000).of(u64::MAX), u64::MAX);
    }

    #[test]
    fn json_round_trips_as_a_float_and_is_strict() {
        let l = parse(r#"{"requestsPerSecond":5,"leasing":{"maxShare":0.1,"ttlMs":1000}}"#).unwrap();
        let leasing = l.leasing.unwrap();
        assert_eq!((leasing.max_share.ppm(), leasing.ttl_ms), (100_000, 1000));
        assert_eq!(leasing.max_share.of(1000), 100);
        let back = serde_json::to_string(&l).unwrap();
        assert!(
            back.contains(r#""leasing":{"maxShare":0.1,"ttlMs":1000}"#),
            "{back}"
        );
        assert!(parse(r#"{"requestsPerSecond":5,"leasing":{"maxShare":0.1,"ttlMs":1000,"x":1}}"#).is_err());
        assert!(parse(r#"{"requestsPerSecond":5,"leasing":{"ttlMs":1000}}"#).is_err());
        l.compile().unwrap();
    }

    #[test]
    fn out_of_range_values_name_their_path() {
        for (json, field) in [
            (r#"{"maxShare":0,"ttlMs":1000}"#, "leasing.maxShare"),
            (r#"{"maxShare":-0.5,"ttlMs":1000}"#, "leasing.maxShare"),
            (r#"{"maxShare":1.01,"ttlMs":1000}"#, "leasing.maxShare"),
            (r#"{"maxShare":0.5,"ttlMs":9}"#, "leasing.ttlMs"),
            (r#"{"maxShare":0.5,"ttlMs":60001}"#, "leasing.ttlMs"),
        ] {
            let l = parse(&format!(r#"{{"requestsPerMinute":5,"leasing":{json}}}"#)).unwrap();
            assert_eq!(l.compile().unwrap_err().field, field, "{json}");
        }
        let full = parse(r#"{"requestsPerMinute":5,"leasing":{"maxShare":1,"ttlMs":60000}}"#).unwrap();
        full.compile().unwrap();
    }

    #[test]
    fn concurrency_only_limits_refuse_leasing() {
        let l = parse(r#"{"maxConcurrentRequests":5,"leasing":{"maxShare":0.5,"ttlMs":100}}"#).unwrap();
        let e = l.compile().unwrap_err();
        assert_eq!(e.field, "leasing");
        assert!(e.problem.contains("never leased"), "{e}");
        let cal = parse(r#"{"requestsPerDay":5,"leasing":{"maxShare":0.5,"ttlMs":100}}"#).unwrap();
        assert_eq!(cal.compile().unwrap_err().field, "leasing");
    }
}
