//! What the execution service owns: its operations (`operations`), the `--jobs` slots, the
//! wrappers started ahead of time (`prespawn`), the janitor that removes finished work dirs
//! (`janitor`), keeps work dirs ready for the next actions (`ready_dirs`) and builds pooled
//! copies (`pool_builder`), the Apple
//! environment (`apple_env`), every action's TMPDIR (`tmpdir`), the spawn wrapper's path and
//! the worker name (`clonestage@<hostname>`) written into `ExecutedActionMetadata`. The server
//! reads how busy it is through `activity::Activity`, and stops it at shutdown (`hurry`,
//! `close`).

use super::apple_env::AppleEnv;
use super::janitor::Janitor;
use super::operations::Operations;
use super::pool_builder::PoolBuilder;
use super::prespawn::Pool;
use super::ready_dirs::ReadyDirs;
use crate::activity::Activity;
use crate::state::State;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::Semaphore;

pub(crate) struct ExecState {
    pub ops: Operations,
    /// One permit per `--jobs` slot.
    pub jobs: Arc<Semaphore>,
    /// Wrappers started ahead of time (`prespawn`).
    pub prespawn: Pool,
    /// Finished actions' work dirs, removed while no action runs.
    pub janitor: Arc<Janitor>,
    /// Work dirs made ahead of time (by the janitor).
    pub ready_dirs: Arc<ReadyDirs>,
    /// DEVELOPER_DIR/SDKROOT for Apple actions (`apple_env`).
    pub apple: AppleEnv,
    /// Every action's TMPDIR (`tmpdir`): the server's own, or /tmp.
    pub tmpdir: String,
    /// The `clonestage-spawn` wrapper.
    pub spawn: PathBuf,
    /// `ExecutedActionMetadata.worker`.
    pub worker: String,
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

impl ExecState {
    /// `id` prefixes operation names (unique per server start); work dirs go in `work_base`,
    /// and those made ahead are filled in `work_making` first.
    pub fn new(
        spawn: PathBuf,
        jobs: usize,
        id: String,
        work_base: PathBuf,
        work_making: PathBuf,
    ) -> ExecState {
        ExecState {
            ops: Operations::new(id),
            jobs: Arc::new(Semaphore::new(jobs.max(1))),
            prespawn: Pool::start(&spawn, prespawn_size(jobs)),
            janitor: Arc::new(Janitor::default()),
            // As many as can start at once.
            ready_dirs: Arc::new(ReadyDirs::new(work_base, work_making, jobs.clamp(1, 8))),
            apple: AppleEnv::for_this_host(),
            tmpdir: super::tmpdir::of_this_process(),
            spawn,
            worker: format!("clonestage@{}", hostname()),
        }
    }

    /// Start the janitor thread (it ends once this state is gone and its queue empty), with
    /// the ready work dirs to keep and the pool builder for `state` under `jobs` actions.
    pub fn start_janitor(self: &Arc<Self>, state: &Arc<State>, jobs: usize) -> std::io::Result<()> {
        let weak = Arc::downgrade(self);
        self.janitor.set_ready(self.ready_dirs.clone());
        self.janitor.set_builder(PoolBuilder::new(state, jobs));
        self.janitor
            .spawn(move || weak.upgrade().map(|s| s.ops.unfinished()))
    }
}

impl Activity for ExecState {
    fn unfinished(&self) -> usize {
        self.ops.unfinished()
    }

    fn cleanups_pending(&self) -> usize {
        self.janitor.pending()
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
