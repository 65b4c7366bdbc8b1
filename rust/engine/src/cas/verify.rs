//! `verify`: re-hash every blob and extra inode; move corrupt ones to `quarantine/` so they are
//! never served again, and report them. Blobs that are Mach-O code and not in the record yet
//! (they entered before it existed) are recorded on the way (`code_record`).

use super::write::hash_and_sniff;
use super::Cache;
use crate::digest::Digest;
use crate::error::Result;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct CorruptBlob {
    pub digest: Digest,
    pub path: PathBuf,
    pub actual: Option<Digest>,
}

impl Cache {
    /// Check every stored inode against the digest in its name. Corrupt ones are quarantined.
    pub fn verify(&self) -> Result<(u64, Vec<CorruptBlob>)> {
        let mut checked = 0;
        let mut bad = Vec::new();
        for sub in ["blobs", "exec", "replicas"] {
            self.for_each_inode(sub, &mut |d, f| {
                checked += 1;
                let sniffed = hash_and_sniff(&f.path()).ok();
                if let (Some((got, true)), "blobs") = (sniffed, sub) {
                    if got == d {
                        self.note_code(&d);
                    }
                }
                let actual = sniffed.map(|(got, _)| got);
                if actual != Some(d) {
                    self.quarantine(&f.path());
                    bad.push(CorruptBlob {
                        digest: d,
                        path: f.path(),
                        actual,
                    });
                }
            })?;
        }
        Ok((checked, bad))
    }

    /// Take an inode out of service (rename into quarantine/, so it is kept for inspection).
    /// Recorded before the rename: whoever finds the path gone, or holding a fresh inode
    /// uploaded since, then also finds the record (`stage::tamper`).
    pub(crate) fn quarantine(&self, path: &std::path::Path) {
        self.quarantined.lock().unwrap().push(path.to_path_buf());
        super::quarantine_count::bump(self.root());
        let dst = self.root().join("quarantine").join(
            self.tmp_name(
                &path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            ),
        );
        if let Err(e) = std::fs::rename(path, &dst) {
            tracing::error!(path = %path.display(), error = %e, "cannot quarantine; removing");
            let _ = std::fs::remove_file(path);
        } else {
            tracing::warn!(path = %path.display(), to = %dst.display(), "quarantined corrupt cache inode");
        }
    }
}
