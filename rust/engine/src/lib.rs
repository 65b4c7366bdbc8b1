//! clonestage's staging engine: a local content-addressed cache, a cache of materialized
//! subtrees, and a stager that turns a REAPI tree digest into a ready action root by the
//! fastest method each device offers (whole-tree clone, file clone, hardlink, copy), with the
//! permission contract Bazel actions depend on.
//!
//! Layout: `cas` (blobs, pins, eviction), `tree` (Merkle encoding, validation, ingest),
//! `stage` (method choice and building roots), `platform` (the only OS-specific code),
//! `stats` (counters kept across processes), `ledger` (the one writer of counters, access log
//! and cost estimates, flushed by whoever runs the stager), `remove` (deleting staged roots),
//! `shared` (the persistent cache directories linked into roots: compilers' module caches).

pub mod cas;
pub mod digest;
pub mod error;
pub mod ledger;
pub mod platform;
pub mod remove;
pub mod shared;
pub mod stage;
pub mod stats;
pub mod tree;

pub use cas::{Cache, PutFile};
pub use digest::Digest;
pub use error::{Error, ErrorClass, Result};
pub use ledger::Ledger;
pub use stage::{MethodPreference, StageRequest, StagedRoot, Stager};

/// The cache directory when none is given: `$CLONESTAGE_CACHE`, else the platform's cache dir.
pub fn default_cache_dir() -> std::path::PathBuf {
    if let Some(d) = std::env::var_os("CLONESTAGE_CACHE").filter(|d| !d.is_empty()) {
        return d.into();
    }
    let home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/tmp".into());
    if cfg!(target_os = "macos") {
        home.join("Library/Caches/clonestage")
    } else if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        std::path::PathBuf::from(x).join("clonestage")
    } else {
        home.join(".cache/clonestage")
    }
}
