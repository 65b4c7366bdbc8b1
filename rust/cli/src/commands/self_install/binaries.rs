//! The binaries half of `clonestage self-install`: the running `clonestage` and a given
//! `clonestage-spawn`, side by side in the per-version home (`dirs::version_home`), where the
//! launcher looks first after `$CLONESTAGE_BIN`.
//!
//! Each copy is atomic (a temporary name in the same directory, 0755, fsync, rename), so a
//! launcher never runs a half-written binary and a failed install leaves the old pair intact.
//! The spawn wrapper is copied first and the helper last: the launcher keys on the helper, so
//! it never finds a helper without its wrapper.

use anyhow::{bail, Context};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Refuses anything but an executable regular file (symlinks are followed).
pub fn check_executable(path: &Path, what: &str) -> anyhow::Result<()> {
    let m = std::fs::metadata(path)
        .with_context(|| format!("{what} {}: cannot stat", path.display()))?;
    if !m.is_file() {
        bail!("{what} {} is not a regular file", path.display());
    }
    if m.permissions().mode() & 0o111 == 0 {
        bail!("{what} {} is not executable", path.display());
    }
    Ok(())
}

/// Copies `src` to `dst` through a temporary name beside it, with `mode`.
pub fn put(src: &Path, dst: &Path, mode: u32) -> anyhow::Result<()> {
    let dir = dst.parent().context("a destination in a directory")?;
    let name = dst.file_name().context("a destination file name")?;
    let tmp = dir.join(format!(
        ".{}.tmp.{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let r = (|| -> anyhow::Result<()> {
        let mut from =
            std::fs::File::open(src).with_context(|| format!("opening {}", src.display()))?;
        let mut to =
            std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        std::io::copy(&mut from, &mut to)
            .with_context(|| format!("copying {} to {}", src.display(), tmp.display()))?;
        to.set_permissions(std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("chmod {mode:o} {}", tmp.display()))?;
        to.flush()?;
        to.sync_all()
            .with_context(|| format!("fsync {}", tmp.display()))?;
        std::fs::rename(&tmp, dst)
            .with_context(|| format!("renaming {} to {}", tmp.display(), dst.display()))
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// Whether `a` and `b` are both readable and hold the same bytes.
pub fn same(a: &Path, b: &Path) -> bool {
    match (std::fs::read(a), std::fs::read(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// The running binary.
pub fn me() -> anyhow::Result<PathBuf> {
    std::env::current_exe().context("finding the running clonestage binary")
}

/// Installs `spawn` and this binary into `dir`.
pub fn install(spawn: &Path, dir: &Path) -> anyhow::Result<()> {
    let me = me()?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    put(spawn, &dir.join("clonestage-spawn"), 0o755)?;
    put(&me, &dir.join("clonestage"), 0o755)?;
    tracing::info!(dir = %dir.display(), "installed clonestage and clonestage-spawn");
    Ok(())
}
