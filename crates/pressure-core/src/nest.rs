//! [`Nest`]: resources charged together, all or nothing — a key inside its
//! tenant inside the tenant's parents (nested budgets).
//!
//! Placeholder form: levels are taken in turn and the ones taken are given
//! back when a later one refuses. The backend's atomic nested acquisition
//! replaces it.

use crate::acquisition::{AcquireOptions, Acquisition};
use crate::backend::{Backend, Denial};
use crate::entry::Permit;
use crate::error::Error;
use crate::handle::ResourceHandle;
use crate::MemoryBackend;

/// Resources charged together, all or nothing; innermost first (key,
/// tenant, parent, …, root).
#[derive(Debug)]
pub struct Nest<B: Backend = MemoryBackend> {
    levels: Vec<ResourceHandle<B>>,
}

impl<B: Backend> Clone for Nest<B> {
    fn clone(&self) -> Self {
        Self {
            levels: self.levels.clone(),
        }
    }
}

/// The outcome of [`Nest::try_acquire`].
#[derive(Debug)]
pub enum NestAcquisition<B: Backend = MemoryBackend> {
    /// One permit per level, in the order of the levels.
    Granted(Vec<Permit<B>>),
    /// Nothing was consumed on any level; `level` indexes [`Nest::levels`].
    Denied {
        /// The refusing level.
        level: usize,
        /// Its denial.
        denial: Denial,
    },
}

/// A level could not be asked (its store failed, or the demand can never
/// fit it).
#[derive(Debug, thiserror::Error)]
#[error("level {level}: {error}")]
pub struct NestError {
    /// The failing level.
    pub level: usize,
    /// Why.
    pub error: Error,
}

impl<B: Backend> Nest<B> {
    /// The nest of `levels`, innermost first.
    pub fn new(levels: Vec<ResourceHandle<B>>) -> Self {
        Self { levels }
    }

    /// The levels, innermost first.
    pub fn levels(&self) -> &[ResourceHandle<B>] {
        &self.levels
    }

    /// One reservation of `opts` on every level, or none.
    pub async fn try_acquire(&self, opts: AcquireOptions) -> Result<NestAcquisition<B>, NestError> {
        let mut taken: Vec<Permit<B>> = Vec::with_capacity(self.levels.len());
        for (level, h) in self.levels.iter().enumerate() {
            let out = h.try_acquire(opts).await;
            let refused = match out {
                Ok(Acquisition::Granted(p)) => {
                    taken.push(p);
                    continue;
                }
                Ok(Acquisition::Denied(denial)) => Ok(NestAcquisition::Denied { level, denial }),
                Err(error) => Err(NestError { level, error }),
            };
            for (h, p) in self.levels.iter().zip(taken) {
                let _ = h.refund(p.grant()).await;
                drop(p);
            }
            return refused;
        }
        Ok(NestAcquisition::Granted(taken))
    }
}

impl<B: Backend> crate::ResourceBroker<B> {
    /// [`lazy_limit`](crate::ResourceBroker::lazy_limit) placed in `group`
    /// (placeholder: the group is not used yet).
    pub fn lazy_limit_in_group(
        &self,
        resource: &str,
        group: &str,
        template: &crate::LimitTemplate,
    ) -> Result<ResourceHandle<B>, Error> {
        let _ = group;
        self.lazy_limit(resource, template)
    }
}
