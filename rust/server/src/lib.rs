//! clonestage's local REAPI v2 endpoint (`clonestage serve`): Capabilities, CAS, ByteStream,
//! ActionCache and Execution over the engine's cache, on a unix socket and a token-guarded
//! loopback TCP port, running each action in a root staged by the engine through the
//! `clonestage-spawn` wrapper. Issue 3 is the spec.
//!
//! Layout: `server` (start/stop, signals), `state` (what the services share), `listen`,
//! `auth`, `lock`, `layout` (files in the cache), one module
//! per service, each owning what only it uses (`capabilities`, `cas_service`, `bytestream`,
//! `action_cache_service` over `ac_store`, `execution`), `upstream` (a team's cache
//! behind this one), `failure` (how failures reach
//! clients), `server_counters` (server counters in stats.json), `zstd` (the codec of
//! ByteStream and the CAS batch calls), `eviction` (the cache's size limit), `apple_probe`
//! (the Apple environment an action would get, for `clonestage doctor`). README.md draws
//! an Execute's path through them. Apart from the serving code: `client`, what the CLI asks
//! of a running server (address, status, stop), which the serving code never imports.

mod ac_store;
mod action_cache_service;
mod activity;
mod answer_grace;
mod apple_probe;
mod auth;
mod bytestream;
mod capabilities;
mod cas_service;
mod checks;
pub mod client;
mod eviction;
mod execution;
mod failure;
mod inline_std;
mod layout;
mod ledger_flush;
mod listen;
mod result_digests;
mod rpc_timing;
mod server;
pub mod server_counters;
mod server_lock;
mod state;
mod upstream;
mod zstd;

pub use apple_probe::{apple_probe, AppleProbe};
pub use auth::TOKEN_HEADER;
pub use bytestream::{UploadGauge, UPLOAD_SESSIONS_PER_CLIENT};
pub use capabilities::{MAX_BATCH_TOTAL_SIZE, MAX_MESSAGE_SIZE};
pub use execution::ready_dirs::is_ready_work_dir;
pub use execution::spawn::{locate as locate_spawn_wrapper, SpawnStats, WRAPPER_NAME};
pub use failure::{PreconditionFailure, Violation, PRECONDITION_FAILURE_TYPE};
pub use listen::unix_target;
pub use server::{start, ServerHandle, DRAIN_GRACE};
pub use server_counters::{stage_percentiles, STAGE_BUCKETS_US};
pub use upstream::{UpstreamOptions, WriteMode};

use std::path::{Path, PathBuf};

/// This build's version (the workspace's): what a server writes to `<cache>/server/version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

// Only the patched h2 has this item, so a build that lost the patch fails to compile here:
// rust/third_party/h2/PATCH.md.
const _: () = h2::CLONESTAGE_PATCHED_ANY_AUTHORITY;

/// Options of `clonestage serve`.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub cache_dir: PathBuf,
    /// Loopback TCP port; None picks a free one.
    pub port: Option<u16>,
    /// Actions run in parallel (default: number of cores).
    pub jobs: usize,
    /// The `clonestage-spawn` wrapper; None: `$CLONESTAGE_SPAWN`, then beside the clonestage
    /// binary, then on PATH.
    pub spawn: Option<PathBuf>,
    /// Bounds on an input root's depth and expanded size (`--max-tree-*`).
    pub limits: clonestage_engine::stage::TreeLimits,
    /// The cache's size limit in bytes (`--max-size`); None: min(25% of its filesystem,
    /// 64 GiB). Kept by background eviction (`eviction`).
    pub max_size: Option<u64>,
    /// How often eviction looks at the cache's size; None: every 30 s.
    pub evict_every: Option<std::time::Duration>,
    /// A team's REAPI cache behind this one (`--upstream*`, docs/upstream.md); None: none.
    pub upstream: Option<UpstreamOptions>,
    /// Ready copies of hot input subtrees kept in `<cache>/pool/` (`--pool-copies`); 0: no
    /// pool.
    pub pool_copies: usize,
    /// Patterns of action-relative paths linked into every root as one persistent directory
    /// each (`--shared-dir`; compilers' module caches, docs/module-cache.md), checked when the
    /// server starts: empty, the default list; `none` alone, none.
    pub shared_dirs: Vec<String>,
    /// `--preserve-inodes` and `--macho-link-age-ms`: Mach-O code inputs as links to the
    /// cache's inodes (the engine's `stage::code_links`).
    pub code: clonestage_engine::stage::CodePolicy,
}

/// Upload entries waiting in the cache's upstream queue (`clonestage stats`'s
/// `upstream_queue_len`); None when the cache never had an upstream.
pub fn upstream_queue_len(cache_dir: &Path) -> Option<u64> {
    upstream::Upstream::queue_len(cache_dir)
}

/// Run the server until SIGTERM/SIGINT (then drain running actions; a second signal cancels).
pub fn serve(opts: ServeOptions) -> anyhow::Result<()> {
    server::serve_blocking(opts)
}
