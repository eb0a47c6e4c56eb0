//! envoyproxy/ratelimit's YAML config, loaded into a [`Plan`]: the matching
//! tree of every domain, built once per (re)load and swapped whole.
//!
//! The format is upstream's, unchanged: `domain`; nested `descriptors` with
//! `key`, optional `value` (a trailing `*` is a prefix wildcard),
//! `rate_limit` {`unit`, `requests_per_unit`, `unlimited`, `name`,
//! `replaces`}, `shadow_mode`, `detailed_metric`. As upstream, an unknown
//! key, an empty domain or key, a bad unit, a duplicate key/value at one
//! level and two files with one domain are errors; each names its file and
//! the path inside it.

mod yaml;

use crate::error::ConfigError;
use crate::proto;
use pressure_core::{LimitTemplate, Limits};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use yaml::{YamlDescriptor, YamlRateLimit, YamlRoot};

/// A limit's time unit (`unit:` in the YAML; the wire's is
/// [`proto::Unit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum TimeUnit {
    /// One second: `requestsPerSecond`.
    Second,
    /// One minute: `requestsPerMinute`.
    Minute,
    /// One hour: `requestsPerHour`.
    Hour,
    /// One day: `requestsPer24Hours` (a sliding 24 hours).
    Day,
}

impl TimeUnit {
    /// The unit named `s` (any case, as upstream).
    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "second" => Some(Self::Second),
            "minute" => Some(Self::Minute),
            "hour" => Some(Self::Hour),
            "day" => Some(Self::Day),
            _ => None,
        }
    }

    /// The unit of an Envoy override (`envoy.type.v3.RateLimitUnit`).
    pub(crate) fn from_proto(u: i32) -> Option<Self> {
        match proto::Unit::try_from(u).ok()? {
            proto::Unit::Second => Some(Self::Second),
            proto::Unit::Minute => Some(Self::Minute),
            proto::Unit::Hour => Some(Self::Hour),
            proto::Unit::Day => Some(Self::Day),
            _ => None,
        }
    }

    /// The wire value.
    pub(crate) fn to_proto(self) -> proto::Unit {
        match self {
            Self::Second => proto::Unit::Second,
            Self::Minute => proto::Unit::Minute,
            Self::Hour => proto::Unit::Hour,
            Self::Day => proto::Unit::Day,
        }
    }

    /// The unit's length.
    pub(crate) fn length(self) -> Duration {
        Duration::from_secs(match self {
            Self::Second => 1,
            Self::Minute => 60,
            Self::Hour => 3_600,
            Self::Day => 86_400,
        })
    }

    /// `n` requests per this unit as pressure limits: strict sliding
    /// windows of one second, minute, hour, or 24 hours (`day`; upstream
    /// counts the UTC calendar day in a fixed window instead).
    pub(crate) fn limits(self, n: u32) -> Limits {
        let n = u64::from(n);
        let l = Limits::default();
        match self {
            Self::Second => l.requests_per_second(n),
            Self::Minute => l.requests_per_minute(n),
            Self::Hour => l.requests_per_hour(n),
            Self::Day => l.requests_per_24_hours(n),
        }
    }

    /// The pressure dimension counting this unit.
    pub(crate) fn dimension(self) -> pressure_core::Dimension {
        use pressure_core::Dimension;
        match self {
            Self::Second => Dimension::RequestsPerSecond,
            Self::Minute => Dimension::RequestsPerMinute,
            Self::Hour => Dimension::RequestsPerHour,
            Self::Day => Dimension::RequestsPer24Hours,
        }
    }
}

/// What a matched node's `rate_limit` does.
#[derive(Debug, Clone)]
pub(crate) enum Quota {
    /// Counted on a resource with these limits.
    Limited {
        /// The limits of every resource of this rule.
        template: LimitTemplate,
    },
    /// `requests_per_unit: 0`: every request is over the limit, nothing
    /// is counted.
    Blocked,
    /// `unlimited: true`: always OK, the backend is not asked.
    Unlimited,
}

/// One `rate_limit` of the config.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    /// `name` (empty if none): what `replaces` refers to.
    pub(crate) name: String,
    /// The names this rule replaces.
    pub(crate) replaces: Vec<String>,
    /// The unit (`None` only for an unlimited rule).
    pub(crate) unit: Option<TimeUnit>,
    /// `requests_per_unit`.
    pub(crate) requests_per_unit: u32,
    /// How it counts.
    pub(crate) quota: Quota,
    /// `shadow_mode` of its node.
    pub(crate) shadow: bool,
    /// `detailed_metric` of its node.
    pub(crate) detailed_metric: bool,
    /// The metric name of the node: upstream's stat key without the domain,
    /// `key_value.key` (a key-only node is named by its key).
    pub(crate) metric: String,
}

