//! `clonestage self-install`: puts the running `clonestage` and a given `clonestage-spawn`
//! side by side in the per-version binary home, `<data>/clonestage/<version>/bin/`, where the
//! launcher (tools/bazel) looks first after `$CLONESTAGE_BIN`. `<data>` is `$XDG_DATA_HOME`
//! when set and absolute, else `$HOME/.local/share` (Linux) or `$HOME/Library/Application
//! Support` (macOS). Per version, so two workspaces on two clonestage versions do not fight.
//!
//! Each copy is atomic (a temporary name in the same directory, 0755, fsync, rename), so a
//! launcher never runs a half-written binary and a failed install leaves the old pair intact.
//! The spawn wrapper is copied first and the helper last: the launcher keys on the helper, so
//! it never finds a helper without its wrapper.

use anyhow::{bail, Context};
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The per-version binary home from the environment's values (pure, for tests).
pub fn version_home(
    xdg_data_home: Option<OsString>,
    home: Option<OsString>,
    macos: bool,
    version: &str,
) -> anyhow::Result<PathBuf> {
    let data = match xdg_data_home.map(PathBuf::from) {
        Some(x) if x.is_absolute() => x,
        _ => {
            let home = home
                .map(PathBuf::from)
                .filter(|h| h.is_absolute())
                .context("neither XDG_DATA_HOME nor HOME is an absolute path; pass --dir")?;
            if macos {
                home.join("Library/Application Support")
            } else {
                home.join(".local/share")
            }
        }
    };
    Ok(data.join("clonestage").join(version).join("bin"))
}

/// The per-version binary home of this build, from this process's environment.
pub fn default_dir() -> anyhow::Result<PathBuf> {
    version_home(
        std::env::var_os("XDG_DATA_HOME"),
        std::env::var_os("HOME"),
        cfg!(target_os = "macos"),
        env!("CARGO_PKG_VERSION"),
    )
}

/// Refuses anything but an executable regular file (symlinks are followed).
fn check_executable(path: &Path, what: &str) -> anyhow::Result<()> {
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

/// Copies `src` to `dir/name` through a temporary name in `dir`, mode 0755.
fn put(src: &Path, dir: &Path, name: &str) -> anyhow::Result<()> {
    let dst = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let r = (|| -> anyhow::Result<()> {
        let mut from =
            std::fs::File::open(src).with_context(|| format!("opening {}", src.display()))?;
        let mut to =
            std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        std::io::copy(&mut from, &mut to)
            .with_context(|| format!("copying {} to {}", src.display(), tmp.display()))?;
        to.set_permissions(std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("chmod 0755 {}", tmp.display()))?;
        to.flush()?;
        to.sync_all()
            .with_context(|| format!("fsync {}", tmp.display()))?;
        std::fs::rename(&tmp, &dst)
            .with_context(|| format!("renaming {} to {}", tmp.display(), dst.display()))
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// `clonestage self-install --spawn PATH [--dir DIR]`: exit 0 printing the directory; exit 2
/// for a spawn path that is not an executable regular file; 1 for other failures.
pub fn self_install(spawn: &Path, dir: Option<&Path>) -> anyhow::Result<ExitCode> {
    if let Err(e) = check_executable(spawn, "--spawn") {
        eprintln!("clonestage: error: {e:#}");
        return Ok(ExitCode::from(2));
    }
    let me = std::env::current_exe().context("finding the running clonestage binary")?;
    let dir = match dir {
        Some(d) => d.to_path_buf(),
        None => default_dir()?,
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    put(spawn, &dir, "clonestage-spawn")?;
    put(&me, &dir, "clonestage")?;
    tracing::info!(dir = %dir.display(), "installed clonestage and clonestage-spawn");
    println!("{}", dir.display());
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xdg_data_home_wins_when_absolute() {
        let d = version_home(Some("/x/data".into()), Some("/h".into()), false, "0.1.0").unwrap();
        assert_eq!(d, PathBuf::from("/x/data/clonestage/0.1.0/bin"));
        let d = version_home(Some("/x/data".into()), Some("/h".into()), true, "0.1.0").unwrap();
        assert_eq!(d, PathBuf::from("/x/data/clonestage/0.1.0/bin"));
    }

    #[test]
    fn relative_or_empty_xdg_falls_back_to_home() {
        for x in ["rel/data", ""] {
            let d = version_home(Some(x.into()), Some("/h".into()), false, "0.1.0").unwrap();
            assert_eq!(d, PathBuf::from("/h/.local/share/clonestage/0.1.0/bin"));
        }
        let d = version_home(None, Some("/h".into()), true, "0.1.0").unwrap();
        assert_eq!(
            d,
            PathBuf::from("/h/Library/Application Support/clonestage/0.1.0/bin")
        );
    }

    #[test]
    fn no_usable_home_is_an_error() {
        assert!(version_home(None, None, false, "0.1.0").is_err());
        assert!(version_home(None, Some("rel".into()), false, "0.1.0").is_err());
    }
}
