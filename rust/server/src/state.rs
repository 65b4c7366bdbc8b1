//! What every service shares: the cache and stager, the action-cache store, the layout of
//! the server's files, the draining flag set on shutdown, the count of background tasks, and
//! the pending counters. What one service needs alone it owns (the execution service its
//! operations, job slots, prespawn pool and janitor; ByteStream its uploads); the server asks
//! the execution service how busy it is through `Activity`, so this file depends on no service.

use crate::ac_store::AcStore;
use crate::layout::Layout;
use clonestage_engine::stats::Counters;
use clonestage_engine::{Cache, Digest, Stager};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// How busy a service is, for shutdown's drain, idle-time eviction and the stats flush.
pub(crate) trait Activity: Send + Sync {
    /// Actions accepted and not answered yet.
    fn unfinished(&self) -> usize;
    /// Cleanups the service queued and has not done yet (work dirs waiting for removal).
    fn cleanups_pending(&self) -> usize;
}

pub(crate) struct State {
    pub cache: Arc<Cache>,
    pub stager: Stager,
    pub layout: Layout,
    pub ac: AcStore,
    /// The execution service's activity (`execution::ExecState`).
    activity: Arc<dyn Activity>,
    draining: AtomicBool,
    /// Cleanup tasks still running (`background`); shutdown waits for them.
    background: AtomicUsize,
    /// Counter deltas and staged roots not yet written to stats.json / access.log: requests
    /// only add to them; one background flush at a time writes what has accumulated.
    pending: Mutex<PendingStats>,
    flush_scheduled: AtomicBool,
}

/// While actions run, pending counters are written at most this long after they changed.
const STATS_FLUSH_EVERY: std::time::Duration = std::time::Duration::from_millis(250);
/// How often a pending flush looks whether the actions have ended.
const STATS_IDLE_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// What `State::flush_stats` writes next.
#[derive(Default)]
pub(crate) struct PendingStats {
    /// Engine counters of stagings plus the server's own (`extra`).
    pub counters: Counters,
    /// Input roots staged, for the cache's access log (LRU eviction).
    pub roots: Vec<Digest>,
}

impl State {
    pub fn new(
        cache: Arc<Cache>,
        layout: Layout,
        ac: AcStore,
        limits: clonestage_engine::stage::TreeLimits,
        activity: Arc<dyn Activity>,
    ) -> State {
        State {
            stager: Stager::new(cache.clone()).with_limits(limits),
            cache,
            layout,
            ac,
            activity,
            draining: AtomicBool::new(false),
            background: AtomicUsize::new(0),
            pending: Mutex::new(PendingStats::default()),
            flush_scheduled: AtomicBool::new(false),
        }
    }

    /// Add one to the server counter `key` (written to stats.json off the request's path).
    pub fn count(self: &Arc<Self>, key: &str) {
        self.add_stats(|p| *p.counters.extra.entry(key.to_string()).or_default() += 1);
    }

    /// Change the pending figures and make sure a flush follows. Never blocks on the file:
    /// a request pays a mutex and, when no flush is pending, a task spawn. The flush waits
    /// while actions run (at most `STATS_FLUSH_EVERY`), so a build rewrites stats.json a few
    /// times a second rather than twice per action, and happens within `STATS_IDLE_POLL` of
    /// the last action ending: `clonestage stats` after a build sees it.
    pub fn add_stats(self: &Arc<Self>, f: impl FnOnce(&mut PendingStats)) {
        f(&mut self.pending.lock().unwrap());
        if self.flush_scheduled.swap(true, Ordering::SeqCst) {
            return;
        }
        self.background.fetch_add(1, Ordering::SeqCst);
        let state = self.clone();
        tokio::spawn(async move {
            let start = std::time::Instant::now();
            while state.activity.unfinished() > 0 && start.elapsed() < STATS_FLUSH_EVERY {
                tokio::time::sleep(STATS_IDLE_POLL).await;
            }
            let s = state.clone();
            let _ = tokio::task::spawn_blocking(move || s.flush_stats()).await;
            state.background.fetch_sub(1, Ordering::SeqCst);
        });
    }

    /// Write the pending figures: one access-log append per staged root and one
    /// read-add-rewrite of stats.json under its flock for everything that accumulated.
    fn flush_stats(&self) {
        // Cleared before taking: an add after this point schedules the next flush.
        self.flush_scheduled.store(false, Ordering::SeqCst);
        let p = std::mem::take(&mut *self.pending.lock().unwrap());
        for root in &p.roots {
            self.cache.note_access(root);
        }
        if p.counters != Counters::default() {
            if let Err(e) = clonestage_engine::stats::record(self.cache.root(), &p.counters) {
                tracing::warn!(error = %e, "cannot update the cache's counters");
            }
        }
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Run `f` on the blocking pool after the current request; counted until it ends.
    pub fn background(self: &Arc<Self>, f: impl FnOnce(&State) + Send + 'static) {
        self.background.fetch_add(1, Ordering::SeqCst);
        let state = self.clone();
        tokio::task::spawn_blocking(move || {
            f(&state);
            state.background.fetch_sub(1, Ordering::SeqCst);
        });
    }

    /// Actions accepted and not answered yet, plus cleanups still running or queued.
    pub fn busy(&self) -> usize {
        self.activity.unfinished()
            + self.background.load(Ordering::SeqCst)
            + self.activity.cleanups_pending()
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }
}
