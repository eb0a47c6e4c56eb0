//! What the translation of a Messages body to a chat request carries
//! from field to field: the chat request being built ([`Build`]) and what
//! the walk over the body notes beside it ([`Walk`]: the fields dropped,
//! the first content only the Messages wire carries).

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::fields::given;
use crate::provider::Message;

/// What the walk over the body collects beside the translation.
#[derive(Debug, Default)]
pub(super) struct Walk {
    pub(super) dropped: Vec<String>,
    pub(super) seen: HashSet<String>,
    pub(super) native_only: Option<String>,
}

impl Walk {
    /// Names a dropped field or path, once.
    pub(super) fn name(&mut self, name: impl Into<String>) {
        let name = name.into();
        if self.seen.insert(name.clone()) {
            self.dropped.push(name);
        }
    }

    /// Records content only the Messages wire carries (the first one wins).
    pub(super) fn native(&mut self, path: impl Into<String>) {
        if self.native_only.is_none() {
            self.native_only = Some(path.into());
        }
    }

    /// Names `cache_control` if `o` carries one (see the module docs).
    pub(super) fn cache_control(&mut self, o: &Map<String, Value>) {
        if given(o.get("cache_control")).is_some() {
            self.name("cache_control");
        }
    }
}

/// The chat request being built.
#[derive(Debug, Default)]
pub(super) struct Build {
    pub(super) system: Option<String>,
    pub(super) messages: Vec<Message>,
    pub(super) extra: Map<String, Value>,
    /// The custom tools' names, for a `tool_choice` that forces one.
    pub(super) tool_names: Vec<String>,
    pub(super) stream: bool,
}
