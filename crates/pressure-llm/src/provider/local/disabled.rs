//! The engine of a build without the `local-models` cargo feature: no
//! model loads, and the error says which feature would make it.

use std::path::Path;

use super::{LocalEmbeddings, LocalModelError};

/// Never built: [`Engine::load`] always fails.
pub(super) enum Engine {}

impl Engine {
    pub(super) fn load(dir: &Path) -> Result<Self, LocalModelError> {
        Err(LocalModelError::Load {
            path: dir.to_path_buf(),
            reason: "this build of pressure-llm runs no local models (cargo feature `local-models`)"
                .to_owned(),
        })
    }

    pub(super) fn dimensions(&self) -> usize {
        match *self {}
    }

    pub(super) fn max_seq_length(&self) -> usize {
        match *self {}
    }

    pub(super) fn embed(&self, _: &[&str]) -> Result<LocalEmbeddings, LocalModelError> {
        match *self {}
    }
}
