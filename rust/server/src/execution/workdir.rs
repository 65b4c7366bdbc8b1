//! Work dirs: `<cache>/work/<pid>-<n>/` per action, holding the staged `root/` and, outside it
//! (so no output path can collide with them), the command's stdout/stderr files. Removed when
//! dropped, or, after a successful run, queued for the `janitor`, which removes them while no
//! action runs; the server sweeps `<cache>/work/` at start for dirs a killed server left (it
//! holds the cache's server lock, so nothing else uses them). Removal is the engine's
//! fd-relative `remove_tree`.

use crate::failure::Failure;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static SEQ: AtomicU64 = AtomicU64::new(0);

pub(crate) struct WorkDir {
    pub path: PathBuf,
}

impl WorkDir {
    pub fn create(base: &Path) -> Result<WorkDir, Failure> {
        let path = base.join(format!(
            "{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&path).map_err(|e| Failure::io("mkdir", &path, e))?;
        Ok(WorkDir { path })
    }

    pub fn root(&self) -> PathBuf {
        self.path.join("root")
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Give up removing the dir on drop; the caller queues it for the janitor.
    pub fn defer(self) -> PathBuf {
        let mut me = std::mem::ManuallyDrop::new(self);
        std::mem::take(&mut me.path)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let t0 = std::time::Instant::now();
        if let Err(e) = remove(&self.path) {
            tracing::error!(path = %self.path.display(), error = %e, "cannot remove work dir");
        }
        tracing::debug!(
            remove_us = t0.elapsed().as_micros() as u64,
            "work dir removed"
        );
    }
}

/// Remove a work dir: the engine's `remove_tree`, which works relative to directory fds with
/// the types readdir gives (one `unlinkat` per file, no lstat, no path walks), makes a
/// read-only (0o555) staged directory writable only when an unlink in it is refused, never
/// follows a symlink, and removes trees of any depth (a killed server's leftovers included).
pub(crate) fn remove(path: &Path) -> Result<(), clonestage_engine::Error> {
    clonestage_engine::remove::remove_tree(path)
}

/// Remove everything under `base` (leftovers of an earlier server). Returns how many entries.
pub(crate) fn sweep(base: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut n = 0;
    for e in rd.flatten() {
        match clonestage_engine::remove::remove_tree(&e.path()) {
            Ok(()) => n += 1,
            Err(err) => {
                tracing::warn!(path = %e.path().display(), error = %err, "cannot sweep leftover work dir")
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn removes_read_only_trees_without_following_symlinks() {
        let d = tempfile::tempdir().unwrap();
        let outside = d.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), b"k").unwrap();
        let w = d.path().join("w");
        let deep = w.join("root/a/b");
        std::fs::create_dir_all(&deep).unwrap();
        for (i, dir) in [w.join("root/a"), deep.clone()].iter().enumerate() {
            let f = dir.join(format!("f{i}"));
            std::fs::write(&f, b"x").unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o444)).unwrap();
        }
        std::os::unix::fs::symlink(&outside, deep.join("link")).unwrap();
        for dir in [deep.clone(), w.join("root/a")] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
        }
        remove(&w).unwrap();
        assert!(!w.exists());
        assert!(outside.join("keep").exists(), "symlink was followed");
        // Missing is fine.
        remove(&w).unwrap();
    }
}
