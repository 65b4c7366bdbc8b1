//! Work dirs: `<cache>/work/<pid>-<n>/` per action, holding the staged `root/` and, outside it
//! (so no output path can collide with them), the command's stdout/stderr files. Removed when
//! dropped, or, after a successful run, queued for the `janitor`, which removes them while no
//! action runs; the server sweeps `<cache>/work/` at start for dirs a killed server left (it
//! holds the cache's server lock, so nothing else uses them). Removal is the engine's
//! fd-relative `remove_tree`.
//!
//! A few are made ahead of time (`ready_dirs`), each with its empty stdout and stderr files.

use crate::failure::Failure;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static SEQ: AtomicU64 = AtomicU64::new(0);

/// The command's output files in a work dir.
pub(crate) const STD_STREAMS: [&str; 2] = ["stdout", "stderr"];

pub(crate) struct WorkDir {
    pub path: PathBuf,
}

/// `<pid>-<n>`: unique in this process, and apart from other servers' (one per cache holds
/// the lock, but a killed one's leftovers stay until the sweep).
pub(super) fn fresh_name() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

impl WorkDir {
    pub fn create(base: &Path) -> Result<WorkDir, Failure> {
        let path = base.join(fresh_name());
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

/// Remove a work dir: first detach what an action mounted in it (`detach_mounts`), then the
/// engine's `remove_tree`, which works relative to directory fds with the types readdir gives
/// (one `unlinkat` per file, no lstat, no path walks), makes a read-only (0o555) staged
/// directory writable only when an unlink in it is refused, never follows a symlink, and
/// removes trees of any depth (a killed server's leftovers included).
pub(crate) fn remove(path: &Path) -> Result<(), clonestage_engine::Error> {
    detach_mounts(path)?;
    clonestage_engine::remove::remove_tree(path)
}

/// Detach the mounts an action (as root) left at or below `dir` (issue 23 item 5): otherwise
/// its mount point cannot be removed (EBUSY) and the work dir leaks, and a bind-mounted
/// directory from outside the root would be emptied by the removal. Lazily on Linux, by force
/// on macOS (`clonestage_engine::platform::mounts`). Also before a finished action's pooled
/// copies are proven, so the proof reads the copy, not what was mounted over it.
pub(crate) fn detach_mounts(dir: &Path) -> Result<(), clonestage_engine::Error> {
    use clonestage_engine::platform::mounts;
    match mounts::detach_under(dir) {
        Ok(0) => Ok(()),
        Ok(n) => {
            tracing::warn!(path = %dir.display(), mounts = n, "an action left mounts in its work dir; detached them");
            Ok(())
        }
        Err(e) => Err(clonestage_engine::Error::io("detach mounts under", dir, e)),
    }
}

/// Remove everything under `base` (leftovers of an earlier server). Returns how many entries.
pub(crate) fn sweep(base: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut n = 0;
    for e in rd.flatten() {
        match remove(&e.path()) {
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

    fn mount(args: &[&str], at: &Path) {
        let st = std::process::Command::new("mount")
            .args(args)
            .arg(at)
            .status()
            .expect("run mount");
        assert!(st.success(), "mount {args:?} {}", at.display());
    }

    /// Issue 23 item 5: an action running as root mounts a tmpfs over part of its root, and
    /// binds a directory from outside it. The work dir goes anyway (the tmpfs was EBUSY to
    /// rmdir, and the dir leaked), and what the bind showed from outside is left alone (the
    /// removal went into it and emptied it).
    #[test]
    fn mounts_an_action_left_are_detached_and_what_they_show_is_left_alone() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIP: mounting needs root");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let outside = d.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), b"k").unwrap();
        let w = d.path().join("w");
        for sub in ["root/sdk/include", "root/bound"] {
            std::fs::create_dir_all(w.join(sub)).unwrap();
        }
        std::fs::write(w.join("root/sdk/include/f.h"), b"h").unwrap();
        mount(&["-t", "tmpfs", "cs-workdir-test"], &w.join("root/sdk"));
        std::fs::write(w.join("root/sdk/in-tmpfs"), b"t").unwrap();
        // Stacked twice on one point.
        mount(&["-t", "tmpfs", "cs-workdir-test"], &w.join("root/sdk"));
        let bind = std::process::Command::new("mount")
            .arg("--bind")
            .arg(&outside)
            .arg(w.join("root/bound"))
            .status()
            .unwrap();
        assert!(bind.success());
        let left = || clonestage_engine::platform::mounts::under(d.path()).unwrap();
        assert_eq!(left().len(), 3, "{:?}", left());
        let r = remove(&w);
        // Never leave a mount behind, whatever the outcome.
        for m in left() {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&m)
                .status();
        }
        r.unwrap();
        assert!(!w.exists(), "the work dir leaked");
        assert_eq!(std::fs::read(outside.join("keep")).unwrap(), b"k");
    }

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
