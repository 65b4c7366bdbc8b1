//! A staged root as the stager hands it over: what it holds (its pin, the cache inodes it
//! hardlinked, the copies it took from the pool, the shared directories linked into it) and what the caller does with it after the
//! action (`check_inputs`, `take_loans`).

use super::place;
use super::pool::{Loan, Pool};
use super::tamper;
use crate::cas::{Cache, PinGuard};
use crate::digest::Digest;
use crate::ledger::Ledger;
use crate::shared::Lease;
use crate::stats::Counters;
use std::path::PathBuf;
use std::sync::Arc;

/// A staged root. Keeps its tree pinned until dropped; call `check_inputs` after the action.
pub struct StagedRoot {
    pub root: Digest,
    pub dest: PathBuf,
    /// The request's working directory as real directories from the root (no symlink).
    pub working_dir: String,
    pub counters: Counters,
    pub micros: u64,
    pub(super) linked: Vec<(Digest, place::Inode)>,
    pub(super) linked_unique: std::sync::OnceLock<Vec<(Digest, place::Inode)>>,
    /// `Cache::quarantine_mark()` before anything was linked (see `tamper`).
    pub(super) quarantine_mark: usize,
    /// The stager's: `check_inputs` counts what it quarantined there.
    pub(super) ledger: Arc<Ledger>,
    pub(super) cache: Arc<Cache>,
    /// Copies taken from the pool (see `take_loans`).
    pub(super) loans: Vec<Loan>,
    pub(super) pool: Option<Arc<Pool>>,
    /// The shared cache directories linked into this root, held until it is dropped.
    pub(super) shared: Option<Lease>,
    pub(super) _pin: PinGuard,
}

impl Drop for StagedRoot {
    fn drop(&mut self) {
        // Loans nobody took to return go with the root.
        if let Some(pool) = &self.pool {
            for l in self.loans.drain(..) {
                pool.abandon(l);
            }
        }
    }
}

impl StagedRoot {
    /// The shared cache directories linked into this root: (action-relative path, the
    /// persistent directory it links to).
    pub fn shared_dirs(&self) -> &[(String, PathBuf)] {
        self.shared.as_ref().map_or(&[], |l| l.dirs())
    }

    /// Let go of the shared directories (a clear waits for every root holding one).
    pub fn release_shared(&mut self) {
        self.shared = None;
    }

    /// How many subtrees this root took from the pool.
    pub fn pooled(&self) -> usize {
        self.loans.len()
    }

    /// The copies this root took from the pool, to hand to `Pool::recycle` once the action
    /// has ended (with `dest` still in place): the caller owns returning them from here.
    pub fn take_loans(&mut self) -> Vec<Loan> {
        std::mem::take(&mut self.loans)
    }

    /// After the action: quarantine every hardlinked cache inode it wrote through, and return
    /// the digests of every hardlinked input this root held that was tampered with: written
    /// through here, or by another root sharing the inode (quarantined by whoever checked
    /// first). Empty when nothing was touched or nothing was hardlinked; a result built from a
    /// root with a non-empty answer must not be trusted or cached.
    pub fn check_inputs(&self) -> Vec<Digest> {
        let found = tamper::check(&self.cache, self.linked_inodes(), self.quarantine_mark);
        if found.quarantined_here > 0 {
            // The quarantine itself happened above, synchronously; only the count waits.
            let n = found.quarantined_here as u64;
            self.ledger.add(|c| c.tampered += n);
        }
        found.tainted
    }

    /// How many distinct cache inodes are hardlinked into this root.
    pub fn hardlinked_inodes(&self) -> usize {
        self.linked_inodes().len()
    }

    /// The distinct hardlinked cache inodes, sorted once on first use (after the stage).
    fn linked_inodes(&self) -> &[(Digest, place::Inode)] {
        self.linked_unique.get_or_init(|| {
            let mut v = self.linked.clone();
            v.sort_unstable();
            v.dedup();
            v
        })
    }
}
