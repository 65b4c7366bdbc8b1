//! Removing staged roots and cache trees: read-only directories (0o555) are made writable
//! first, symlinks are removed, never followed, and btrfs subvolumes are deleted in one call.

use crate::error::{IoContext, Result};
use crate::platform;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Remove `path` and everything below it. A missing path is not an error.
pub fn remove_tree(path: &Path) -> Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(crate::Error::io("lstat", path, e)),
    };
    if !meta.is_dir() {
        return std::fs::remove_file(path).ctx("unlink", path);
    }
    if platform::remove_tree_container(path).unwrap_or(false) {
        return Ok(());
    }
    if meta.permissions().mode() & 0o700 != 0o700 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
            .ctx("chmod", path)?;
    }
    for e in std::fs::read_dir(path).ctx("readdir", path)? {
        let e = e.ctx("readdir", path)?;
        remove_tree(&e.path())?;
    }
    std::fs::remove_dir(path).ctx("rmdir", path)
}
