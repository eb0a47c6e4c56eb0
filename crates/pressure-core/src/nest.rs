//! [`Nest`]: budgets charged together, all or nothing — an API key's own
//! limits, its tenant, the tenant's team, the organisation at the root.
//! One reservation of the same options on every level in one atomic step of
//! the backend ([`Backend::acquire_nested`]): under one decision in memory,
//! in one script call on Redis and Redis Cluster (where the levels must
//! share a hash slot: register them in one group, see
//! [`crate::ResourceBroker::lazy_limit_in_group`]).

use crate::acquisition::{AcquireOptions, Acquisition};
use crate::backend::{Backend, BackendError, Denial, NestedDecision};
use crate::entry::{Entry, Permit};
use crate::error::Error;
use crate::handle::ResourceHandle;
use crate::limits::Demand;
use crate::MemoryBackend;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Resources charged together, all or nothing; innermost first (key,
/// tenant, parent, …, root).
///
/// A nest of one level is exactly [`ResourceHandle::try_acquire`]. A nest
/// of several is one atomic step of the backend: no level is ever charged
/// unless every level is, and no acquisition (nested or plain) is refused
/// because of another nest's partial charge. In memory, a resource with a
/// single lock-free dimension is moved to its locked layout the first time
/// a nest of several levels charges it (its acquisitions then take a short
/// lock, as every multi-dimension resource's do). On Redis Cluster every
/// level must be in one hash slot: register them in one group.
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

impl<B: Backend> std::fmt::Debug for Nest<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.levels.iter().map(|l| l.id()))
            .finish()
    }
}

/// The result of [`Nest::try_acquire`].
#[derive(Debug)]
pub enum NestAcquisition<B: Backend = MemoryBackend> {
    /// One permit per level, in the order of the levels (each releases,
    /// reconciles, refunds and renews like a permit from
    /// [`ResourceHandle::try_acquire`]).
    Granted(Vec<Permit<B>>),
    /// Nothing was consumed on any level; `level` indexes
    /// [`Nest::levels`].
    Denied {
        /// The first level (innermost first) that refused.
        level: usize,
        /// Its refusal: the dimension, the wait and the cause.
        denial: Denial,
    },
}

impl<B: Backend> NestAcquisition<B> {
    /// Whether every level was charged.
    pub fn allowed(&self) -> bool {
        matches!(self, NestAcquisition::Granted(_))
    }

    /// The permits, when granted.
    pub fn permits(&self) -> Option<&[Permit<B>]> {
        match self {
            NestAcquisition::Granted(p) => Some(p),
            NestAcquisition::Denied { .. } => None,
        }
    }

    /// Takes the permits, when granted.
    pub fn into_permits(self) -> Option<Vec<Permit<B>>> {
        match self {
            NestAcquisition::Granted(p) => Some(p),
            NestAcquisition::Denied { .. } => None,
        }
    }

    /// The refusing level and its denial, when denied.
    pub fn denial(&self) -> Option<(usize, &Denial)> {
        match self {
            NestAcquisition::Granted(_) => None,
            NestAcquisition::Denied { level, denial } => Some((*level, denial)),
        }
    }
}

/// A nested acquisition that could not be decided: `level` is the level
/// whose demand can never fit ([`Error::DemandTooLarge`]) or otherwise
/// failed; a failure of the store for the whole nest (one call) names
/// level 0.
#[derive(Debug, thiserror::Error)]
#[error("level {level}: {error}")]
pub struct NestError {
    /// The level, an index into [`Nest::levels`].
    pub level: usize,
    /// What failed.
    pub error: Error,
}

impl<B: Backend> Nest<B> {
    /// A nest of `levels`, innermost first. Every level must come from the
    /// same broker (one backend).
    pub fn new(levels: Vec<ResourceHandle<B>>) -> Self {
        Self { levels }
    }

    /// The levels, innermost first.
    pub fn levels(&self) -> &[ResourceHandle<B>] {
        &self.levels
    }

    /// One reservation of `opts` on every level, or none. Each level's
    /// demand is built as its own `try_acquire` would build it (its batch
    /// ceiling for a batch caller); a demand that can never fit a level is
    /// an error naming that level, and nothing is charged.
    pub async fn try_acquire(&self, opts: AcquireOptions) -> Result<NestAcquisition<B>, NestError> {
        match self.levels.as_slice() {
            [] => return Ok(NestAcquisition::Granted(Vec::new())),
            [one] => {
                return match one.try_acquire(opts).await {
                    Ok(Acquisition::Granted(p)) => Ok(NestAcquisition::Granted(vec![p])),
                    Ok(Acquisition::Denied(denial)) => Ok(NestAcquisition::Denied { level: 0, denial }),
                    Err(error) => Err(NestError { level: 0, error }),
                };
            }
            _ => {}
        }
        let entries: Vec<&Arc<Entry<B>>> = self.levels.iter().map(|l| l.entry.current()).collect();
        let backend = &entries[0].backend;
        let mut demands: Vec<Demand> = Vec::with_capacity(entries.len());
        for (level, e) in entries.iter().enumerate() {
            if !Arc::ptr_eq(&e.backend, backend) {
                return Err(NestError {
                    level,
                    error: Error::Backend(BackendError::Unsupported(
                        "the levels of a nest must come from one broker".into(),
                    )),
                });
            }
            let demand = e.demand(&opts);
            e.check_size(&demand)
                .map_err(|error| NestError { level, error })?;
            demands.push(demand);
        }
        let pairs: Vec<(&B::Handle, &Demand)> =
            entries.iter().map(|e| &e.handle).zip(demands.iter()).collect();
        match backend.acquire_nested(&pairs).await {
            Ok(NestedDecision::Granted(grants)) if grants.len() == entries.len() => Ok(
                NestAcquisition::Granted(entries.iter().zip(grants).map(|(e, g)| e.permit(g)).collect()),
            ),
            Ok(NestedDecision::Granted(grants)) => {
                // A backend that answered for another number of levels:
                // give back what it granted, then fail.
                for (e, g) in entries.iter().zip(grants) {
                    drop(e.permit(g));
                }
                let error =
                    BackendError::Protocol(format!("a nest of {} levels granted other", entries.len()));
                Err(Self::failed(entries[0], 0, error))
            }
            Ok(NestedDecision::Denied { level, denial }) if level < entries.len() => {
                Ok(NestAcquisition::Denied { level, denial })
            }
            Ok(NestedDecision::Denied { level, .. }) => Err(Self::failed(
                entries[0],
                0,
                BackendError::Protocol(format!("denied at level {level} of {}", entries.len())),
            )),
            Err(error) => Err(Self::failed(entries[0], 0, error)),
        }
    }

    fn failed(e: &Entry<B>, level: usize, error: BackendError) -> NestError {
        e.counters().backend_errors.fetch_add(1, Ordering::Relaxed);
        NestError {
            level,
            error: Error::Backend(error),
        }
    }
}
