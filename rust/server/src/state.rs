//! What every service shares: the cache and stager, the action cache, the spawn wrapper, the
//! `--jobs` semaphore, the operations and upload sessions, and the draining flag set on
//! shutdown.

use crate::ac_store::AcStore;
use crate::bytestream::Uploads;
use crate::execution::operations::Operations;
use crate::layout::Layout;
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
    pub jobs: Arc<Semaphore>,
    pub ops: Operations,
    pub uploads: Uploads,
    /// `ExecutedActionMetadata.worker`.
    pub worker: String,
    draining: AtomicBool,
    /// Cleanup tasks still running (`background`); shutdown waits for them.
    background: AtomicUsize,
}

impl State {
    pub fn new(
        cache: Arc<Cache>,
        layout: Layout,
        ac: AcStore,
        spawn: PathBuf,
        jobs: usize,
        id: String,
    ) -> State {
        State {
            stager: Stager::new(cache.clone()),
            cache,
            layout,
            ac,
            spawn,
            jobs: Arc::new(Semaphore::new(jobs.max(1))),
            ops: Operations::new(id),
            uploads: Uploads::default(),
            worker: format!("clonestage@{}", hostname()),
            draining: AtomicBool::new(false),
            background: AtomicUsize::new(0),
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

    /// Actions accepted and not answered yet, plus cleanups still running.
    pub fn busy(&self) -> usize {
        self.ops.unfinished() + self.background.load(Ordering::SeqCst)
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
