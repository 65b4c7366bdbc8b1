//! `StageRequest`: what one call of `Stager::stage` is asked to build, and where.

use super::MethodPreference;
use crate::digest::Digest;
use crate::shared::SharedDirs;
use crate::tree::SymlinkPolicy;
use std::path::PathBuf;
use std::sync::Arc;

/// What to stage, where.
#[derive(Debug, Clone, Default)]
pub struct StageRequest {
    pub root: Digest,
    /// Must not exist; its parent must.
    pub dest: PathBuf,
    /// Output paths relative to `working_dir` whose parent directories must be writable.
    pub outputs: Vec<String>,
    /// The command's working directory relative to the root ("" for the root), resolved
    /// through the tree's own symlinks (never the host's) into `StagedRoot::working_dir`;
    /// refused if it leaves the root.
    pub working_dir: String,
    pub method: MethodPreference,
    pub symlinks: SymlinkPolicy,
    /// Shared cache directories to link into the root where their patterns match
    /// (`crate::shared`, `shared_map`); None: none.
    pub shared: Option<Arc<SharedDirs>>,
    /// Testing (cargo feature `fault-injection`, absent from default builds): fail after
    /// placing this many files (proves cleanup).
    #[cfg(feature = "fault-injection")]
    pub fail_after_files: Option<usize>,
}
