//! envoyproxy/ratelimit's YAML file format, as serde types: the same keys,
//! nothing more (an unknown key is an error, as upstream). Every key may
//! be absent (its default); parsing names the ones a node needs.

use serde::Deserialize;

/// One file: a domain and its descriptor tree.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct YamlRoot {
    /// The domain Envoy names in its requests.
    pub(crate) domain: String,
    /// The top level of the tree.
    pub(crate) descriptors: Vec<YamlDescriptor>,
}

/// One node of the tree.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct YamlDescriptor {
    /// The descriptor key (required).
    pub(crate) key: String,
    /// The value; absent: any value, counted per distinct value. A trailing
    /// `*` matches every value with that prefix.
    pub(crate) value: Option<String>,
    /// The limit of this node, if any.
    pub(crate) rate_limit: Option<YamlRateLimit>,
    /// Nested nodes (one entry deeper).
    pub(crate) descriptors: Vec<YamlDescriptor>,
    /// Counted, but always answered OK.
    pub(crate) shadow_mode: bool,
    /// Metrics per request value instead of per config node.
    pub(crate) detailed_metric: bool,
}

/// `rate_limit:` of a node.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct YamlRateLimit {
    /// `second`, `minute`, `hour` or `day` (any case, as upstream).
    pub(crate) unit: Option<String>,
    /// Requests per unit; 0 refuses every request.
    pub(crate) requests_per_unit: u32,
    /// No limit: answered OK without touching the backend.
    pub(crate) unlimited: bool,
    /// A name that `replaces` entries may refer to.
    pub(crate) name: Option<String>,
    /// Limits (by name) this one replaces when both match one request.
    pub(crate) replaces: Vec<YamlReplaces>,
}

/// One `replaces:` entry.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct YamlReplaces {
    /// The name of the replaced limit.
    pub(crate) name: String,
}
