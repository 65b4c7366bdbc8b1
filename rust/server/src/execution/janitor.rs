//! The janitor: one thread that removes finished actions' work dirs while no action runs
//! (see `Janitor`), and all of them at once at shutdown.

use super::workdir::remove;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

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
            .spawn(move || me.work_loop(running))
            .map(|_| ())
    }

    fn work_loop(&self, running: impl Fn() -> Option<usize>) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
