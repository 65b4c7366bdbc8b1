//! Discarding copies: counted in the cache's counters by reason (`pool_discarded`,
//! `pool_discard_reasons`), and removed. A copy that comes back from an action changed is
//! left where it is, inside the work dir the server's janitor removes in the background; a
//! ready copy dropped from the pool is removed here (on the caller's thread: gc, the builder,
//! a take that found it quarantined).

use crate::ledger::Ledger;
use std::ffi::CStr;
use std::path::Path;

/// Why a copy was not taken back into the pool (`Pool::recycle`'s answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discard {
    /// Short, stable name: "replaced", "mode", "owner", "size", "mtime", "nlink", "ctime",
    /// "listing", "missing", "quarantined", "return-rename", ...
    pub reason: &'static str,
    /// Where it differed (or the copy's top).
    pub path: std::path::PathBuf,
}

/// Count one discarded copy (written when the ledger is flushed).
pub(crate) fn count(ledger: &Ledger, reason: &str) {
    ledger.add(|c| c.pool_discard(reason));
}

/// Remove the entry `name` of the pool directory `dir`.
pub(crate) fn remove_named(dir: &Path, name: &CStr) {
    let p = dir.join(name.to_string_lossy().as_ref());
    if let Err(e) = crate::remove::remove_tree(&p) {
        tracing::warn!(path = %p.display(), error = %e, "cannot remove a discarded pooled copy");
    }
}
