//! The one place that knows operating systems. Everything above it talks to this small
//! interface: clone a file, clone a tree, hardlink, copy, probe a device. POSIX calls that
//! behave the same everywhere live in `dir.rs` (whole-file locks in `lock.rs`); each OS
//! supplies the rest in its own file.
//!
//! Per-OS functions (same signatures in `linux.rs` and `macos.rs`):
//! - `clone_file(src, dst_dir, name, mode)`, `clone_file_at(src_dirfd, src, ...)`: copy-on-write
//!   clone of one file (FICLONE / clonefileat).
//! - `tree_clone_kind(dir)`: whether `dir`'s filesystem clones whole trees, and how.
//! - `filesystem_name(path)`: the name of the filesystem `path` is on ("btrfs", "apfs", ...),
//!   for `clonestage status`.
//! - `new_tree_container(parent, name)`: a directory that `clone_tree` can clone later
//!   (a btrfs subvolume; a plain directory on APFS).
//! - `clone_tree(src, dst_parent, name)`: clone a whole directory tree in one call.
//! - `remove_tree_container_at(parent, name, ino)`: delete a tree made by the two above in one
//!   call if the OS can, relative to its parent's fd.
//! - `rename_noreplace_at(from_dir, from, to_dir, to)`: atomic rename that fails with EEXIST
//!   instead of replacing (`rename_noreplace` below is its path form).
//! - `USER_DIRS`: where a user's cache and data directories sit by the OS's convention.
//! - `MAX_UNIX_SOCKET_PATH`: the longest path a unix socket address holds (`sun_path`).
//! - `MIN_EXEC_LINK_AGE`: how old a hardlink must be before anything runs through it.
//!
//! Mount points below a directory, and detaching them, are `mounts` (a per-OS pair of its own).

mod dir;
mod lock;
pub mod mounts;
pub use dir::{
    copy_file, copy_file_at, cstr, current_umask, hardlink, hardlink_at, open_read_at, stat_at, Dir,
};
pub use lock::{lock, open_lock, try_lock, LockMode};

#[cfg(target_os = "linux")]
#[path = "linux.rs"]
mod imp;
#[cfg(target_os = "macos")]
#[path = "macos.rs"]
mod imp;

pub use imp::{
    clone_file, clone_file_at, clone_tree, filesystem_name, new_tree_container,
    remove_tree_container_at, rename_noreplace_at, tree_clone_kind, FILE_CLONE_METHOD,
    MAX_UNIX_SOCKET_PATH, MIN_EXEC_LINK_AGE, USER_DIRS,
};

/// Where a user's directories sit by the OS's convention, relative to `$HOME`: one value per
/// platform (`USER_DIRS`), read by the CLI's one definition of the cache directory and the
/// per-version binary home.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserDirs {
    /// The parent of clonestage's default cache directory.
    pub cache_under_home: &'static str,
    /// Whether an absolute `$XDG_CACHE_HOME` replaces `$HOME/<cache_under_home>`.
    pub cache_honours_xdg: bool,
    /// The parent of the per-version binary home when `$XDG_DATA_HOME` is not absolute.
    pub data_under_home: &'static str,
    /// The parent of Bazel's default output user root, when it is under `$HOME`.
    pub bazel_root_parent_under_home: Option<&'static str>,
}

use std::io;

/// Atomic rename of path `from` to path `to` that fails with EEXIST instead of replacing.
pub fn rename_noreplace(from: &std::path::Path, to: &std::path::Path) -> io::Result<()> {
    let (f, t) = (cstr(from)?, cstr(to)?);
    rename_noreplace_at(libc::AT_FDCWD, &f, libc::AT_FDCWD, &t)
}

/// How a filesystem clones whole trees in one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TreeClone {
    /// macOS `clonefile(2)` of a directory (APFS).
    Clonefile,
    /// A btrfs snapshot of a subvolume.
    Snapshot,
}

/// Errors that mean "this filesystem (pair) cannot do that": fall back, don't fail.
pub fn is_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EXDEV)
            | Some(libc::ENOTSUP)
            | Some(libc::EINVAL)
            | Some(libc::ENOTTY)
            | Some(libc::ENOSYS)
            | Some(libc::EPERM)
    ) || e.raw_os_error() == Some(libc::EOPNOTSUPP)
}

/// Short, stable reason names for counters and warnings ("exdev", "enotsup", "emlink", ...).
pub fn reason_name(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EXDEV) => "exdev".into(),
        Some(libc::EMLINK) => "emlink".into(),
        Some(libc::EINVAL) => "einval".into(),
        Some(libc::EPERM) => "eperm".into(),
        Some(libc::ENOTTY) => "enotty".into(),
        Some(libc::ENOSYS) => "enosys".into(),
        Some(code) if code == libc::ENOTSUP || code == libc::EOPNOTSUPP => "enotsup".into(),
        Some(code) => format!("errno{code}"),
        None => "other".into(),
    }
}
