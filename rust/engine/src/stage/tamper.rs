//! Hardlinked inputs are the cache's own inodes. Mode bits do not stop root, or an owner who
//! chmods, from writing through them. Every installed inode carries a fixed mtime
//! (`cas::BLOB_MTIME`), so after an action one stat per hardlinked inode tells whether it was
//! written, truncated or made writable; such an inode is quarantined and never served again.
//!
//! Roots share inodes, so the root whose check finds a write is not the only one that held the
//! written inode. A root is tainted by every inode it linked that was quarantined after it was
//! staged, whoever found it (this process's quarantine record, taken before each rename), and
//! by every linked cache path that is gone: its root is pinned, so nothing evicts it, and only
//! a quarantine (by `verify` in another process, or by hand) removes it. A fresh inode uploaded
//! at the same path after the quarantine does not clear the root: the record still names it.
//!
//! Not seen: a writer that puts size, mtime and mode back by hand (`utimensat`). Its ctime
//! changes, but so does a shared inode's whenever a concurrent stage links or unlinks it, so
//! ctime cannot tell the two apart without a re-hash; `clonestage verify` re-hashes.

use super::place::Inode;
use crate::cas::{Cache, BLOB_MTIME};
use crate::digest::Digest;
use std::os::unix::fs::MetadataExt;

/// What the check found among a root's hardlinked inodes.
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// Every digest whose inode in this root was tampered with, sorted, deduplicated.
    pub tainted: Vec<Digest>,
    /// How many of them this check quarantined itself (the rest someone else had).
    pub quarantined_here: usize,
}

/// Check the root's distinct hardlinked inodes; `mark` is `Cache::quarantine_mark()` from
/// before the stage linked anything.
pub(crate) fn check(cache: &Cache, linked: &[(Digest, Inode)], mark: usize) -> Found {
    let mut found = Found::default();
    let path_of = |d: &Digest, inode: &Inode| match inode {
        Inode::Blob => cache.blob_path(d),
        Inode::Exec => cache.exec_path(d),
        Inode::Replica { exec, n } => cache.replica_path(d, *exec, *n),
    };
    for (d, inode) in linked {
        // Blob and exec inodes are stat'ed relative to the cache's open shard directory (one
        // short lookup, no path built): this runs between the command and the response.
        let st = match inode {
            #[allow(clippy::unnecessary_cast)] // the field types differ between Linux and macOS
            Inode::Blob | Inode::Exec => cache
                .stat_installed(d, *inode == Inode::Exec)
                .map(|st| (st.st_size as u64, st.st_mtime as i64, st.st_mode as u32)),
            Inode::Replica { .. } => {
                let p = path_of(d, inode);
                std::fs::symlink_metadata(&p).map(|m| (m.len(), m.mtime(), m.mode()))
            }
        };
        match st {
            Ok((len, mtime, mode)) => {
                if len != d.size || mtime != BLOB_MTIME || mode & 0o222 != 0 {
                    let p = path_of(d, inode);
                    tracing::error!(digest = %d, path = %p.display(), "an action wrote through a hardlinked input; quarantining the cache inode");
                    cache.quarantine(&p);
                    found.tainted.push(*d);
                    found.quarantined_here += 1;
                }
            }
            Err(e) => {
                // Pinned, so not evicted: quarantined elsewhere (or removed by hand). Either
                // way nothing vouches for the inode this root held.
                let p = path_of(d, inode);
                tracing::error!(digest = %d, path = %p.display(), error = %e, "a hardlinked input's cache inode vanished while the action ran; treating it as tampered");
                found.tainted.push(*d);
            }
        }
    }
    // Read after the stats: a quarantine is recorded before its rename, so a path found gone
    // or holding a fresh upload above is in the record by now.
    let since = cache.quarantined_since(mark);
    if !since.is_empty() {
        for (d, inode) in linked {
            if since.contains(&path_of(d, inode)) {
                tracing::error!(digest = %d, "a hardlinked input of this root was quarantined while the action ran");
                found.tainted.push(*d);
            }
        }
    }
    found.tainted.sort_unstable();
    found.tainted.dedup();
    found
}
