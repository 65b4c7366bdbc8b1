//! Work dirs: `<cache>/work/<pid>-<n>/` per action, holding the staged `root/` and, outside it
//! (so no output path can collide with them), the command's stdout/stderr files, the wrapper's
//! stats and log. Removed when dropped, whatever happened; the server sweeps `<cache>/work/`
//! at start for dirs a killed server left (it holds the cache's server lock, so nothing else
//! uses them).

use crate::status::Failure;
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
        std::fs::create_dir(&path)
            .map_err(|e| Failure::Internal(format!("mkdir {}: {e}", path.display())))?;
        Ok(WorkDir { path })
    }

    pub fn root(&self) -> PathBuf {
        self.path.join("root")
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if let Err(e) = clonestage_engine::remove::remove_tree(&self.path) {
            tracing::error!(path = %self.path.display(), error = %e, "cannot remove work dir");
        }
    }
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
