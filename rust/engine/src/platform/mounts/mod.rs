//! Mount points inside a directory, and detaching them: a root action can mount over a part
//! of its input root (a tmpfs over a pooled subtree, a bind of a host directory), and the tree
//! remover must neither fail on the mount point (EBUSY) nor go into a bind-mounted directory
//! from outside the root and delete what is there. So a work dir's mounts are detached before
//! it is removed or its pooled copies are proven.
//!
//! Per-OS (`linux.rs`, `macos.rs`, same signatures): `mount_points()`, every mount point this
//! process sees, and `detach(path)`, which takes the mount at `path` out of the namespace.

#[cfg(target_os = "linux")]
#[path = "linux.rs"]
mod imp;
#[cfg(target_os = "macos")]
#[path = "macos.rs"]
mod imp;

use std::io;
use std::path::{Path, PathBuf};

/// The mount points at or below `dir`, deepest first (each under its own path, so a mount
/// stacked twice on one point is listed twice). A missing `dir` has none.
pub fn under(dir: &Path) -> io::Result<Vec<PathBuf>> {
    // The OS lists mount points by their real paths: compare with `dir`'s.
    let dir = match std::fs::canonicalize(dir) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found: Vec<PathBuf> = imp::mount_points()?
        .into_iter()
        .filter(|m| m.starts_with(&dir))
        .collect();
    found.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    Ok(found)
}

/// Detach every mount at or below `dir`, deepest first. Returns how many were detached; an
/// error names the mount point that stayed and the errno.
pub fn detach_under(dir: &Path) -> io::Result<usize> {
    let found = under(dir)?;
    for m in &found {
        imp::detach(m).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{} {}: {e}", imp::DETACH_CALL, m.display()),
            )
        })?;
    }
    if let Some(left) = under(dir)?.first() {
        return Err(io::Error::other(format!(
            "{} is still mounted after {}",
            left.display(),
            imp::DETACH_CALL
        )));
    }
    Ok(found.len())
}
