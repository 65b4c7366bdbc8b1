//! What every service shares: the cache and stager (whose ledger holds the counters, flushed
//! by `ledger_flush`), the action-cache store, the upstream (if any), the shared cache
//! directories (if any), the draining
//! flag set on shutdown and the count of background tasks. What one service needs alone it
//! owns (the execution service its operations, job slots, prespawn pool and janitor;
//! ByteStream its uploads); the server asks the execution service how busy it is through
//! `Activity`, so this file depends on no service.

use crate::ac_store::AcStore;
use crate::activity::Activity;
use crate::ledger_flush::LedgerFlush;
use crate::upstream::Upstream;
use clonestage_engine::shared::{Pattern, SharedDirs};
use clonestage_engine::{Cache, Stager};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

pub(crate) struct State {
    pub cache: Arc<Cache>,
    pub stager: Stager,
    pub ac: Arc<AcStore>,
    /// The team's cache behind this one, if any (`upstream`).
    pub upstream: Option<Arc<Upstream>>,
    /// The shared cache directories linked into roots (`--shared-dir`); None: turned off.
    pub shared: Option<Arc<SharedDirs>>,
    /// The execution service's activity (`execution::ExecState`).
    activity: Arc<dyn Activity>,
    draining: AtomicBool,
    /// Cleanup tasks still running (`background`); shutdown waits for them.
    background: AtomicUsize,
    /// When the stager's ledger is written (`ledger_flush`).
    pub ledger_flush: Arc<LedgerFlush>,
}

/// How the server's stager stages roots: `serve`'s tree limits, pool size, shared cache
/// directories and Mach-O code policy.
pub struct StagingOptions {
    pub limits: clonestage_engine::stage::TreeLimits,
    pub pool_copies: usize,
    /// Checked patterns; empty turns sharing off.
    pub shared: Vec<Pattern>,
    pub code: clonestage_engine::stage::CodePolicy,
}

impl State {
    pub fn new(
        cache: Arc<Cache>,
        ac: Arc<AcStore>,
        activity: Arc<dyn Activity>,
        upstream: Option<crate::upstream::UpstreamOptions>,
        staging: StagingOptions,
    ) -> anyhow::Result<State> {
        let StagingOptions {
            limits,
            pool_copies,
            shared,
            code,
        } = staging;
        let mut stager = Stager::new(cache.clone())
            .with_limits(limits)
            .with_code_policy(code);
        if code.preserves() {
            tracing::info!(
                preserve_inodes = code.preserve.name(),
                min_link_age_ms = code.min_link_age.as_millis() as u64,
                "Mach-O code inputs are staged as links to the cache's inodes (links younger than the minimum age come only from the pool)"
            );
        }
        // Ready copies of hot subtrees (the engine's `stage::pool`); a stale pool is emptied.
        let bounds = clonestage_engine::stage::PoolBounds {
            copies: pool_copies,
            ..Default::default()
        };
        if pool_copies == 0 {
            // This server holds the cache's lock: what is in `<cache>/pool/` is stale.
            let _ = clonestage_engine::stage::pool::empty_stale(&cache, || false);
            tracing::info!(
                "no pool of ready subtrees (--pool-copies 0): every subtree is staged per action"
            );
        } else if let Err(e) = stager.enable_pool(bounds) {
            tracing::warn!(error = %e, "no pool of ready subtrees: every subtree is staged per action");
        }
        let shared = if shared.is_empty() {
            tracing::info!("no shared cache directories (--shared-dir none): every root starts with empty compiler caches");
            None
        } else {
            let list: Vec<&str> = shared.iter().map(|p| p.as_str()).collect();
            tracing::info!(patterns = %list.join(","), "shared cache directories (docs/module-cache.md)");
            Some(Arc::new(SharedDirs::open(&cache, shared)?))
        };
        let ledger_flush = Arc::new(LedgerFlush::new(stager.ledger().clone(), activity.clone()));
        let upstream = match upstream {
            Some(o) => Some(Upstream::new(o, cache.clone(), stager.ledger().clone())?),
            None => None,
        };
        Ok(State {
            stager,
            cache,
            ac,
            activity,
            draining: AtomicBool::new(false),
            background: AtomicUsize::new(0),
            ledger_flush,
            upstream,
            shared,
        })
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

    /// Actions accepted and not answered yet, plus cleanups and ledger flushes still running
    /// or queued.
    pub fn busy(&self) -> usize {
        self.activity.unfinished()
            + self.background.load(Ordering::SeqCst)
            + self.activity.cleanups_pending()
            + self.ledger_flush.in_flight()
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }
}
