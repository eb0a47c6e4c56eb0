//! The few messages of Envoy's rate limit service this crate speaks, derived
//! by hand with `prost` (no `protoc`, no build script). Package names and
//! field numbers are Envoy's own:
//!
//! * `envoy.service.ratelimit.v3` (`rls.proto`): `RateLimitRequest`,
//!   `RateLimitResponse` and its nested `Code`, `RateLimit`, `RateLimit.Unit`,
//!   `DescriptorStatus`;
//! * `envoy.extensions.common.ratelimit.v3` (`ratelimit.proto`):
//!   `RateLimitDescriptor`, its `Entry` and `RateLimitOverride`;
//! * `envoy.config.core.v3.HeaderValue` and the well-known
//!   `google.protobuf.Duration` / `UInt64Value`.
//!
//! Fields this service never reads or writes (`raw_body`,
//! `dynamic_metadata`, `quota`, a descriptor's `is_negative_hits`) are left
//! out: protobuf skips unknown fields on decode, so Envoy's messages still
//! parse, and an absent field is its default on the wire.

/// The gRPC path of `ShouldRateLimit`.
pub const SHOULD_RATE_LIMIT_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The gRPC service name.
pub const SERVICE_NAME: &str = "envoy.service.ratelimit.v3.RateLimitService";

/// `envoy.service.ratelimit.v3.RateLimitRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitRequest {
    /// The config domain (`domain:` of a YAML file).
    #[prost(string, tag = "1")]
    pub domain: String,
    /// Every descriptor must pass for the request to pass.
    #[prost(message, repeated, tag = "2")]
    pub descriptors: Vec<RateLimitDescriptor>,
    /// Units the request adds to each matched limit; 0 (unset) means 1.
    #[prost(uint32, tag = "3")]
    pub hits_addend: u32,
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitDescriptor {
    /// The hierarchical key/value entries.
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<Entry>,
    /// A limit sent by Envoy instead of the configured one.
    #[prost(message, optional, tag = "2")]
    pub limit: Option<RateLimitOverride>,
    /// Units for this descriptor, overriding the request's `hits_addend`.
    #[prost(message, optional, tag = "3")]
    pub hits_addend: Option<UInt64Value>,
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.Entry`.
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct Entry {
    /// Descriptor key, e.g. `remote_address`.
    #[prost(string, tag = "1")]
    pub key: String,
    /// Descriptor value, e.g. `10.0.0.1`.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.RateLimitOverride`.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct RateLimitOverride {
    /// Requests per unit.
    #[prost(uint32, tag = "1")]
    pub requests_per_unit: u32,
    /// `envoy.type.v3.RateLimitUnit` (same numbers as [`Unit`]).
    #[prost(enumeration = "Unit", tag = "2")]
    pub unit: i32,
}

/// `google.protobuf.UInt64Value`.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct UInt64Value {
    /// The value.
    #[prost(uint64, tag = "1")]
    pub value: u64,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitResponse {
    /// OVER_LIMIT if any descriptor is over its limit, else OK.
    #[prost(enumeration = "Code", tag = "1")]
    pub overall_code: i32,
    /// One status per request descriptor, in order.
    #[prost(message, repeated, tag = "2")]
    pub statuses: Vec<DescriptorStatus>,
    /// Headers Envoy adds to the response to the client.
    #[prost(message, repeated, tag = "3")]
    pub response_headers_to_add: Vec<HeaderValue>,
    /// Headers Envoy adds to the request sent upstream.
    #[prost(message, repeated, tag = "4")]
    pub request_headers_to_add: Vec<HeaderValue>,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse.Code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Code {
    /// Not known.
    Unknown = 0,
    /// Under the limit.
    Ok = 1,
    /// Over the limit.
    OverLimit = 2,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit` (also
/// `envoy.type.v3.RateLimitUnit`: the same numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Unit {
    /// Not known.
    Unknown = 0,
    /// A second.
    Second = 1,
    /// A minute.
    Minute = 2,
    /// An hour.
    Hour = 3,
    /// A day.
    Day = 4,
    /// A month.
    Month = 5,
    /// A year.
    Year = 6,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse.RateLimit`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimit {
    /// The limit's `name` from the config (empty if none).
    #[prost(string, tag = "3")]
    pub name: String,
    /// Requests per unit.
    #[prost(uint32, tag = "1")]
    pub requests_per_unit: u32,
    /// The unit.
    #[prost(enumeration = "Unit", tag = "2")]
    pub unit: i32,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse.DescriptorStatus`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DescriptorStatus {
    /// This descriptor's answer.
    #[prost(enumeration = "Code", tag = "1")]
    pub code: i32,
    /// The limit that applied; absent when none matched.
    #[prost(message, optional, tag = "2")]
    pub current_limit: Option<RateLimit>,
    /// Units left in the window.
    #[prost(uint32, tag = "3")]
    pub limit_remaining: u32,
    /// When the limit is whole again (sliding window) or refuses no more
    /// (a denial: the wait until the same demand fits).
    #[prost(message, optional, tag = "4")]
    pub duration_until_reset: Option<Duration>,
}

/// `envoy.config.core.v3.HeaderValue`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct HeaderValue {
    /// Header name.
    #[prost(string, tag = "1")]
    pub key: String,
    /// Header value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `google.protobuf.Duration`.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct Duration {
    /// Whole seconds.
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    /// Nanoseconds past `seconds`.
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

impl From<std::time::Duration> for Duration {
    fn from(d: std::time::Duration) -> Self {
        Self {
            seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
        }
    }
}

impl Entry {
    /// An entry `key=value`.
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
        }
    }
}

impl RateLimitDescriptor {
    /// A descriptor of `entries` (`(key, value)` pairs), without override.
    pub fn of<K: Into<String>, V: Into<String>>(entries: impl IntoIterator<Item = (K, V)>) -> Self {
        Self {
            entries: entries.into_iter().map(|(k, v)| Entry::new(k, v)).collect(),
            limit: None,
            hits_addend: None,
        }
    }
}
