//! The collector: LRU eviction of the cache to a byte limit. It sits above everything it must
//! know: the store (`cas`: what is stored, the pins, the access log), the tree format (what a
//! root reaches) and the pool (whose ready copies pin what they link). None of those knows of
//! it, and the store knows none of the others; one eviction's order is decided here:
//!
//! 1. the pool's ready copies go first (`Pooled`): each pins every blob it links;
//! 2. under `gc.lock`, the temp files of dead processes are swept;
//! 3. pinned roots, and everything they reach, are kept, and so are the blobs this process
//!    holds (`Cache::hold`, exactly those blobs);
//! 4. the rest goes least recently used first (`last_use`), until the limit holds; evicting a
//!    Directory blob evicts its materialized subtree entry with it;
//! 5. subtree entries whose Directory is gone, the access log and the record of code blobs
//!    are tidied.
//!
//! Last use is not tracked by touching blobs (a hardlinked blob's mtime is the staged file's
//! mtime, and tamper detection reads it). Blobs no logged root reaches fall back to their
//! inode's ctime: set when it was installed, and again whenever it gains or loses a hard link
//! (so a blob hardlinked into a root counts as used then). mtime cannot serve: every blob
//! carries `BLOB_MTIME`.

mod last_use;

use crate::cas::{self, Cache, Stored};
use crate::error::Result;
use crate::stage::pool::{self, Pool};
use crate::tree;
use std::collections::HashSet;

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct GcReport {
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub blobs_evicted: u64,
    pub subtrees_evicted: u64,
    pub pinned_roots: u64,
    pub kept_pinned: u64,
    /// Pooled copies dropped first; None when a server holds the cache (`Pooled::Stale`),
    /// whose own eviction drops its copies.
    pub pooled_dropped: Option<u64>,
}

/// Whose pooled copies go first. Each pins every blob it links, so without this step eviction
/// could take nothing a copy holds.
pub enum Pooled<'a> {
    /// This process runs the stager (the server): drain its pool's ready copies, if it has a
    /// pool. Lent copies are discarded when they come back.
    Mine(Option<&'a Pool>),
    /// No stager here (`clonestage gc`): empty a stale `<cache>/pool/`, unless
    /// `server_running()`, asked under `gc.lock` (`pool::empty_stale`).
    Stale(&'a dyn Fn() -> bool),
}

/// Evict least-recently-used blobs until the cache holds at most `max_bytes` (the order above).
pub fn collect(cache: &Cache, pooled: Pooled, max_bytes: u64) -> Result<GcReport> {
    let pooled_dropped = match pooled {
        Pooled::Mine(pool) => Some(pool.map_or(0, Pool::drain) as u64),
        Pooled::Stale(running) => pool::empty_stale(cache, running)?.map(|n| n as u64),
    };
    let lock = cache.lock_gc()?;
    cas::sweep_dead_tmp(cache);
    let stored = cache.inventory(&lock)?;
    let mut report = GcReport {
        bytes_before: stored.iter().map(|s| s.bytes).sum(),
        pooled_dropped,
        ..Default::default()
    };

    // Pinned: everything reachable from a live pin.
    let pinned_roots = cache.pinned(&lock)?;
    report.pinned_roots = pinned_roots.len() as u64;
    let mut pinned = HashSet::new();
    let mut seen = HashSet::new();
    for r in &pinned_roots {
        tree::reachable(cache, r, &mut seen, &mut |d| {
            pinned.insert(d);
        });
    }
    pinned.extend(cache.held(&lock));

    let uses = last_use::LastUse::read(cache);
    let mut order: Vec<&Stored> = stored.iter().collect();
    order.sort_by_key(|s| (uses.of(&s.digest).unwrap_or(s.ctime), s.bytes));
    let mut total = report.bytes_before;
    for s in order {
        if total <= max_bytes {
            break;
        }
        if pinned.contains(&s.digest) {
            report.kept_pinned += 1;
            continue;
        }
        cache.remove_stored(&lock, s);
        if cache.remove_subtree(&lock, &cache.subtree_path(&s.digest)) {
            report.subtrees_evicted += 1;
        }
        total -= s.bytes;
        report.blobs_evicted += 1;
    }
    report.bytes_after = total;

    // Subtrees whose Directory blob is gone can never be reached again.
    for (d, entry) in cache.subtree_entries(&lock) {
        match d {
            Some(d) if cache.contains(&d) || pinned.contains(&d) => {}
            _ => {
                if cache.remove_subtree(&lock, &entry) {
                    report.subtrees_evicted += 1;
                }
            }
        }
    }

    cache.rewrite_accesses(&lock, &uses.compacted(cache))?;
    if report.blobs_evicted > 0 {
        cache.forget_removed_code(&lock);
    }
    drop(lock);
    Ok(report)
}

#[cfg(test)]
mod tests;
