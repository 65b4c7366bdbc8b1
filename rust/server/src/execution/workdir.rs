//! Work dirs: `<cache>/work/<pid>-<n>/` per action, holding the staged `root/` and, outside it
//! (so no output path can collide with them), the command's stdout/stderr files. Removed when dropped, or, after a successful run, queued for the `Janitor`,
//! which removes them while no action runs; the server sweeps `<cache>/work/` at start for
//! dirs a killed server left (it holds the cache's server lock, so nothing else uses them).

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
        std::fs::create_dir(&path).map_err(|e| Failure::io("mkdir", &path, e))?;
        Ok(WorkDir { path })
    }

    pub fn root(&self) -> PathBuf {
        self.path.join("root")
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Give up removing the dir on drop; the caller queues it for the `Janitor`.
    pub fn defer(self) -> PathBuf {
        let mut me = std::mem::ManuallyDrop::new(self);
        std::mem::take(&mut me.path)
    }
}

/// Finished actions' work dirs, removed by one thread while no action runs. Removing a
/// 1,600-file root costs about as much CPU as staging it (each unlink updates a shared cache
/// inode); on a machine whose cores the build keeps busy that would slow the actions still
/// running, so it waits until the server has been idle for `QUIET` (or until more than
/// `MAX_PENDING` dirs wait, which bounds the space they hold). Shutdown removes the rest at
/// once; dirs left by a killed server are swept at the next start.
#[derive(Default)]
pub(crate) struct Janitor {
    queue: std::sync::Mutex<std::collections::VecDeque<PathBuf>>,
    wake: std::sync::Condvar,
    hurry: std::sync::atomic::AtomicBool,
    /// A dir taken off the queue and being removed (counted in `pending`).
    removing: std::sync::atomic::AtomicUsize,
}

/// How often the janitor looks whether the server is idle.
const POLL: std::time::Duration = std::time::Duration::from_millis(50);
/// Polls in a row without a running action before it starts removing.
const QUIET: u32 = 2;
/// More dirs than this waiting: remove even while actions run.
pub(crate) const MAX_PENDING: usize = 64;

impl Janitor {
    pub fn push(&self, dir: PathBuf) {
        self.queue.lock().unwrap().push_back(dir);
        self.wake.notify_one();
    }

    /// Dirs not removed yet, the one being removed included.
    pub fn pending(&self) -> usize {
        let q = self.queue.lock().unwrap();
        q.len() + self.removing.load(Ordering::SeqCst)
    }

    /// Remove what is queued without waiting for idleness (shutdown).
    pub fn hurry(&self) {
        self.hurry.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    /// Start the thread. `running` says how many actions run now; it returns None once the
    /// server is gone, and the thread then empties the queue and ends.
    pub fn spawn(
        self: &std::sync::Arc<Self>,
        running: impl Fn() -> Option<usize> + Send + 'static,
    ) -> std::io::Result<()> {
        let me = self.clone();
        std::thread::Builder::new()
            .name("clonestage-janitor".into())
            .spawn(move || me.run(running))
            .map(|_| ())
    }

    fn run(&self, running: impl Fn() -> Option<usize>) {
        let mut quiet = 0u32;
        loop {
            let next = {
                let mut q = self.queue.lock().unwrap();
                loop {
                    let gone = running().is_none();
                    if gone && q.is_empty() {
                        return;
                    }
                    if !q.is_empty() {
                        match running() {
                            Some(0) | None => quiet += 1,
                            Some(_) => quiet = 0,
                        }
                        let hurry = gone || self.hurry.load(Ordering::SeqCst);
                        if hurry || quiet >= QUIET || q.len() > MAX_PENDING {
                            // Counted before it leaves the queue (both under the lock), so
                            // `pending` never reads zero while a dir still exists.
                            self.removing.fetch_add(1, Ordering::SeqCst);
                            break q.pop_front();
                        }
                    }
                    q = self.wake.wait_timeout(q, POLL).unwrap().0;
                }
            };
            if let Some(dir) = next {
                let t0 = std::time::Instant::now();
                if let Err(e) = remove(&dir) {
                    tracing::error!(path = %dir.display(), error = %e, "cannot remove work dir");
                }
                tracing::debug!(
                    remove_us = t0.elapsed().as_micros() as u64,
                    "work dir removed"
                );
                self.removing.fetch_sub(1, Ordering::SeqCst);
            }
        }
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

    #[test]
    fn janitor_waits_for_idleness_and_ends_with_the_server() {
        use std::sync::atomic::AtomicUsize;
        use std::sync::Arc;
        let d = tempfile::tempdir().unwrap();
        let j = Arc::new(Janitor::default());
        // usize::MAX: the server is gone.
        let running = Arc::new(AtomicUsize::new(1));
        let r = running.clone();
        j.spawn(move || match r.load(Ordering::SeqCst) {
            usize::MAX => None,
            n => Some(n),
        })
        .unwrap();
        let dir = d.path().join("w1");
        std::fs::create_dir_all(dir.join("root/x")).unwrap();
        j.push(dir.clone());
        std::thread::sleep(POLL * (QUIET + 2));
        assert!(dir.exists(), "removed while an action ran");
        assert_eq!(j.pending(), 1);
        running.store(0, Ordering::SeqCst);
        let t0 = std::time::Instant::now();
        while (dir.exists() || j.pending() > 0) && t0.elapsed() < std::time::Duration::from_secs(10)
        {
            std::thread::sleep(POLL);
        }
        assert!(!dir.exists());
        assert_eq!(j.pending(), 0);
        // Gone with work queued: removed at once, then the thread ends.
        running.store(usize::MAX, Ordering::SeqCst);
        let dir2 = d.path().join("w2");
        std::fs::create_dir(&dir2).unwrap();
        j.push(dir2.clone());
        let t0 = std::time::Instant::now();
        while dir2.exists() && t0.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(POLL);
        }
        assert!(!dir2.exists());
    }
}
