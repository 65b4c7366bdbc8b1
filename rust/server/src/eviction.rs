//! Keeping the cache within `serve --max-size`: a background thread that, every `every`
//! (30 s by default), sums the bytes the cache's blobs and its shared cache directories
//! (`clonestage_engine::shared`) hold and evicts down to the low watermark (90% of the limit)
//! when the cache is above the limit (the high watermark), whatever is running, or above the
//! low watermark while the server is idle (no action, upload cleanup or work-dir removal):
//! shared directories first, least recently linked first, and only while idle (a directory a
//! root holds is never cleared); then, with the engine's collector (`clonestage_engine::gc`), the
//! pool's ready copies and least-recently-used blobs. What a
//! running action pins (its input root and everything it reaches) is never evicted; an
//! ActionResult whose blobs were evicted then reads as absent (`ac_store`), so Bazel runs or
//! uploads again.
//!
//! The default limit is min(25% of the cache's filesystem, 64 GiB): a quarter leaves the rest
//! to the source tree, Bazel's output bases (which hold the same outputs again) and the work
//! dirs; 64 GiB holds ~140 p95 SwiftCompile input sets (466 MB each) and is reached only on
//! large disks. A tick stats every blob (one readdir per shard, one stat per blob); gc holds
//! `gc.lock`, so stages wait for it to finish before pinning.

use crate::server_counters;
use crate::state::State;
use clonestage_engine::gc::{self, GcReport, Pooled};
use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How often the thread looks at the cache's size unless told otherwise.
pub const DEFAULT_EVERY: Duration = Duration::from_secs(30);
/// The default limit's cap.
const DEFAULT_CAP: u64 = 64 << 30;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// The high watermark: above it, evict at once.
    pub max: u64,
    /// What eviction goes down to.
    pub low: u64,
    pub every: Duration,
}

impl Limits {
    pub fn new(max: u64, every: Duration) -> Limits {
        Limits {
            max,
            low: max - max / 10,
            every,
        }
    }
}

/// min(25% of the filesystem holding `dir`, 64 GiB); the cap alone if statvfs fails.
pub(crate) fn default_max_size(dir: &Path) -> u64 {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return DEFAULT_CAP;
    };
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        tracing::warn!(dir = %dir.display(), error = %std::io::Error::last_os_error(), "statvfs failed; the cache's default size limit is the cap");
        return DEFAULT_CAP;
    }
    #[allow(clippy::unnecessary_cast)] // the field types differ between Linux and macOS
    let total = (st.f_blocks as u64).saturating_mul(st.f_frsize as u64);
    (total / 4).min(DEFAULT_CAP)
}

/// One look at the cache: evict if the policy says so. Returns the report when it evicted.
pub(crate) fn tick(state: &State, limits: &Limits) -> Option<GcReport> {
    let blobs = clonestage_engine::cas::cache_bytes(&state.cache);
    let mut shared = state.shared.as_ref().map_or(0, |s| s.bytes());
    let bytes = blobs.saturating_add(shared);
    let idle = state.busy() == 0;
    if bytes <= limits.low || (bytes <= limits.max && !idle) {
        return None;
    }
    // Shared cache directories go first, and only while no action runs: each is one
    // directory of rebuildable compiler output, which no running compile may lose.
    if let (Some(s), true) = (&state.shared, idle) {
        let e = s.evict_idle(bytes - limits.low);
        if e.dirs > 0 {
            shared = shared.saturating_sub(e.bytes);
            let ledger = state.stager.ledger();
            ledger.add(|c| {
                *c.extra
                    .entry(server_counters::SHARED_DIR_EVICTIONS.into())
                    .or_default() += e.dirs;
                *c.extra
                    .entry(server_counters::SHARED_DIR_EVICTED_BYTES.into())
                    .or_default() += e.bytes;
            });
            tracing::info!(
                dirs = e.dirs,
                bytes = e.bytes,
                held = e.held,
                "cleared shared cache directories to keep the cache within its limit"
            );
        }
        if blobs.saturating_add(shared) <= limits.low {
            return None;
        }
    }
    // The engine's collector drops the pool's ready copies first (each pins what it links).
    // What the shared directories still hold counts against the limit too.
    let pool = Pooled::Mine(state.stager.pool().map(|p| &**p));
    match gc::collect(&state.cache, pool, limits.low.saturating_sub(shared)) {
        Ok(r) => {
            if let Some(n @ 1..) = r.pooled_dropped {
                tracing::info!(
                    copies = n,
                    "dropped the pool's ready copies before evicting"
                );
            }
            tracing::info!(
                before = r.bytes_before,
                after = r.bytes_after,
                blobs = r.blobs_evicted,
                subtrees = r.subtrees_evicted,
                kept_pinned = r.kept_pinned,
                max = limits.max,
                idle,
                "evicted least-recently-used cache entries"
            );
            Some(r)
        }
        Err(e) => {
            tracing::warn!(error = %e, "cache eviction failed");
            None
        }
    }
}

/// Start the thread; it ends when the server drains or its state is gone.
pub(crate) fn start(state: &Arc<State>, limits: Limits) -> std::io::Result<()> {
    let weak: Weak<State> = Arc::downgrade(state);
    tracing::info!(
        max_size = limits.max,
        low = limits.low,
        every_ms = limits.every.as_millis() as u64,
        "cache size limit"
    );
    std::thread::Builder::new()
        .name("clonestage-evict".into())
        .spawn(move || loop {
            // Sleep in short steps so a draining server does not wait for a whole period.
            let mut slept = Duration::ZERO;
            while slept < limits.every {
                let step = Duration::from_millis(100).min(limits.every - slept);
                std::thread::sleep(step);
                slept += step;
                match weak.upgrade() {
                    Some(s) if !s.is_draining() => {}
                    _ => return,
                }
            }
            let Some(state) = weak.upgrade() else { return };
            tick(&state, &limits);
        })
        .map(|_| ())
}
