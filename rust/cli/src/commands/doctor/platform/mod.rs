//! What the doctor's checks need to know about the OS, behind one small interface with one
//! file per platform (same items in `linux.rs` and `macos.rs`):
//! - `NAME`: how the report names the OS;
//! - `APPLE`: whether Apple actions, Xcode and per-inode code verification exist here (the
//!   routing and xcode checks run only then, and the exec check's kills and scans matter);
//! - `CLONES_EXPECTED`: whether a cache without copy-on-write clones is a misconfiguration
//!   (macOS: APFS clones; Linux: ext4 has none, and hardlinks are the supported path there);
//! - `EXEC_RUNS`: runs per kind of executable in the exec check;
//! - `developer_tool_status()`: whether this session is a trusted developer tool, which macOS
//!   exempts from the per-inode scans (None: no such thing here);
//! - `packaged_version(bazel)`: the package and version that installed an unstamped Bazel.

#[cfg(target_os = "linux")]
#[path = "linux.rs"]
mod imp;
#[cfg(target_os = "macos")]
#[path = "macos.rs"]
mod imp;

pub use imp::{developer_tool_status, packaged_version, APPLE, CLONES_EXPECTED, EXEC_RUNS, NAME};
