//! The server's integration tests, one module per concern, in one test binary: each test
//! binary links the server and its tonic clients anew (about 40 s of release compile each on
//! the CI machine), so seventeen of them in one cost about what two did. Each test runs its
//! own server in this process on its own temp cache. Two stay in binaries of their own:
//! `signal.rs` signals its own process, and `xcode.rs` sets environment variables for the
//! whole process.
//!
//! One module: `cargo test --release -p clonestage-server --test integration execute::`.

#[path = "../common/mod.rs"]
mod common;

mod cas;
mod compression;
mod enospc;
mod eviction;
mod execute;
mod hostile;
mod overhead;
mod pool;
mod preserve_inodes;
mod serve;
mod shared_dirs;
mod shutdown;
mod tamper;
mod uploads;
mod upstream_failures;
mod upstream_lies;
mod upstream_share;