/// One node of the tree.
#[derive(Debug, Clone, Default)]
pub(crate) struct Node {
    /// The node's limit, if it has one.
    pub(crate) rule: Option<Arc<Rule>>,
    /// The level below it.
    pub(crate) children: Level,
}

/// The nodes of one depth below one parent, by key.
#[derive(Debug, Clone, Default)]
pub(crate) struct Level {
    keys: HashMap<String, KeyNodes>,
}

/// The nodes of one key at one level.
#[derive(Debug, Clone, Default)]
struct KeyNodes {
    by_value: HashMap<String, Node>,
    /// `value: prefix*`, in file order.
    wildcards: Vec<(String, Node)>,
    /// No value: any value.
    any: Option<Node>,
}

impl Level {
    /// The node an entry selects: key+value first, then a wildcard value
    /// (first in file order), then the key alone — upstream's order.
    pub(crate) fn find(&self, key: &str, value: &str) -> Option<&Node> {
        let k = self.keys.get(key)?;
        k.by_value
            .get(value)
            .or_else(|| {
                k.wildcards
                    .iter()
                    .find(|(prefix, _)| value.starts_with(prefix.as_str()))
                    .map(|(_, n)| n)
            })
            .or(k.any.as_ref())
    }

    /// Whether the level holds no node.
    pub(crate) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// One domain's tree.
#[derive(Debug, Clone, Default)]
pub(crate) struct Domain {
    /// The domain name.
    pub(crate) name: String,
    /// The file it came from.
    pub(crate) file: String,
    /// The top level.
    pub(crate) root: Level,
}

impl Domain {
    /// The rule for a request descriptor, by upstream's rule: walk the tree
    /// one entry per level; only a node at the descriptor's own depth (its
    /// last entry) applies its limit.
    pub(crate) fn rule_for(&self, entries: &[proto::Entry]) -> Option<&Arc<Rule>> {
        let mut level = &self.root;
        let last = entries.len().checked_sub(1)?;
        for (i, e) in entries.iter().enumerate() {
            let node = level.find(&e.key, &e.value)?;
            if i == last {
                return node.rule.as_ref();
            }
            if node.children.is_empty() {
                return None;
            }
            level = &node.children;
        }
        None
    }
}

/// Every loaded domain: what one (re)load produced.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    domains: HashMap<String, Domain>,
}

impl Plan {
    /// The domain named `name`.
    pub(crate) fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// Loads `files` (each one domain); two files with one domain are an
    /// error, as upstream.
    pub fn load(files: &[impl AsRef<Path>]) -> Result<Self, ConfigError> {
        let mut texts = Vec::with_capacity(files.len());
        for f in files {
            let f = f.as_ref();
            let name = f.display().to_string();
            let text = std::fs::read_to_string(f)
                .map_err(|e| ConfigError::new(&name, "", format!("cannot read: {e}")))?;
            texts.push((name, text));
        }
        Self::from_texts(&texts)
    }

    /// [`Plan::load`] on file contents already read: `(file name, text)`.
    pub fn from_texts(texts: &[(String, String)]) -> Result<Self, ConfigError> {
        let mut domains: HashMap<String, Domain> = HashMap::new();
        for (file, text) in texts {
            let d = parse(file, text)?;
            if let Some(prev) = domains.get(&d.name) {
                return Err(ConfigError::new(
                    file,
                    "domain",
                    format!("duplicate domain \"{}\" (also in {})", d.name, prev.file),
                ));
            }
            domains.insert(d.name.clone(), d);
        }
        Ok(Self { domains })
    }
}

/// Parses one file's text into its domain.
pub(crate) fn parse(file: &str, text: &str) -> Result<Domain, ConfigError> {
    let de = serde_yaml_ng::Deserializer::from_str(text);
    let root: YamlRoot = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        ConfigError::new(file, path, strip_yaml_path(&e.into_inner().to_string()))
    })?;
    if root.domain.is_empty() {
        return Err(ConfigError::new(file, "domain", "the domain must not be empty"));
    }
    let mut cx = Cx {
        file,
        names: Vec::new(),
    };
    let level = cx.level(&root.descriptors, "descriptors", "")?;
    Ok(Domain {
        name: root.domain,
        file: file.to_owned(),
        root: level,
    })
}

