//! clonestage's staging engine: a local content-addressed cache, a cache of materialized
//! subtrees, and a stager that turns a REAPI tree digest into a ready action root by the
//! fastest method each device offers (whole-tree clone, file clone, hardlink, copy), with the
//! permission contract Bazel actions depend on.
//!
//! Layout, bottom layer first (each imports only from the layers below it; the order is
//! declared once in `tests/layout/check.py` and drawn in `docs/design/engine.md`):
//! `digest` and `platform` (the only OS-specific code); `error`; `macho` (telling Mach-O code
//! from its bytes), `remove` (deleting trees), `stats` (counters kept across processes);
//! `cas` (blobs, pins, what is stored, the record of Mach-O code blobs: nothing of trees,
//! stages or the pool); `tree` (Merkle encoding, validation, ingest); `ledger` (the one writer
//! of counters, access log and cost estimates, flushed by whoever runs the stager) and
//! `shared` (the persistent cache directories linked into roots: compilers' module caches);
//! `stage` (method choice, building roots, the pool); `gc` (eviction, which needs them all).

pub mod cas;
pub mod digest;
pub mod error;
pub mod gc;
pub mod ledger;
pub mod macho;
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
