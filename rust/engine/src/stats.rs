//! Counters kept across processes in `<cache>/stats.json`: each process adds its deltas under
//! an flock (read, add, rewrite in place), so no update is lost and no inode is created.
//! This file owns the format and the locked update; the one caller that writes is the ledger
//! (`ledger.rs`), which batches a stager's and its runner's deltas until it is flushed.

use crate::error::{IoContext, Result};
use crate::platform;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{Read, Seek, Write};
use std::path::Path;

/// Counters for staging methods and caches. `extra` holds counters other layers add (the
/// server's action counts and histograms) without this crate knowing them.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Counters {
    /// Files (or whole trees, on APFS) cloned with clonefile(2).
    pub clonefile: u64,
    /// Files cloned with FICLONE.
    pub reflink: u64,
    /// Subtrees staged as one btrfs snapshot.
    pub snapshot: u64,
    pub hardlink: u64,
    pub copy: u64,
    /// Empty files created directly (the empty blob is never stored).
    pub empty: u64,
    pub symlinks: u64,
    pub directories: u64,
    /// Bytes of file content placed into roots.
    pub bytes: u64,
    pub subtree_hits: u64,
    pub subtree_misses: u64,
    /// Fallbacks from a preferred method, total and by reason ("exdev", "enotsup", "emlink").
    pub fallbacks: u64,
    pub fallback_reasons: BTreeMap<String, u64>,
    pub stages: u64,
    pub stage_failures: u64,
    pub stage_us_total: u64,
    /// Hardlinked inputs found written through after an action; their blobs were quarantined.
    pub tampered: u64,
    /// The pool of ready subtrees: copies taken, subtrees it had none for, copies proven
    /// untouched and taken back, copies discarded (total and by reason), copies built.
    pub pool_hits: u64,
    pub pool_misses: u64,
    pub pool_recycled: u64,
    pub pool_discarded: u64,
    pub pool_discard_reasons: BTreeMap<String, u64>,
    pub pool_built: u64,
    /// `--preserve-inodes macho`: Mach-O code inputs hardlinked to the cache's inode (also
    /// counted in `hardlink`; taken from the pool inside a copy included), and code inputs
    /// cloned because no link old enough to run was at hand.
    pub code_linked: u64,
    pub code_cloned: u64,
    #[serde(flatten)]
    pub extra: BTreeMap<String, u64>,
}

impl Counters {
    pub fn add(&mut self, o: &Counters) {
        self.clonefile += o.clonefile;
        self.reflink += o.reflink;
        self.snapshot += o.snapshot;
        self.hardlink += o.hardlink;
        self.copy += o.copy;
        self.empty += o.empty;
        self.symlinks += o.symlinks;
        self.directories += o.directories;
        self.bytes += o.bytes;
        self.subtree_hits += o.subtree_hits;
        self.subtree_misses += o.subtree_misses;
        self.fallbacks += o.fallbacks;
        for (k, v) in &o.fallback_reasons {
            *self.fallback_reasons.entry(k.clone()).or_default() += v;
        }
        self.stages += o.stages;
        self.stage_failures += o.stage_failures;
        self.stage_us_total += o.stage_us_total;
        self.tampered += o.tampered;
        self.pool_hits += o.pool_hits;
        self.pool_misses += o.pool_misses;
        self.pool_recycled += o.pool_recycled;
        self.pool_discarded += o.pool_discarded;
        for (k, v) in &o.pool_discard_reasons {
            *self.pool_discard_reasons.entry(k.clone()).or_default() += v;
        }
        self.pool_built += o.pool_built;
        self.code_linked += o.code_linked;
        self.code_cloned += o.code_cloned;
        for (k, v) in &o.extra {
            *self.extra.entry(k.clone()).or_default() += v;
        }
    }

    pub fn pool_discard(&mut self, reason: &str) {
        self.pool_discarded += 1;
        *self
            .pool_discard_reasons
            .entry(reason.to_string())
            .or_default() += 1;
    }

    pub fn fallback(&mut self, reason: &str) {
        self.fallbacks += 1;
        *self.fallback_reasons.entry(reason.to_string()).or_default() += 1;
    }
}

/// Add `delta` to the cache's persistent counters.
pub fn record(cache_root: &Path, delta: &Counters) -> Result<()> {
    update(cache_root, |c| c.add(delta))
}

/// Read-modify-write the persistent counters under an exclusive flock.
pub fn update(cache_root: &Path, f: impl FnOnce(&mut Counters)) -> Result<()> {
    let p = cache_root.join("stats.json");
    let mut file = platform::open_lock(&p).ctx("open", &p)?;
    platform::lock(&file, platform::LockMode::Exclusive).ctx("flock", &p)?;
    let mut text = String::new();
    file.read_to_string(&mut text).ctx("read", &p)?;
    let mut c: Counters = if text.trim().is_empty() {
        Counters::default()
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| {
            tracing::warn!(path = %p.display(), error = %e, "stats file unreadable; starting over");
            Counters::default()
        })
    };
    f(&mut c);
    let body = serde_json::to_vec_pretty(&c).expect("counters serialize");
    file.rewind().ctx("seek", &p)?;
    file.set_len(0).ctx("truncate", &p)?;
    file.write_all(&body).ctx("write", &p)?;
    Ok(())
}

/// The persistent counters (zero if none were recorded yet). Read under a shared flock:
/// `update` truncates and rewrites the file in place, so a reader without the lock can find
/// it empty or half written.
pub fn load(cache_root: &Path) -> Result<Counters> {
    let p = cache_root.join("stats.json");
    let mut file = match std::fs::File::open(&p) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Counters::default()),
        Err(e) => return Err(crate::Error::io("open", p, e)),
    };
    platform::lock(&file, platform::LockMode::Shared).ctx("flock", &p)?;
    let mut t = String::new();
    file.read_to_string(&mut t).ctx("read", &p)?;
    if t.trim().is_empty() {
        return Ok(Counters::default());
    }
    serde_json::from_str(&t)
        .map_err(|e| crate::Error::InvalidArgument(format!("{}: {e}", p.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_never_sees_a_rewrite_in_progress() {
        let d = tempfile::tempdir().unwrap();
        record(
            d.path(),
            &Counters {
                stages: 1,
                ..Default::default()
            },
        )
        .unwrap();
        let root = d.path().to_path_buf();
        let writer = std::thread::spawn(move || {
            for _ in 0..2000 {
                update(&root, |c| c.stages += 1).unwrap();
            }
        });
        let mut reads = 0;
        while !writer.is_finished() {
            assert!(
                load(d.path()).unwrap().stages >= 1,
                "read a half-written stats.json"
            );
            reads += 1;
        }
        writer.join().unwrap();
        assert!(reads > 0);
        assert_eq!(load(d.path()).unwrap().stages, 2001);
    }
}
