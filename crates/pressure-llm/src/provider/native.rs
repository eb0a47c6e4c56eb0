//! An agent's own request sent to a provider of its own wire (an
//! Anthropic Messages request to an `anthropic` provider, a Responses
//! request to an `openai-responses` one): its body as it came, with the
//! provider's `model` and the call's `stream` set ([`native_body`]), and
//! the few headers of the agent's request that go with it
//! ([`PASSED_HEADERS`]).

use http::header::{HeaderName, HeaderValue};
use serde::Serialize;
use serde_json::{Map, Value};

use super::types::NativeRequest;

/// The headers of an agent's request that reach a provider of its own wire:
/// Anthropic's `anthropic-version` and `anthropic-beta` (the features a
/// request relies on), valid as HTTP; never a credential or anything else.
pub(crate) const PASSED_HEADERS: [&str; 2] = ["anthropic-version", "anthropic-beta"];

/// `name: value` as a header to pass on, if it is one of
/// [`PASSED_HEADERS`] and valid.
pub(super) fn passed_header(name: &str, value: &str) -> Option<(HeaderName, HeaderValue)> {
    let known = PASSED_HEADERS.iter().find(|h| h.eq_ignore_ascii_case(name))?;
    let value = HeaderValue::from_str(value).ok()?;
    Some((HeaderName::from_static(known), value))
}

/// The agent's own body with the provider's `model` and the call's
/// `stream` set; every other field as it came.
pub(super) fn native_body(
    native: &NativeRequest,
    model: &str,
    streaming: bool,
) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&NativeBody {
        body: &native.body,
        model,
        streaming,
    })
}

/// The agent's body as [`native_body`] writes it, serialised in place (no
/// copy of a prompt that may be megabytes).
struct NativeBody<'a> {
    body: &'a Map<String, Value>,
    model: &'a str,
    streaming: bool,
}

impl Serialize for NativeBody<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("model", self.model)?;
        if self.streaming {
            map.serialize_entry("stream", &true)?;
        }
        for (k, v) in self.body {
            if k != "model" && k != "stream" {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
}
