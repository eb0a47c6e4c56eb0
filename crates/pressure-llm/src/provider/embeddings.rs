//! Embeddings: OpenAI's `POST {baseUrl}/embeddings` wire format and its call
//! on a [`ProviderClient`], with the same connection pool, API key and
//! per-phase timeouts (pool wait, connect, write, first byte, read between
//! body chunks) as a chat completion, all cut by the caller's deadline.
//!
//! Only the fields the stack reads are typed; the rest (`user`, vendor
//! extensions) passes through in `extra`. The vectors are kept as JSON
//! ([`Embedding::embedding`]): an array of floats, or a base64 string when
//! the caller asked for `encoding_format: "base64"`, passed back unchanged.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::time::{timeout_at, Instant};

use super::body::bound;
use super::client::ProviderClient;
use super::error::CallError;
use super::local::LocalModel;
use super::ratelimit::RateLimitHints;
use super::tag::CallTag;
use crate::taxonomy::{ErrorKind, TimeoutPhase};

/// The most inputs one request may carry (OpenAI's limit).
pub const MAX_EMBEDDING_INPUTS: usize = 2048;

/// An embeddings request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmbeddingRequest {
    /// The provider's model name (a use case name at the gateway).
    pub model: String,
    /// What to embed.
    pub input: EmbeddingInput,
    /// `float` (default) or `base64`; passed to the provider as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding_format: Option<String>,
    /// The length of the vectors (models that support shortening).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<u32>,
    /// Every other field, passed through unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// OpenAI's four forms of `input`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EmbeddingInput {
    /// One text.
    Text(String),
    /// Several texts, one vector each.
    Texts(Vec<String>),
    /// One input given as token ids.
    Tokens(Vec<u32>),
    /// Several inputs given as token ids.
    TokenArrays(Vec<Vec<u32>>),
}

/// One input of an [`EmbeddingInput`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputItem<'a> {
    /// A text, to be counted with the model's tokenizer.
    Text(&'a str),
    /// Token ids: the count is their number.
    Tokens(&'a [u32]),
}

impl EmbeddingInput {
    /// The inputs, one per vector of the answer.
    pub fn items(&self) -> Vec<InputItem<'_>> {
        match self {
            Self::Text(t) => vec![InputItem::Text(t)],
            Self::Texts(ts) => ts.iter().map(|t| InputItem::Text(t)).collect(),
            Self::Tokens(ids) => vec![InputItem::Tokens(ids)],
            Self::TokenArrays(arrays) => arrays.iter().map(|a| InputItem::Tokens(a)).collect(),
        }
    }

    /// How many vectors the answer holds.
    pub fn len(&self) -> usize {
        match self {
            Self::Text(_) | Self::Tokens(_) => 1,
            Self::Texts(ts) => ts.len(),
            Self::TokenArrays(arrays) => arrays.len(),
        }
    }

    /// Whether there is nothing to embed (an empty array).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A request OpenAI itself would refuse: what the 400 says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InvalidEmbeddingRequest {
    /// The offending parameter (`input`, `dimensions`, ...).
    pub param: &'static str,
    /// OpenAI's error code.
    pub code: &'static str,
    /// What is wrong.
    pub message: String,
}

impl EmbeddingRequest {
    /// A request for `model` with `input` and nothing else set.
    pub fn new(model: impl Into<String>, input: EmbeddingInput) -> Self {
        Self {
            model: model.into(),
            input,
            encoding_format: None,
            dimensions: None,
            extra: Map::new(),
        }
    }

