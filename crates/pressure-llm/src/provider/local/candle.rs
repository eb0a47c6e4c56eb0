//! The candle engine of [`LocalModel`](super::LocalModel): BERT on the
//! CPU, the `tokenizers` crate (pure Rust: its `fancy-regex` backend, no
//! Oniguruma), weights read from `model.safetensors` whole (no mmap: the
//! workspace forbids `unsafe`).

use std::path::Path;

use super::{LocalEmbeddings, LocalModelError};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config as BertConfig, DTYPE};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

/// Inputs embedded in one forward pass (padded to the longest of them).
const BATCH: usize = 16;

/// The truncation length when the model directory has no
/// `sentence_bert_config.json` (sentence-transformers' own default is the
/// tokenizer's limit; BERT's position table is the hard bound).
const DEFAULT_MAX_SEQ_LENGTH: usize = 256;

/// `sentence_bert_config.json`: the truncation length.
#[derive(serde::Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
}

/// `1_Pooling/config.json`: which pooling the model was trained with.
#[derive(serde::Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
}

/// One entry of `modules.json`.
#[derive(serde::Deserialize)]
struct Module {
    #[serde(rename = "type")]
    kind: String,
}

fn load_error(path: &Path, reason: impl Into<String>) -> LocalModelError {
    LocalModelError::Load {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn inference(e: impl std::fmt::Display) -> LocalModelError {
    LocalModelError::Inference(e.to_string())
}

/// The JSON file at `path`, parsed; `Ok(None)` when it does not exist.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, LocalModelError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| load_error(path, format!("invalid JSON: {e}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(load_error(path, format!("cannot read: {e}"))),
    }
}

/// The JSON file at `path`, which must exist.
fn require_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, LocalModelError> {
    read_json(path)?.ok_or_else(|| load_error(path, "missing (not a sentence-transformers model directory?)"))
}

/// A sentence-transformers BERT model, loaded.
pub(super) struct Engine {
    tokenizer: Tokenizer,
    bert: BertModel,
    device: Device,
    max_seq_length: usize,
    dimensions: usize,
    normalize: bool,
}

impl Engine {
    /// Loads the model in `dir`: its BERT configuration, tokenizer, pooling,
    /// normalisation and truncation length, and its weights (read whole).
    pub(super) fn load(dir: &Path) -> Result<Self, LocalModelError> {
        let config: BertConfig = require_json(&dir.join("config.json"))?;
        let pooling_path = dir.join("1_Pooling").join("config.json");
        if let Some(p) = read_json::<PoolingConfig>(&pooling_path)? {
            if !p.pooling_mode_mean_tokens
                || p.pooling_mode_cls_token
                || p.pooling_mode_max_tokens
                || p.pooling_mode_mean_sqrt_len_tokens
            {
                return Err(load_error(
                    &pooling_path,
                    "only mean pooling (pooling_mode_mean_tokens alone) is supported",
                ));
            }
        }
        let normalize = match read_json::<Vec<Module>>(&dir.join("modules.json"))? {
            Some(modules) => modules.iter().any(|m| m.kind.ends_with(".Normalize")),
            None => true,
        };
        let st_path = dir.join("sentence_bert_config.json");
        let max_seq_length = read_json::<SentenceBertConfig>(&st_path)?
            .and_then(|c| c.max_seq_length)
            .unwrap_or(DEFAULT_MAX_SEQ_LENGTH);
        if max_seq_length < 2 || max_seq_length > config.max_position_embeddings {
            return Err(load_error(
                &st_path,
                format!(
                    "max_seq_length {max_seq_length} must be between 2 and the model's {} positions",
                    config.max_position_embeddings
                ),
            ));
        }
        let tokenizer = load_tokenizer(&dir.join("tokenizer.json"), max_seq_length)?;
        let weights_path = dir.join("model.safetensors");
        let weights = std::fs::read(&weights_path)
            .map_err(|e| load_error(&weights_path, format!("cannot read: {e}")))?;
        let device = Device::Cpu;
        let vb = VarBuilder::from_buffered_safetensors(weights, DTYPE, &device)
            .map_err(|e| load_error(&weights_path, e.to_string()))?;
        let bert = BertModel::load(vb, &config).map_err(|e| load_error(&weights_path, e.to_string()))?;
        Ok(Self {
            tokenizer,
            bert,
            device,
            max_seq_length,
            dimensions: config.hidden_size,
            normalize,
        })
    }

