//! Size accounting and LRU eviction to a byte limit.
//!
//! Last use is not tracked by touching blobs (a hardlinked blob's mtime is the staged file's
//! mtime, and tamper detection reads it). Instead every stage appends its root digest to
//! `access.log`; gc walks the logged roots, newest first, and gives every reachable blob and
//! subtree the root's time. Blobs no root reaches fall back to their inode's ctime: set when
//! it was installed, and again whenever it gains or loses a hard link (so a blob hardlinked
//! into a root counts as used then). mtime cannot serve: every blob carries `BLOB_MTIME`.
//! Roots pinned by live processes, and everything they reach, are never evicted, nor are the
//! blobs this process holds (`Cache::hold`).

use super::Cache;
use crate::digest::Digest;
use crate::error::{IoContext, Result};
use crate::platform::{lock, open_lock, LockMode};
use crate::tree;
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct GcReport {
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub blobs_evicted: u64,
    pub subtrees_evicted: u64,
    pub pinned_roots: u64,
    pub kept_pinned: u64,
}

struct Entry {
    digest: Digest,
    bytes: u64,
    mtime: u64,
    paths: Vec<PathBuf>,
}

impl Cache {
    /// Evict least-recently-used blobs until the cache holds at most `max_bytes`.
    pub fn gc(&self, max_bytes: u64) -> Result<GcReport> {
        let lock_path = self.root().join("gc.lock");
        let gc_lock = open_lock(&lock_path).ctx("open", &lock_path)?;
        lock(&gc_lock, LockMode::Exclusive).ctx("flock", &lock_path)?;
        super::sweep_dead_tmp(self);

        let mut entries: HashMap<Digest, Entry> = HashMap::new();
        for sub in ["blobs", "exec", "replicas"] {
            self.scan(sub, &mut entries)?;
        }
        let mut report = GcReport {
            bytes_before: entries.values().map(|e| e.bytes).sum(),
            ..Default::default()
        };

        // Pinned: everything reachable from a live pin.
        let pinned_roots = self.pins.all_pinned()?;
        report.pinned_roots = pinned_roots.len() as u64;
        let mut pinned = HashSet::new();
        let mut seen = HashSet::new();
        for r in &pinned_roots {
            tree::reachable(self, r, &mut seen, &mut |d| {
                pinned.insert(d);
            });
        }
        pinned.extend(self.pins.held());

        // Last use from the access log, newest first so each digest is walked once.
        let log = self.root().join("access.log");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let mut roots: Vec<(u64, Digest)> = text
            .lines()
            .filter_map(|l| {
                let (t, d) = l.split_once(' ')?;
                Some((t.parse().ok()?, Digest::parse(d).ok()?))
            })
            .collect();
        roots.sort_by_key(|r| std::cmp::Reverse(r.0));
        let mut last_use: HashMap<Digest, u64> = HashMap::new();
        let mut seen = HashSet::new();
        let mut latest_root: HashMap<Digest, u64> = HashMap::new();
        for (t, r) in &roots {
            latest_root.entry(*r).or_insert(*t);
            tree::reachable(self, r, &mut seen, &mut |d| {
                last_use.entry(d).or_insert(*t);
            });
        }

        let mut order: Vec<&Entry> = entries.values().collect();
        order.sort_by_key(|e| (last_use.get(&e.digest).copied().unwrap_or(e.mtime), e.bytes));
        let mut total = report.bytes_before;
        for e in order {
            if total <= max_bytes {
                break;
            }
            if pinned.contains(&e.digest) {
                report.kept_pinned += 1;
                continue;
            }
            for p in &e.paths {
                let _ = std::fs::remove_file(p);
            }
            let sub = self.subtree_path(&e.digest);
            if sub.exists() && crate::remove::remove_tree(&sub).is_ok() {
                report.subtrees_evicted += 1;
            }
            total -= e.bytes;
            report.blobs_evicted += 1;
        }
        report.bytes_after = total;

        // Subtrees whose Directory blob is gone can never be reached again.
        if let Ok(rd) = std::fs::read_dir(self.root().join("subtrees")) {
            for s in rd.flatten() {
                let name = s.file_name().to_string_lossy().into_owned();
                match Digest::from_file_name(&name) {
                    Some(d) if self.contains(&d) || pinned.contains(&d) => {}
                    _ => {
                        if crate::remove::remove_tree(&s.path()).is_ok() {
                            report.subtrees_evicted += 1;
                        }
                    }
                }
            }
        }

        // Compact the log: the latest time of each root still present.
        let mut kept: Vec<(u64, Digest)> = latest_root
            .into_iter()
            .filter(|(d, _)| self.contains(d))
            .map(|(d, t)| (t, d))
            .collect();
        kept.sort();
        let body: String = kept.iter().map(|(t, d)| format!("{t} {d}\n")).collect();
        let tmp = self.root().join("tmp").join(self.tmp_name("access"));
        std::fs::write(&tmp, body).ctx("write", &tmp)?;
        std::fs::rename(&tmp, &log).ctx("rename", &log)?;
        if report.blobs_evicted > 0 {
            // The record of code blobs, without the evicted ones.
            let tmp = self.root().join("tmp").join(self.tmp_name("code"));
            self.code.compact(&tmp, |d| self.contains(d));
        }
        drop(gc_lock);
        Ok(report)
    }

    fn scan(&self, sub: &str, entries: &mut HashMap<Digest, Entry>) -> Result<()> {
        self.for_each_inode(sub, &mut |d, f| {
            let Ok(m) = f.metadata() else { return };
            let e = entries.entry(d).or_insert_with(|| Entry {
                digest: d,
                bytes: 0,
                mtime: m.ctime().max(0) as u64,
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
    for sub in ["blobs", "exec", "replicas"] {
        let _ = cache.scan(sub, &mut entries);
    }
    entries.values().map(|e| e.bytes).sum()
}
