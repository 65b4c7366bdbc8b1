//! When the server writes its bookkeeping: the stager's ledger (`clonestage_engine::Ledger`)
//! holds every stage's counters, staged roots and moved cost estimates, and the server's own
//! counters (`State::count`, the action figures); this file flushes it on a timer. Any change
//! to a ledger with nothing unwritten schedules one flush: it waits while actions run (at most
//! `STATS_FLUSH_EVERY`), so a build rewrites stats.json a few times a second rather than twice
//! per action, and happens within `STATS_IDLE_POLL` of the last action ending, so
//! `clonestage stats` right after a build sees it. Shutdown waits for a scheduled flush
//! (`State::busy`) and flushes once more (`flush_now`). A request never waits on the files:
//! it pays a mutex and, when nothing was pending, a task spawn.

use crate::activity::Activity;
use clonestage_engine::Ledger;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// While actions run, pending counters are written at most this long after they changed.
pub(crate) const STATS_FLUSH_EVERY: Duration = Duration::from_millis(250);
/// How often a pending flush looks whether the actions have ended.
pub(crate) const STATS_IDLE_POLL: Duration = Duration::from_millis(10);

/// The flusher of one ledger: what it writes, whose actions it waits for, and the flushes
/// scheduled or running (one at a time in practice: the ledger calls back once per flush).
pub(crate) struct LedgerFlush {
    ledger: Arc<Ledger>,
    activity: Arc<dyn Activity>,
    in_flight: AtomicUsize,
}

impl LedgerFlush {
    pub fn new(ledger: Arc<Ledger>, activity: Arc<dyn Activity>) -> LedgerFlush {
        LedgerFlush {
            ledger,
            activity,
            in_flight: AtomicUsize::new(0),
        }
    }

    /// Flushes scheduled and not finished: shutdown waits for them.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Make every change to the ledger schedule a flush on this runtime.
    pub fn start(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let handle = tokio::runtime::Handle::current();
        self.ledger.on_change(Box::new(move || {
            if let Some(f) = weak.upgrade() {
                f.schedule(&handle);
            }
        }));
    }

    fn schedule(self: Arc<Self>, handle: &tokio::runtime::Handle) {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        handle.spawn(async move {
            let start = Instant::now();
            while self.activity.unfinished() > 0 && start.elapsed() < STATS_FLUSH_EVERY {
                tokio::time::sleep(STATS_IDLE_POLL).await;
            }
            self.flush_now().await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
        });
    }

    /// Write whatever the ledger holds now, on the blocking pool.
    pub async fn flush_now(&self) {
        let ledger = self.ledger.clone();
        let _ = tokio::task::spawn_blocking(move || ledger.flush()).await;
    }
}
