//! What every service shares: the cache and stager, the action cache, the spawn wrapper, the
//! `--jobs` semaphore, the operations and upload sessions, and the draining flag set on
//! shutdown. Counters go to the stager's ledger (`count`), flushed by `ledger_flush`.

use crate::ac_store::AcStore;
use crate::bytestream::Uploads;
use crate::execution::apple_env::AppleEnv;
use crate::execution::operations::Operations;
use crate::execution::prespawn::Pool;
use crate::execution::workdir::Janitor;
use crate::layout::Layout;
use crate::ledger_flush::LedgerFlush;
use clonestage_engine::{Cache, Stager};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Semaphore;

pub(crate) struct State {
    pub cache: Arc<Cache>,
    pub stager: Stager,
    pub layout: Layout,
    pub ac: AcStore,
    pub spawn: PathBuf,
    /// DEVELOPER_DIR/SDKROOT/TMPDIR for Apple actions (`execution::apple_env`).
    pub apple: AppleEnv,
    /// Wrappers started ahead of time (`execution::prespawn`).
    pub prespawn: Pool,
    pub jobs: Arc<Semaphore>,
    pub ops: Operations,
    pub uploads: Uploads,
    /// `ExecutedActionMetadata.worker`.
    pub worker: String,
    draining: AtomicBool,
    /// Cleanup tasks still running (`background`); shutdown waits for them.
    background: AtomicUsize,
    /// Finished actions' work dirs, removed while no action runs.
    pub janitor: Arc<Janitor>,
    /// The stager's ledger's flushes in flight (`ledger_flush`).
    pub ledger_flush: LedgerFlush,
}

/// How many wrappers wait for actions: one per job slot, at most 2 (each is an idle process
/// of ~1.5 MB); `CLONESTAGE_PRESPAWN=N` overrides (0: start the wrapper per action).
fn prespawn_size(jobs: usize) -> usize {
    match std::env::var("CLONESTAGE_PRESPAWN")
        .ok()
        .map(|v| v.parse::<usize>())
    {
        Some(Ok(n)) => n,
        _ => jobs.clamp(1, 2),
    }
}

impl State {
    pub fn new(
        cache: Arc<Cache>,
        layout: Layout,
        ac: AcStore,
        spawn: PathBuf,
        jobs: usize,
        id: String,
        limits: clonestage_engine::stage::TreeLimits,
    ) -> State {
        State {
            stager: Stager::new(cache.clone()).with_limits(limits),
            cache,
            layout,
            ac,
            prespawn: Pool::start(&spawn, prespawn_size(jobs)),
            spawn,
            apple: AppleEnv::for_this_host(),
            jobs: Arc::new(Semaphore::new(jobs.max(1))),
            ops: Operations::new(id),
            uploads: Uploads::default(),
            worker: format!("clonestage@{}", hostname()),
            draining: AtomicBool::new(false),
            background: AtomicUsize::new(0),
            janitor: Arc::new(Janitor::default()),
            ledger_flush: LedgerFlush::default(),
        }
    }

    /// Add one to the server counter `key` (written to stats.json by the ledger's flush, off
    /// the request's path).
    pub fn count(&self, key: &str) {
        self.stager.ledger().count(key);
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

    /// Actions accepted and not answered yet, plus cleanups still running.
    pub fn busy(&self) -> usize {
        self.ops.unfinished()
            + self.background.load(Ordering::SeqCst)
            + self.janitor.pending()
            + self.ledger_flush.in_flight()
    }

    /// Start the janitor thread (it ends once the server state is gone and its queue empty).
    pub fn start_janitor(self: &Arc<Self>) -> std::io::Result<()> {
        let weak = Arc::downgrade(self);
        self.janitor
            .spawn(move || weak.upgrade().map(|s| s.ops.unfinished()))
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
