//! What the store holds, for whoever evicts: every blob's inodes with their bytes and ctime,
//! the materialized subtree entries, and the removals, each under an exclusive `gc.lock`
//! (`GcLock`). The store decides nothing here: which blob goes and in what order is the
//! collector's (`crate::gc`, above the tree format, the stager and the pool), which alone
//! knows what a pin keeps and what a root reaches.

use super::Cache;
use crate::digest::Digest;
use crate::error::{IoContext, Result};
use crate::platform::{lock, open_lock, LockMode};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where a blob's inodes live.
const SCANNED: [&str; 3] = ["blobs", "exec", "replicas"];

/// `gc.lock`, held exclusively: no pin registers, no pool starts, while it lives. Released
/// when dropped.
pub struct GcLock {
    _file: File,
}

/// One blob as stored: its inodes (the blob, its exec twin, its replicas) summed.
pub struct Stored {
    pub digest: Digest,
    pub bytes: u64,
    /// Its first inode's ctime (the blob's own, when it has one), in seconds: when it was
    /// installed or last gained or lost a hard link (every blob's mtime is `BLOB_MTIME`).
    pub ctime: u64,
    paths: Vec<PathBuf>,
}

impl Cache {
    /// Take `gc.lock` exclusively (waiting for pins being registered and for another gc).
    pub fn lock_gc(&self) -> Result<GcLock> {
        let p = self.root().join("gc.lock");
        let f = open_lock(&p).ctx("open", &p)?;
        lock(&f, LockMode::Exclusive).ctx("flock", &p)?;
        Ok(GcLock { _file: f })
    }

    /// Every stored blob (`blobs/`, `exec/`, `replicas/`), one entry per digest.
    pub fn inventory(&self, _: &GcLock) -> Result<Vec<Stored>> {
        let mut entries = HashMap::new();
        for sub in SCANNED {
            self.scan(sub, &mut entries)?;
        }
        Ok(entries.into_values().collect())
    }

    /// Every digest pinned now, by this process and every other live one (`pins`); removes
    /// the pin files of dead processes. What a pinned digest keeps is the collector's call.
    pub fn pinned(&self, _: &GcLock) -> Result<Vec<Digest>> {
        self.pins.all_pinned()
    }

    /// The blobs this process holds now (`Cache::hold`): kept as they are, nothing they reach.
    pub fn held(&self, _: &GcLock) -> Vec<Digest> {
        self.pins.held()
    }

    /// Remove every inode of `s`.
    pub fn remove_stored(&self, _: &GcLock, s: &Stored) {
        for p in &s.paths {
            let _ = std::fs::remove_file(p);
        }
    }

    /// The entries of `subtrees/` by the digest they are named after (None: a name that is
    /// no digest, such as a build that never finished).
    pub fn subtree_entries(&self, _: &GcLock) -> Vec<(Option<Digest>, PathBuf)> {
        let Ok(rd) = std::fs::read_dir(self.root().join("subtrees")) else {
            return Vec::new();
        };
        rd.flatten()
            .map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                (Digest::from_file_name(&name), e.path())
            })
            .collect()
    }

    /// Remove the subtree entry at `entry` (one of `subtree_entries`, or `subtree_path`) if
    /// it exists; whether it did.
    pub fn remove_subtree(&self, _: &GcLock, entry: &Path) -> bool {
        entry.exists() && crate::remove::remove_tree(entry).is_ok()
    }

    /// Rewrite the record of code blobs without the blobs no longer stored.
    pub fn forget_removed_code(&self, _: &GcLock) {
        let tmp = self.root().join("tmp").join(self.tmp_name("code"));
        self.code.compact(&tmp, |d| self.contains(d));
    }

    fn scan(&self, sub: &str, entries: &mut HashMap<Digest, Stored>) -> Result<()> {
        self.for_each_inode(sub, &mut |d, f| {
            let Ok(m) = f.metadata() else { return };
            let e = entries.entry(d).or_insert_with(|| Stored {
                digest: d,
                bytes: 0,
                ctime: m.ctime().max(0) as u64,
                paths: Vec::new(),
            });
            e.bytes += m.len();
            e.paths.push(f.path());
        })
    }
}

/// Total bytes held by blobs and their extra inodes.
pub fn cache_bytes(cache: &Cache) -> u64 {
    let mut entries = HashMap::new();
    for sub in SCANNED {
        let _ = cache.scan(sub, &mut entries);
    }
    entries.values().map(|s| s.bytes).sum()
}
