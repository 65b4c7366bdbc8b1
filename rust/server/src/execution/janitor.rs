//! The janitor: one thread that removes finished actions' work dirs while no action runs
//! (see `Janitor`), and all of them at once at shutdown. It decides when, not how: a finished
//! action's pooled copies go back (`cleanup`) as soon as the action has answered, before its
//! work dir waits for removal; it keeps a few work dirs ready for the next actions
//! (`ready_dirs`, the hook `set_ready`) and removes them when the server ends; and while
//! nothing else is due it asks the pool builder (`pool_builder`, the hook `set_builder`) for
//! the copies the pool wants.

use super::cleanup::Discarded;
use super::pool_builder::PoolBuilder;
use super::ready_dirs::ReadyDirs;
use super::workdir::remove;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

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
    /// Work dirs whose pooled copies go back first (counted in `pending`).
    returns: std::sync::Mutex<std::collections::VecDeque<Discarded>>,
    builder: std::sync::OnceLock<PoolBuilder>,
    ready: std::sync::OnceLock<Arc<ReadyDirs>>,
    /// A ready work dir being made (counted in `pending`, so shutdown waits for it).
    preparing: std::sync::atomic::AtomicUsize,
}

/// What the thread does next.
enum Next {
    Remove(PathBuf),
    Return,
    Prepare,
    Build,
    Exit,
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

    /// Queue a finished action's work dir; pooled copies it holds go back to their pool first
    /// (without waiting for idleness: the next action may want them).
    pub fn push_discarded(&self, d: Discarded) {
        if !d.has_copies() {
            return self.push(d.dir);
        }
        self.returns.lock().unwrap().push_back(d);
        let _q = self.queue.lock().unwrap();
        self.wake.notify_one();
    }

    /// Build pooled copies with `b` whenever nothing else is due.
    pub fn set_builder(&self, b: PoolBuilder) {
        let _ = self.builder.set(b);
    }

    /// Keep `r`'s work dirs ready; they are removed when the thread ends.
    pub fn set_ready(&self, r: Arc<ReadyDirs>) {
        let _ = self.ready.set(r);
    }

    /// Dirs not removed yet, the one being removed included.
    pub fn pending(&self) -> usize {
        let q = self.queue.lock().unwrap();
        q.len()
            + self.removing.load(Ordering::SeqCst)
            + self.preparing.load(Ordering::SeqCst)
            + self.returns.lock().unwrap().len()
    }

    fn return_one(&self) {
        let Some(mut d) = self.returns.lock().unwrap().pop_front() else {
            return;
        };
        d.return_copies();
        self.push(d.dir);
    }

    /// Remove what is queued without waiting for idleness (shutdown).
    pub fn hurry(&self) {
        {
            // Under the queue's lock, where `next` decides to make a ready dir and counts it:
            // either that dir is counted in `pending` already, or none is made.
            let _q = self.queue.lock().unwrap();
            self.hurry.store(true, Ordering::SeqCst);
        }
        // No more are made; actions still draining make their own.
        if let Some(r) = self.ready.get() {
            r.clear();
        }
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
            match self.next(&running, &mut quiet) {
                Next::Exit => {
                    if let Some(r) = self.ready.get() {
                        r.clear();
                    }
                    return;
                }
                Next::Return => self.return_one(),
                Next::Prepare => {
                    let r = self.ready.get().expect("Prepare needs ready dirs");
                    r.prepare_one();
                    self.preparing.fetch_sub(1, Ordering::SeqCst);
                }
                Next::Build => {
                    let built = match (self.builder.get(), running()) {
                        (Some(b), Some(n)) => b.build_one(n),
                        _ => false,
                    };
                    if !built {
                        let q = self.queue.lock().unwrap();
                        let _ = self.wake.wait_timeout(q, POLL).unwrap();
                    }
                }
                Next::Remove(dir) => {
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

    fn next(&self, running: &impl Fn() -> Option<usize>, quiet: &mut u32) -> Next {
        let mut q = self.queue.lock().unwrap();
        loop {
            if !self.returns.lock().unwrap().is_empty() {
                return Next::Return;
            }
            let gone = running().is_none();
            if gone && q.is_empty() {
                return Next::Exit;
            }
            let prepare = !gone
                && !self.hurry.load(Ordering::SeqCst)
                && self.ready.get().is_some_and(|r| r.wanted());
            if prepare {
                self.preparing.fetch_add(1, Ordering::SeqCst);
                return Next::Prepare;
            }
            if !q.is_empty() {
                match running() {
                    Some(0) | None => *quiet += 1,
                    Some(_) => *quiet = 0,
                }
                let hurry = gone || self.hurry.load(Ordering::SeqCst);
                if hurry || *quiet >= QUIET || q.len() > MAX_PENDING {
                    // Counted before it leaves the queue (both under the lock), so
                    // `pending` never reads zero while a dir still exists.
                    self.removing.fetch_add(1, Ordering::SeqCst);
                    let dir = q.pop_front().expect("not empty");
                    return Next::Remove(dir);
                }
            }
            if self.builder.get().is_some() && !self.hurry.load(Ordering::SeqCst) && !gone {
                return Next::Build;
            }
            q = self.wake.wait_timeout(q, POLL).unwrap().0;
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
        // Gone with work queued: removed, then the thread ends. Queued before the server is
        // gone: a thread that finds it gone with nothing queued ends at once.
        let dir2 = d.path().join("w2");
        std::fs::create_dir(&dir2).unwrap();
        j.push(dir2.clone());
        running.store(usize::MAX, Ordering::SeqCst);
        let t0 = std::time::Instant::now();
        while dir2.exists() && t0.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(POLL);
        }
        assert!(!dir2.exists());
    }

    #[test]
    fn janitor_keeps_work_dirs_ready_and_removes_them_at_shutdown() {
        let d = tempfile::tempdir().unwrap();
        let ready = Arc::new(super::super::ready_dirs::tests::ready_in(d.path(), 2));
        let j = Arc::new(Janitor::default());
        j.set_ready(ready.clone());
        // One action runs: ready dirs are made anyway (they are cheap and due next).
        j.spawn(|| Some(1)).unwrap();
        let count = || std::fs::read_dir(d.path().join("work")).unwrap().count();
        let t0 = std::time::Instant::now();
        while (count() < 2 || j.pending() > 0) && t0.elapsed() < std::time::Duration::from_secs(10)
        {
            std::thread::sleep(POLL / 5);
        }
        assert_eq!(count(), 2);
        assert!(!ready.wanted());
        let taken = ready.take().unwrap();
        let t0 = std::time::Instant::now();
        while count() < 3 && t0.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(POLL / 5);
        }
        assert_eq!(count(), 3, "the taken one was replaced");
        drop(taken);
        j.hurry();
        // A dir being made when the store closed removes itself; shutdown waits for `pending`.
        let t0 = std::time::Instant::now();
        while j.pending() > 0 && t0.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(POLL / 5);
        }
        assert_eq!(count(), 0, "shutdown removes the ready ones");
        std::thread::sleep(POLL * 2);
        assert_eq!(count(), 0, "and makes no more");
    }
}