    pub(super) fn dimensions(&self) -> usize {
        self.dimensions
    }

    pub(super) fn max_seq_length(&self) -> usize {
        self.max_seq_length
    }

    /// Like sentence-transformers, the inputs are batched longest first
    /// (by characters), so that each batch pads little; the vectors come
    /// back in input order.
    pub(super) fn embed(&self, texts: &[&str]) -> Result<LocalEmbeddings, LocalModelError> {
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(texts[i].chars().count()));
        let sorted: Vec<&str> = order.iter().map(|&i| texts[i]).collect();
        let mut done = LocalEmbeddings {
            vectors: Vec::with_capacity(texts.len()),
            tokens: Vec::with_capacity(texts.len()),
        };
        for batch in sorted.chunks(BATCH) {
            self.embed_batch(batch, &mut done)?;
        }
        let mut out = LocalEmbeddings {
            vectors: vec![Vec::new(); texts.len()],
            tokens: vec![0; texts.len()],
        };
        for ((i, v), t) in order.into_iter().zip(done.vectors).zip(done.tokens) {
            out.vectors[i] = v;
            out.tokens[i] = t;
        }
        Ok(out)
    }

    /// One forward pass over `texts`, padded to the longest of them.
    fn embed_batch(&self, texts: &[&str], out: &mut LocalEmbeddings) -> Result<(), LocalModelError> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(inference)?;
        let rows = encodings.len();
        let len = encodings.first().map_or(0, |e| e.get_ids().len());
        let (mut ids, mut types, mut mask) = (
            Vec::with_capacity(rows * len),
            Vec::with_capacity(rows * len),
            Vec::with_capacity(rows * len),
        );
        for e in &encodings {
            if e.get_ids().len() != len {
                return Err(inference("the tokenizer did not pad the batch"));
            }
            ids.extend_from_slice(e.get_ids());
            types.extend_from_slice(e.get_type_ids());
            mask.extend_from_slice(e.get_attention_mask());
            out.tokens
                .push(e.get_attention_mask().iter().map(|&m| u64::from(m)).sum());
        }
        let tensor = |v: Vec<u32>| Tensor::from_vec(v, (rows, len), &self.device).map_err(inference);
        let (ids, types, mask) = (tensor(ids)?, tensor(types)?, tensor(mask)?);
        let hidden = self.bert.forward(&ids, &types, Some(&mask)).map_err(inference)?;
        let pooled = mean_pool(&hidden, &mask).map_err(inference)?;
        let pooled = if self.normalize {
            l2_normalize(&pooled).map_err(inference)?
        } else {
            pooled
        };
        out.vectors.extend(pooled.to_vec2::<f32>().map_err(inference)?);
        Ok(())
    }
}

/// The tokenizer of `path`, truncating to `max_len` tokens and padding a
/// batch to its longest input (whatever fixed padding the file sets).
fn load_tokenizer(path: &Path, max_len: usize) -> Result<Tokenizer, LocalModelError> {
    if !path.is_file() {
        return Err(load_error(
            path,
            "missing (not a sentence-transformers model directory?)",
        ));
    }
    let mut tokenizer = Tokenizer::from_file(path).map_err(|e| load_error(path, e.to_string()))?;
    let padding = tokenizer.get_padding().cloned().unwrap_or_default();
    tokenizer.with_padding(Some(PaddingParams {
        strategy: PaddingStrategy::BatchLongest,
        pad_to_multiple_of: None,
        ..padding
    }));
    let truncation = tokenizer.get_truncation().cloned().unwrap_or_default();
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: max_len,
            stride: 0,
            ..truncation
        }))
        .map_err(|e| load_error(path, e.to_string()))?;
    Ok(tokenizer)
}

/// The mean of `hidden` (batch, tokens, dims) over the tokens whose `mask`
/// (batch, tokens) is 1: sentence-transformers' mean pooling.
fn mean_pool(hidden: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
    let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
    let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
    let counts = mask.sum(1)?.clamp(1e-9f32, f32::MAX)?;
    summed.broadcast_div(&counts)
}

/// Each row of `x` (batch, dims) divided by its L2 norm (at least 1e-12,
/// as torch's `normalize`).
fn l2_normalize(x: &Tensor) -> candle_core::Result<Tensor> {
    let norm = x.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12f32, f32::MAX)?;
    x.broadcast_div(&norm)
}
