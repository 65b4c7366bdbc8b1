//! The ledger: the one owner of bookkeeping. A stager's every stage (success or failure),
//! `StagedRoot::check_inputs` and whoever runs the stager (the server's action counters) add
//! to it in memory; `Ledger::flush` writes what accumulated: one read-add-rewrite of
//! `stats.json` under its flock, one `access.log` append per staged root, and the device cost
//! estimates that moved. Nobody else writes those three files, so no stage pays for them on
//! its timed path and one policy decides when they are written: the CLI flushes at the exit of
//! a command that staged, the server on a timer (`clonestage-server`'s `ledger_flush.rs`).
//! What must be true before an answer is given stays synchronous elsewhere: quarantining a
//! written-through blob and the not-cached decision are not bookkeeping.
//!
//! A ledger dropped with something unwritten flushes it then (a last resort: a caller that
//! forgot to flush loses no counter), and says so in the log.

use crate::cas::Cache;
use crate::digest::Digest;
use crate::stats::{self, Counters};
use std::sync::{Arc, Mutex, OnceLock};

/// A device's key for its cost estimates: (cache device, destination device).
pub type DeviceKey = (u64, u64);

/// Where cost estimates are saved: the stager's device table (`stage::device`), named here
/// so the ledger needs nothing from the stager.
pub(crate) trait EstimateStore: Send + Sync {
    /// Save the current estimates of `key` (devices.json).
    fn persist_estimates(&self, cache: &Cache, key: DeviceKey);
}

/// What the next flush writes.
#[derive(Default)]
struct Pending {
    counters: Counters,
    /// Staged roots, in order, for the access log.
    roots: Vec<Digest>,
    /// Devices whose estimates moved enough to save.
    estimates: Vec<DeviceKey>,
    /// Something was added since the last flush took the pending figures.
    dirty: bool,
}

