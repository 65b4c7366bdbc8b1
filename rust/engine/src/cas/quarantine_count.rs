//! A count of quarantines that every process sharing the cache sees: `<cache>/quarantines`,
//! one byte appended by whichever process quarantines an inode, before it renames the inode
//! away. Its stamp (inode, size, ctime) changes with every quarantine anywhere, so a reader
//! that finds the stamp it took earlier knows that no cache inode was quarantined in between:
//! the pool relies on it to skip one stat per hardlinked file of a returning copy
//! (`stage::pool::identity`).
//!
//! When the append fails (a full disk, say), the file is removed instead: a missing file has no
//! stamp, and every reader then checks inode by inode. `Cache::open` makes it again, as a new
//! inode, empty (a recorded stamp matches it only if the inode number, the size and the ctime
//! tick all come back the same).

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What the count file was when looked at: equal stamps, no quarantine in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    ino: u64,
    size: u64,
    ctime: (i64, i64),
}

fn path(root: &Path) -> PathBuf {
    root.join("quarantines")
}

fn open(p: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(p)
}

/// Make the count file if it is missing (at `Cache::open`).
pub(super) fn ensure(root: &Path) {
    let p = path(root);
    if let Err(e) = open(&p) {
        tracing::warn!(path = %p.display(), error = %e, "cannot make the quarantine count; pooled copies are checked inode by inode");
    }
}

/// Count one quarantine (called before the inode is renamed away).
pub(super) fn bump(root: &Path) {
    let p = path(root);
    let r = open(&p).and_then(|mut f| f.write_all(b"q"));
    if let Err(e) = r {
        // No stamp at all is safe: readers fall back to checking every inode.
        tracing::error!(path = %p.display(), error = %e, "cannot count a quarantine; removing the count");
        if let Err(e) = std::fs::remove_file(&p) {
            tracing::error!(path = %p.display(), error = %e, "cannot remove the quarantine count either; pooled copies may miss a quarantine by another process until the server restarts");
        }
    }
}

/// The count file's stamp now; None when it is missing or unreadable.
pub(super) fn stamp(root: &Path) -> Option<Stamp> {
    let m = std::fs::symlink_metadata(path(root)).ok()?;
    Some(Stamp {
        ino: m.ino(),
        size: m.len(),
        ctime: (m.ctime(), m.ctime_nsec()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bump_changes_the_stamp_and_a_missing_file_has_none() {
        let t = tempfile::tempdir().unwrap();
        assert_eq!(stamp(t.path()), None);
        ensure(t.path());
        let s0 = stamp(t.path()).expect("made");
        assert_eq!(stamp(t.path()), Some(s0), "reading does not change it");
        bump(t.path());
        let s1 = stamp(t.path()).expect("still there");
        assert_ne!(s0, s1);
        bump(t.path());
        assert_ne!(stamp(t.path()), Some(s1));
        std::fs::remove_file(path(t.path())).unwrap();
        assert_eq!(stamp(t.path()), None);
        ensure(t.path());
        assert!(stamp(t.path()).is_some(), "made again");
    }
}
