//! Cleanup after an action, in one place. What an action leaves (`Leftovers`: its work dir
//! and its pinned staged root) is removed on every path out by dropping it (`WorkDir`'s and
//! the engine's `StagedRoot`'s drops). After an answered run it is `discard`ed instead: the
//! root is unpinned at once, and the work dir handed to the janitor (`janitor`, which decides
//! when) as `Discarded`, with the pooled copies the root took, which go back to the engine's
//! pool first (`return_copies`: proven untouched, or discarded) so the next action may take
//! them; the dir itself waits until the server is idle.

use super::workdir::{detach_mounts, WorkDir};
use clonestage_engine::stage::{Loan, Pool};
use clonestage_engine::{Cache, StagedRoot};
use std::path::PathBuf;
use std::sync::Arc;

/// What is left to clean after an action: dropping it removes the work dir and unpins the
/// input root; `discard` unpins and hands the work dir over to the janitor instead.
pub(crate) struct Leftovers {
    pub staged: StagedRoot,
    pub(super) work: WorkDir,
}

/// A finished action's work dir, for the janitor to remove, and the pooled copies its root
/// took, to return before that.
pub(crate) struct Discarded {
    pub dir: PathBuf,
    returning: Option<Returned>,
}

/// Pooled copies to return, and where they are.
struct Returned {
    /// The staged root holding them.
    root: PathBuf,
    loans: Vec<Loan>,
    pool: Arc<Pool>,
    cache: Arc<Cache>,
}

impl Leftovers {
    /// Unpin the root now; the work dir is kept for the janitor. `pool`: the stager's pool,
    /// to which the copies the root took go back first.
    pub fn discard(mut self, pool: Option<&Arc<Pool>>, cache: &Arc<Cache>) -> Discarded {
        let loans = self.staged.take_loans();
        let root = self.staged.dest.clone();
        drop(self.staged);
        let returning = match pool {
            Some(pool) if !loans.is_empty() => Some(Returned {
                root,
                loans,
                pool: pool.clone(),
                cache: cache.clone(),
            }),
            _ => None,
        };
        Discarded {
            dir: self.work.defer(),
            returning,
        }
    }
}

impl Discarded {
    /// Whether pooled copies wait to go back (then `return_copies` comes before removal).
    pub fn has_copies(&self) -> bool {
        self.returning.is_some()
    }

    /// Return the pooled copies to their pool: each proven untouched and kept, or discarded
    /// (counted and logged by the pool; a discarded copy stays in the dir and goes with it).
    pub fn return_copies(&mut self) {
        let Some(r) = self.returning.take() else {
            return;
        };
        let t0 = std::time::Instant::now();
        let n = r.loans.len();
        // The proof reads the copies themselves, not what an action mounted over them; with a
        // mount that stays, none goes back (it could carry the mount into the pool).
        let detached = detach_mounts(&self.dir);
        if let Err(e) = &detached {
            tracing::error!(error = %e, "cannot detach an action's mounts; its pooled copies are discarded");
        }
        for l in r.loans {
            match &detached {
                Ok(()) => drop(r.pool.recycle(&r.cache, &r.root, l)),
                Err(_) => r.pool.abandon(l),
            }
        }
        tracing::debug!(
            copies = n,
            recycle_us = t0.elapsed().as_micros() as u64,
            "pooled copies returned"
        );
    }
}