pub struct Ledger {
    cache: Arc<Cache>,
    store: Arc<dyn EstimateStore>,
    pending: Mutex<Pending>,
    /// Held for a whole flush, so a flush returns only after every flush begun before it has
    /// written: the server's last flush at shutdown must not return while a timed flush that
    /// took the figures is still rewriting stats.json (a reader would see it half written).
    flushing: Mutex<()>,
    /// Called when the ledger goes from clean to dirty (see `on_change`).
    on_change: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl Ledger {
    /// A ledger for `cache` whose flush saves estimates into `store`.
    pub(crate) fn new(cache: Arc<Cache>, store: Arc<dyn EstimateStore>) -> Ledger {
        Ledger {
            cache,
            store,
            pending: Default::default(),
            flushing: Mutex::new(()),
            on_change: OnceLock::new(),
        }
    }

    /// Call `f` whenever something is added to a ledger that had nothing unwritten (once per
    /// flush at most), and now if it has something already: how a runner schedules its
    /// flush. `f` runs on the adding thread, with no lock held; it must not block. Set once.
    pub fn on_change(&self, f: Box<dyn Fn() + Send + Sync>) {
        if self.on_change.set(f).is_err() {
            tracing::warn!("the ledger's change hook is set already; keeping the first");
            return;
        }
        if self.pending.lock().unwrap().dirty {
            (self.on_change.get().expect("set above"))();
        }
    }

    fn change(&self, f: impl FnOnce(&mut Pending)) {
        let was_clean = {
            let mut p = self.pending.lock().unwrap();
            f(&mut p);
            !std::mem::replace(&mut p.dirty, true)
        };
        if was_clean {
            if let Some(hook) = self.on_change.get() {
                hook();
            }
        }
    }

    /// Change the counters to be written (e.g. add an action's figures).
    pub fn add(&self, f: impl FnOnce(&mut Counters)) {
        self.change(|p| f(&mut p.counters));
    }

    /// Add one to the counter `key` of `Counters.extra` (a server's own counters).
    pub fn count(&self, key: &str) {
        self.add(|c| *c.extra.entry(key.to_string()).or_default() += 1);
    }

    /// A finished stage: its counters, its root (for the access log) and, when its costs
    /// moved the device's estimates enough, the device to save them for.
    pub(crate) fn staged(&self, root: Digest, counters: &Counters, estimates: Option<DeviceKey>) {
        self.change(|p| {
            p.counters.add(counters);
            p.roots.push(root);
            if let Some(k) = estimates.filter(|k| !p.estimates.contains(k)) {
                p.estimates.push(k);
            }
        });
    }

    /// Whether something is waiting for a flush.
    pub fn is_dirty(&self) -> bool {
        self.pending.lock().unwrap().dirty
    }

    /// Write what accumulated (see the module doc). Errors are logged, never returned: figures
    /// must not fail a build. Flushes run one at a time (`flushing`).
    pub fn flush(&self) {
        let _one_at_a_time = self.flushing.lock().unwrap_or_else(|e| e.into_inner());
        // Taken (and marked clean) first: an add after this point calls the hook again.
        let p = std::mem::take(&mut *self.pending.lock().unwrap());
        for root in &p.roots {
            self.cache.note_access(root);
        }
        for key in &p.estimates {
            self.store.persist_estimates(&self.cache, *key);
        }
        if p.counters != Counters::default() {
            if let Err(e) = stats::record(self.cache.root(), &p.counters) {
                tracing::warn!(error = %e, "cannot update the cache's counters");
            }
        }
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        if self.is_dirty() {
            tracing::debug!(cache = %self.cache.root().display(), "the ledger was dropped unflushed; flushing it now");
            self.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn cache() -> (tempfile::TempDir, Arc<Cache>) {
        let d = tempfile::tempdir().unwrap();
        let c = Arc::new(Cache::open(d.path()).unwrap());
        (d, c)
    }

    struct Saved(Mutex<Vec<DeviceKey>>);
    impl EstimateStore for Saved {
        fn persist_estimates(&self, _: &Cache, key: DeviceKey) {
            self.0.lock().unwrap().push(key);
        }
    }

    #[test]
    fn nothing_is_written_until_flush_and_everything_after() {
        let (_d, c) = cache();
        let saved = Arc::new(Saved(Mutex::new(vec![])));
        let l = Ledger::new(c.clone(), saved.clone());
        let root = Digest::of_bytes(b"root");
        let counters = Counters {
            stages: 1,
            copy: 3,
            ..Default::default()
        };
        l.staged(root, &counters, Some((1, 2)));
        l.staged(root, &counters, Some((1, 2)));
        l.count("actions");
        assert!(l.is_dirty());
        assert!(!c.root().join("stats.json").exists());
        assert!(!c.root().join("access.log").exists());
        assert!(saved.0.lock().unwrap().is_empty());

        l.flush();
        assert!(!l.is_dirty());
        let s = stats::load(c.root()).unwrap();
        assert_eq!((s.stages, s.copy, s.extra["actions"]), (2, 6, 1));
        let log = std::fs::read_to_string(c.root().join("access.log")).unwrap();
        assert_eq!(log.lines().count(), 2);
        assert!(log.lines().all(|l| l.ends_with(&root.to_string())));
        assert_eq!(
            *saved.0.lock().unwrap(),
            vec![(1, 2)],
            "saved once per flush"
        );

        // A second flush adds only what came since.
        l.add(|c| c.stage_failures += 1);
        l.flush();
        let s = stats::load(c.root()).unwrap();
        assert_eq!((s.stages, s.stage_failures), (2, 1));
    }

    #[test]
    fn the_hook_fires_once_per_clean_to_dirty_change() {
        let (_d, c) = cache();
        let l = Ledger::new(c, Arc::new(Saved(Mutex::new(vec![]))));
        l.count("early");
        let calls = Arc::new(AtomicUsize::new(0));
        let n = calls.clone();
        l.on_change(Box::new(move || {
            n.fetch_add(1, Ordering::SeqCst);
        }));
        assert_eq!(calls.load(Ordering::SeqCst), 1, "dirty when installed");
        l.count("a");
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "still dirty: no second call"
        );
        l.flush();
        l.count("b");
        l.count("c");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_dropped_ledger_writes_what_it_held() {
        let (_d, c) = cache();
        let l = Ledger::new(c.clone(), Arc::new(Saved(Mutex::new(vec![]))));
        l.count("late");
        drop(l);
        assert_eq!(stats::load(c.root()).unwrap().extra["late"], 1);
    }

    #[test]
    fn a_flush_returns_only_after_a_flush_begun_before_it_has_written() {
        let (_d, c) = cache();
        let l = Arc::new(Ledger::new(c.clone(), Arc::new(Saved(Mutex::new(vec![])))));
        l.count("actions");
        // stats.json locked by another process's rewrite: the first flush takes the figures
        // and waits for the lock.
        let held = crate::platform::open_lock(&c.root().join("stats.json")).unwrap();
        crate::platform::lock(&held, crate::platform::LockMode::Exclusive).unwrap();
        let first = std::thread::spawn({
            let l = l.clone();
            move || l.flush()
        });
        while l.is_dirty() {
            std::thread::yield_now();
        }
        let second = std::thread::spawn({
            let l = l.clone();
            move || l.flush()
        });
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            !second.is_finished(),
            "the second flush returned while the first had not written what it took"
        );
        drop(held);
        first.join().unwrap();
        second.join().unwrap();
        assert_eq!(stats::load(c.root()).unwrap().extra["actions"], 1);
    }
}
