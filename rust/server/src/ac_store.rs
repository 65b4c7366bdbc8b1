//! The action cache on disk: one encoded `ActionResult` per action digest at
//! `<cache>/ac/<hh>/<hash>-<size>`, written to a temp file and renamed over the old entry, so
//! a reader sees a whole old or a whole new result. An entry is only served while every blob
//! it names (output files, output trees and the files inside them, stdout, stderr) is still in
//! the CAS; an entry that lost a blob to eviction reads as absent (and is removed).

use crate::failure::Failure;
use bazel_remote_apis::build::bazel::remote::execution::v2::ActionResult;
use clonestage_engine::{Cache, Digest};
use prost::Message;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) struct AcStore {
    dir: PathBuf,
    seq: AtomicU64,
}

impl AcStore {
    pub fn new(dir: &Path) -> std::io::Result<AcStore> {
        std::fs::create_dir_all(dir)?;
        Ok(AcStore {
            dir: dir.to_path_buf(),
            seq: AtomicU64::new(0),
        })
    }

    fn path(&self, d: &Digest) -> PathBuf {
        self.dir.join(&d.hex()[..2]).join(d.file_name())
    }

    /// Whether an entry for `d` exists (one stat; no blob checks). A false answer is final, so
    /// a lookup miss can answer without leaving the request's thread.
    pub fn has_entry(&self, d: &Digest) -> bool {
        std::fs::symlink_metadata(self.path(d)).is_ok()
    }

    /// The stored result, if any and if all its blobs are present.
    pub fn get(&self, cache: &Cache, d: &Digest) -> Result<Option<ActionResult>, Failure> {
        let p = self.path(d);
        let bytes = match std::fs::read(&p) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Failure::io("read", &p, e)),
        };
        let r = match ActionResult::decode(bytes.as_slice()) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(path = %p.display(), error = %e, "undecodable action cache entry; removing it");
                let _ = std::fs::remove_file(&p);
                return Ok(None);
            }
        };
        if let Some(missing) = first_missing_blob(cache, &r) {
            tracing::debug!(action = %d, blob = %missing, "action cache entry lost a blob; dropping it");
            let _ = std::fs::remove_file(&p);
            return Ok(None);
        }
        Ok(Some(r))
    }

    /// Store `r` under `d`, replacing any older entry atomically.
    pub fn put(&self, d: &Digest, r: &ActionResult) -> Result<(), Failure> {
        let p = self.path(d);
        let parent = p.parent().expect("ac paths have parents");
        let io = |op: &str, path: &Path, e: std::io::Error| Failure::io(op, path, e);
        std::fs::create_dir_all(parent).map_err(|e| io("mkdir", parent, e))?;
        let tmp = parent.join(format!(
            ".tmp-{}-{}",
            std::process::id(),
            self.seq.fetch_add(1, Ordering::Relaxed)
        ));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&r.encode_to_vec())?;
            std::fs::rename(&tmp, &p)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io("write", &p, e)
        })
    }
}

/// Every blob `r` refers to that the CAS lacks (the first one found), reading output trees.
pub(crate) fn first_missing_blob(cache: &Cache, r: &ActionResult) -> Option<Digest> {
    use crate::result_digests::{named, read_tree, tree_files, Named};
    let Named {
        direct: want,
        trees,
        ..
    } = named(r);
    if let Some(m) = want.iter().find(|d| !cache.contains(d)) {
        return Some(*m);
    }
    for t in trees {
        let Some(files) = read_tree(cache, &t).and_then(|tree| tree_files(&tree).ok()) else {
            return Some(t);
        };
        if let Some(m) = files.into_iter().find(|d| !cache.contains(d)) {
            return Some(m);
        }
    }
    None
}