/// The YAML parser's message without its own path prefix (the path is
/// already in the error, exactly).
fn strip_yaml_path(msg: &str) -> String {
    match msg.split_once(": ") {
        Some((head, rest)) if !head.contains(' ') && !head.is_empty() => rest.to_owned(),
        _ => msg.to_owned(),
    }
}

struct Cx<'a> {
    file: &'a str,
    names: Vec<String>,
}

impl Cx<'_> {
    fn err(&self, path: &str, problem: impl Into<String>) -> ConfigError {
        ConfigError::new(self.file, path, problem)
    }

    fn level(&mut self, nodes: &[YamlDescriptor], path: &str, metric: &str) -> Result<Level, ConfigError> {
        let mut level = Level::default();
        for (i, d) in nodes.iter().enumerate() {
            let here = format!("{path}[{i}]");
            if d.key.is_empty() {
                return Err(self.err(&format!("{here}.key"), "the descriptor key must not be empty"));
            }
            let name = match &d.value {
                Some(v) => format!("{}_{v}", d.key),
                None => d.key.clone(),
            };
            let metric = if metric.is_empty() {
                name
            } else {
                format!("{metric}.{name}")
            };
            let rule = match &d.rate_limit {
                Some(rl) => Some(Arc::new(self.rule(
                    rl,
                    d,
                    &format!("{here}.rate_limit"),
                    &metric,
                )?)),
                None => None,
            };
            let children = self.level(&d.descriptors, &format!("{here}.descriptors"), &metric)?;
            let node = Node { rule, children };
            let slot = level.keys.entry(d.key.clone()).or_default();
            let duplicate = match &d.value {
                None => slot.any.replace(node).is_some(),
                Some(v) => match v.strip_suffix('*') {
                    Some(prefix) => {
                        let dup = slot.wildcards.iter().any(|(p, _)| p == prefix);
                        slot.wildcards.push((prefix.to_owned(), node));
                        dup
                    }
                    None => slot.by_value.insert(v.clone(), node).is_some(),
                },
            };
            if duplicate {
                return Err(self.err(&here, format!("duplicate descriptor composite key \"{metric}\"")));
            }
        }
        Ok(level)
    }

    fn rule(
        &mut self,
        rl: &YamlRateLimit,
        d: &YamlDescriptor,
        path: &str,
        metric: &str,
    ) -> Result<Rule, ConfigError> {
        let unit = match rl.unit.as_deref() {
            None => None,
            Some(u) => Some(
                TimeUnit::parse(u)
                    .ok_or_else(|| self.err(&format!("{path}.unit"), format!("unknown unit \"{u}\"")))?,
            ),
        };
        let name = rl.name.clone().unwrap_or_default();
        let mut replaces = Vec::with_capacity(rl.replaces.len());
        for (i, r) in rl.replaces.iter().enumerate() {
            let at = format!("{path}.replaces[{i}].name");
            if r.name.is_empty() {
                return Err(self.err(&at, "a replaces entry must name a limit"));
            }
            if r.name == name {
                return Err(self.err(&at, "a limit cannot replace itself"));
            }
            replaces.push(r.name.clone());
        }
        if !name.is_empty() {
            self.names.push(name.clone());
        }
        let quota = if rl.unlimited {
            if unit.is_some() {
                return Err(self.err(&format!("{path}.unit"), "an unlimited limit has no unit"));
            }
            Quota::Unlimited
        } else {
            let unit = unit.ok_or_else(|| {
                self.err(
                    &format!("{path}.unit"),
                    "a unit is required (second, minute, hour or day) unless unlimited",
                )
            })?;
            if rl.requests_per_unit == 0 {
                Quota::Blocked
            } else {
                let limits = unit.limits(rl.requests_per_unit);
                let template = LimitTemplate::new(&limits)
                    .map_err(|e| self.err(&format!("{path}.requests_per_unit"), e.to_string()))?;
                Quota::Limited { template }
            }
        };
        Ok(Rule {
            name,
            replaces,
            unit,
            requests_per_unit: rl.requests_per_unit,
            quota,
            shadow: d.shadow_mode,
            detailed_metric: d.detailed_metric,
            metric: metric.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests;