    /// Checks what a provider would refuse, so that it is refused without
    /// a call: an empty `model`, no input (empty array, empty text, empty
    /// token list), more than [`MAX_EMBEDDING_INPUTS`] inputs, an
    /// `encoding_format` other than `float`/`base64`, `dimensions` < 1.
    pub fn validate(&self) -> Result<(), InvalidEmbeddingRequest> {
        let bad = |param, code, message: String| InvalidEmbeddingRequest { param, code, message };
        if self.model.is_empty() {
            return Err(bad(
                "model",
                "missing_required_parameter",
                "you must provide a model parameter".into(),
            ));
        }
        if self.input.is_empty() {
            return Err(bad(
                "input",
                "invalid_value",
                "'input' must not be an empty array".into(),
            ));
        }
        if self.input.len() > MAX_EMBEDDING_INPUTS {
            return Err(bad(
                "input",
                "invalid_value",
                format!(
                    "'input' has {} items; at most {MAX_EMBEDDING_INPUTS} are allowed",
                    self.input.len()
                ),
            ));
        }
        for (i, item) in self.input.items().into_iter().enumerate() {
            let empty = match item {
                InputItem::Text(t) => t.is_empty(),
                InputItem::Tokens(ids) => ids.is_empty(),
            };
            if empty {
                let which = match self.input {
                    EmbeddingInput::Text(_) | EmbeddingInput::Tokens(_) => "'input'".to_owned(),
                    _ => format!("'input[{i}]'"),
                };
                return Err(bad(
                    "input",
                    "invalid_value",
                    format!("{which} must not be empty"),
                ));
            }
        }
        if let Some(f) = self.encoding_format.as_deref() {
            if !matches!(f, "float" | "base64") {
                return Err(bad(
                    "encoding_format",
                    "invalid_value",
                    format!("'encoding_format' must be \"float\" or \"base64\", not {f:?}"),
                ));
            }
        }
        if self.dimensions == Some(0) {
            return Err(bad(
                "dimensions",
                "invalid_value",
                "'dimensions' must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// An embeddings answer (`object: "list"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmbeddingResponse {
    /// `list`.
    #[serde(default)]
    pub object: String,
    /// One vector per input, in input order.
    pub data: Vec<Embedding>,
    /// The model that answered.
    #[serde(default)]
    pub model: String,
    /// Token accounting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<EmbeddingUsage>,
    /// Every other field, passed through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One vector of an [`EmbeddingResponse`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Embedding {
    /// `embedding`.
    #[serde(default)]
    pub object: String,
    /// The position of its input.
    #[serde(default)]
    pub index: u32,
    /// The vector: an array of floats, or a base64 string of little-endian
    /// `f32`s (`encoding_format: "base64"`), as the provider sent it.
    pub embedding: Value,
    /// Every other field, passed through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Token accounting of an embeddings call (input only).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmbeddingUsage {
    /// Input tokens.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// The same figure (embeddings produce no output tokens).
    #[serde(default)]
    pub total_tokens: u64,
    /// Every other field, passed through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A successful embeddings call.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingCompletion {
    /// The parsed answer.
    pub response: EmbeddingResponse,
    /// From the start of the call (including pool wait) to the response head.
    pub ttft: std::time::Duration,
    /// From the start of the call to the last body byte.
    pub total: std::time::Duration,
    /// The rate-limit hints of the response headers.
    pub ratelimit: RateLimitHints,
}

impl ProviderClient {
    /// An embeddings call (`POST {baseUrl}/embeddings`), bounded per phase
    /// and by `deadline`, sending `tag` as `x-pressure-*` headers. A non-2xx
    /// answer, or a 2xx body without `data`, is a classified [`CallError`].
    pub async fn embed_tagged(
        &self,
        req: &EmbeddingRequest,
        deadline: Instant,
        tag: &CallTag,
    ) -> Result<EmbeddingCompletion, CallError> {
        if let Some(model) = self.local_model() {
            return self.embed_local(model, req, deadline).await;
        }
        let uri = self
            .embeddings_uri()
            .map_err(|e| CallError::transport(ErrorKind::BadRequest, e))?;
        let body = serde_json::to_vec(req).map_err(|e| {
            CallError::transport(ErrorKind::BadRequest, format!("serialising the request: {e}"))
        })?;
        let done = self
            .send_to(uri, body, false, deadline, tag)
            .await?
            .read_all(self.timeouts().read(), deadline)
            .await?;
        match serde_json::from_slice::<EmbeddingResponse>(&done.bytes) {
            Ok(response) => Ok(EmbeddingCompletion {
                response,
                ttft: done.first_byte,
                total: done.total,
                ratelimit: done.ratelimit,
            }),
            Err(e) => Err(done.undecodable("malformed embeddings answer", e)),
        }
    }

    /// A `local` provider's embeddings call: the same connection slots
    /// (`maxConnections` inferences at once, a slot waited for within
    /// `poolWaitMs`), the inference run on tokio's blocking pool and bounded
    /// by `firstByteMs` and the deadline (a timed-out inference still runs
    /// to its end and keeps its slot until then, so the slots bound the CPU
    /// work). Text inputs only; `dimensions`, when given, must be the
    /// model's; `encoding_format: "base64"` is honoured. `usage` counts the
    /// tokenizer's tokens. An inference error is a `Server` failure (it
    /// counts against the breaker like a provider's 500).
    async fn embed_local(
        &self,
        model: &Arc<LocalModel>,
        req: &EmbeddingRequest,
        deadline: Instant,
    ) -> Result<EmbeddingCompletion, CallError> {
        let started = Instant::now();
        let texts: Vec<String> = match &req.input {
            EmbeddingInput::Text(t) => vec![t.clone()],
            EmbeddingInput::Texts(ts) => ts.clone(),
            EmbeddingInput::Tokens(_) | EmbeddingInput::TokenArrays(_) => {
                return Err(CallError::refused(
                    Some("input"),
                    "a local model takes text inputs, not token ids",
                ))
            }
        };
        if let Some(d) = req.dimensions {
            if usize::try_from(d).ok() != Some(model.dimensions()) {
                return Err(CallError::refused(
                    Some("dimensions"),
                    format!(
                        "this model's vectors have {} dimensions, not {d}",
                        model.dimensions()
                    ),
                ));
            }
        }
        let base64 = match req.encoding_format.as_deref() {
            None | Some("float") => false,
            Some("base64") => true,
            Some(f) => {
                return Err(CallError::refused(
                    Some("encoding_format"),
                    format!("'encoding_format' must be \"float\" or \"base64\", not {f:?}"),
                ))
            }
        };
        let permit = self.slot(started, deadline).await?;
        let (at, phase) = bound(TimeoutPhase::FirstByte, self.timeouts().first_byte(), deadline);
        let job = {
            let model = Arc::clone(model);
            tokio::task::spawn_blocking(move || {
                let _slot = permit;
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                model.embed(&refs)
            })
        };
        let ms = |s: Instant| s.elapsed().as_millis();
        let embedded = match timeout_at(at, job).await {
            Ok(Ok(Ok(e))) => e,
            Ok(Ok(Err(e))) => return Err(local_failure(e.to_string())),
            Ok(Err(e)) => return Err(local_failure(format!("the inference task failed: {e}"))),
            Err(_) => {
                return Err(CallError::timeout(
                    phase,
                    format!("local model: no vectors after {} ms", ms(started)),
                ))
            }
        };
        let tokens: u64 = embedded.tokens.iter().sum();
        let data = embedded
            .vectors
            .into_iter()
            .enumerate()
            .map(|(i, v)| Embedding {
                object: "embedding".to_owned(),
                index: u32::try_from(i).unwrap_or(u32::MAX),
                embedding: if base64 {
                    base64_vector(&v)
                } else {
                    float_vector(&v)
                },
                extra: Map::new(),
            })
            .collect();
        let elapsed = started.elapsed();
        Ok(EmbeddingCompletion {
            response: EmbeddingResponse {
                object: "list".to_owned(),
                data,
                model: req.model.clone(),
                usage: Some(EmbeddingUsage {
                    prompt_tokens: tokens,
                    total_tokens: tokens,
                    extra: Map::new(),
                }),
                extra: Map::new(),
            },
            ttft: elapsed,
            total: elapsed,
            ratelimit: RateLimitHints::default(),
        })
    }

    /// [`embed_tagged`](Self::embed_tagged) without a tag.
    pub async fn embed(
        &self,
        req: &EmbeddingRequest,
        deadline: Instant,
    ) -> Result<EmbeddingCompletion, CallError> {
        self.embed_tagged(req, deadline, &CallTag::default()).await
    }
}

/// A failed local inference: a server-side failure of the provider.
fn local_failure(message: String) -> CallError {
    CallError::transport(
        ErrorKind::Server {
            status: 500,
            retry_after: None,
        },
        message,
    )
}

/// A vector as a JSON array of floats (`encoding_format: "float"`).
fn float_vector(v: &[f32]) -> Value {
    Value::Array(v.iter().map(|&x| Value::from(f64::from(x))).collect())
}

/// A vector as base64 of its little-endian `f32`s (`encoding_format: "base64"`).
fn base64_vector(v: &[f32]) -> Value {
    use base64::Engine as _;
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
}

impl Embedding {
    /// The vector as floats: from a JSON array of numbers, or from base64
    /// of little-endian `f32`s; `None` when it is neither.
    pub fn vector(&self) -> Option<Vec<f32>> {
        match &self.embedding {
            Value::Array(xs) => xs.iter().map(|x| x.as_f64().map(|f| f as f32)).collect(),
            Value::String(s) => {
                use base64::Engine as _;
                let bytes = base64::engine::general_purpose::STANDARD.decode(s).ok()?;
                (bytes.len() % 4 == 0).then(|| {
                    bytes
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect()
                })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> EmbeddingRequest {
        serde_json::from_value(v).expect("valid request")
    }

    #[test]
    fn the_four_input_forms_parse() {
        let r = parse(serde_json::json!({"model": "m", "input": "hi"}));
        assert_eq!(r.input, EmbeddingInput::Text("hi".into()));
        let r = parse(serde_json::json!({"model": "m", "input": ["a", "b"]}));
        assert_eq!(r.input.len(), 2);
        let r = parse(serde_json::json!({"model": "m", "input": [1, 2, 3]}));
        assert_eq!(r.input, EmbeddingInput::Tokens(vec![1, 2, 3]));
        let r = parse(serde_json::json!({"model": "m", "input": [[1], [2, 3]]}));
        assert_eq!(
            r.input.items(),
            vec![InputItem::Tokens(&[1]), InputItem::Tokens(&[2, 3])]
        );
        assert!(serde_json::from_value::<EmbeddingRequest>(
            serde_json::json!({"model": "m", "input": [1, "a"]})
        )
        .is_err());
    }

    #[test]
    fn validation_names_the_parameter() {
        let param = |v: Value| parse(v).validate().err().map(|e| e.param);
        assert_eq!(param(serde_json::json!({"model": "m", "input": "x"})), None);
        assert_eq!(
            param(serde_json::json!({"model": "m", "input": []})),
            Some("input")
        );
        assert_eq!(
            param(serde_json::json!({"model": "m", "input": ""})),
            Some("input")
        );
        assert_eq!(
            param(serde_json::json!({"model": "m", "input": ["a", ""]})),
            Some("input")
        );
        assert_eq!(
            param(serde_json::json!({"model": "m", "input": [[]]})),
            Some("input")
        );
        assert_eq!(
            param(serde_json::json!({"model": "m", "input": "x", "dimensions": 0})),
            Some("dimensions")
        );
        assert_eq!(
            param(serde_json::json!({"model": "m", "input": "x", "encoding_format": "hex"})),
            Some("encoding_format")
        );
        assert_eq!(
            param(serde_json::json!({"model": "m", "input": "x", "encoding_format": "base64"})),
            None
        );
    }

    #[test]
    fn the_url_is_next_to_chat_completions() {
        let u = super::super::remote::embeddings_url("http://h:1/v1/chat/completions").expect("url");
        assert_eq!(u.to_string(), "http://h:1/v1/embeddings");
        assert!(super::super::remote::embeddings_url("http://h:1/v1/messages").is_err());
    }
}
