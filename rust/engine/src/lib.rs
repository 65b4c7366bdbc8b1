//! clonestage's staging engine: a local content-addressed cache, a cache of materialized
//! subtrees, and a stager that turns a REAPI tree digest into a ready action root by the
//! fastest method each device offers (whole-tree clone, file clone, hardlink, copy), with the
//! permission contract Bazel actions depend on.
//!
//! Layout: `cas` (blobs, pins, eviction, the record of Mach-O code blobs), `macho` (telling
//! Mach-O code from its bytes), `tree` (Merkle encoding, validation, ingest),
//! `stage` (method choice and building roots), `platform` (the only OS-specific code),
//! `stats` (counters kept across processes), `ledger` (the one writer of counters, access log
//! and cost estimates, flushed by whoever runs the stager), `remove` (deleting staged roots),
//! `shared` (the persistent cache directories linked into roots: compilers' module caches).

pub mod cas;
pub mod digest;
pub mod error;
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
