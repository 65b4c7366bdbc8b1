//! Hardlinked inputs are the cache's own inodes. Mode bits do not stop root, or an owner who
//! chmods, from writing through them. Every installed inode carries a fixed mtime
//! (`cas::BLOB_MTIME`), so after an action one stat per hardlinked inode tells whether it was
//! written, truncated or made writable; such an inode is quarantined and never served again.

use super::build::Inode;
use crate::cas::{Cache, BLOB_MTIME};
use crate::digest::Digest;
use std::os::unix::fs::MetadataExt;

/// Returns the digests whose cache inode was tampered with (and is now quarantined).
pub(crate) fn check(cache: &Cache, linked: &[(Digest, Inode)]) -> Vec<Digest> {
    let mut bad = Vec::new();
    for (d, inode) in linked {
        let path = match inode {
            Inode::Blob => cache.blob_path(d),
            Inode::Exec => cache.exec_path(d),
            Inode::Replica { exec, n } => cache.replica_path(d, *exec, *n),
        };
        let p = &path;
        let Ok(m) = std::fs::symlink_metadata(p) else {
            continue; // evicted or already quarantined: nothing left to serve
        };
        if m.len() != d.size || m.mtime() != BLOB_MTIME || m.mode() & 0o222 != 0 {
            tracing::error!(digest = %d, path = %p.display(), "an action wrote through a hardlinked input; quarantining the cache inode");
            cache.quarantine(p);
            bad.push(*d);
        }
    }
    bad
}
