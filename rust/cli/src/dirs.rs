//! Where clonestage keeps a user's files, defined once for every command, the launcher
//! (`clonestage launch`) and the install (`clonestage self-install`):
//!
//! - the cache directory: `$CLONESTAGE_CACHE`, else `$XDG_CACHE_HOME/clonestage` on Linux when
//!   that variable is absolute, else `$HOME/.cache/clonestage` (Linux) or
//!   `$HOME/Library/Caches/clonestage` (macOS, which has never read XDG_CACHE_HOME);
//! - the per-version binary home, where installs put `clonestage` and `clonestage-spawn` and
//!   tools/bazel looks first: `<data>/clonestage/<version>/bin`, `<data>` being
//!   `$XDG_DATA_HOME` when absolute, else `$HOME/.local/share` (Linux) or
//!   `$HOME/Library/Application Support` (macOS). Per version, so two workspaces on two
//!   clonestage versions do not fight.
//!
//! A relative XDG variable is ignored, as the XDG Base Directory specification says ("If an
//! implementation encounters a relative path in any of these variables it should consider the
//! path invalid and ignore it"). The OS conventions come from the engine's platform layer
//! (`USER_DIRS`). The POSIX shim tools/bazel repeats the per-version home in a few lines of
//! sh, since it must find this binary before it can run it; tests/launcher checks the two
//! agree (it installs with `self-install` and expects the shim to find that helper).

use clonestage_engine::platform::{UserDirs, USER_DIRS};
use std::ffi::OsString;
use std::path::PathBuf;

/// Reads one environment variable; `std::env::var_os` in production, a map in tests.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<OsString>;

/// The process's own environment.
pub fn process_env(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}

/// This version's per-version home name (`0.1.0`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The cache directory from `env`, for this OS. Never fails: without HOME it is under /tmp.
pub fn cache_dir(env: Env) -> PathBuf {
    cache_dir_for(env, &USER_DIRS)
}

/// The per-version binary home of `version` from `env`, for this OS; an error when neither
/// `$XDG_DATA_HOME` nor `$HOME` is an absolute path.
pub fn version_home(env: Env, version: &str) -> anyhow::Result<PathBuf> {
    version_home_for(env, &USER_DIRS, version)
}

/// `cache_dir` for the conventions `dirs` (both OSes are tested on either).
pub fn cache_dir_for(env: Env, dirs: &UserDirs) -> PathBuf {
    if let Some(d) = env("CLONESTAGE_CACHE").filter(|d| !d.is_empty()) {
        return d.into();
    }
    if dirs.cache_honours_xdg {
        if let Some(x) = absolute(env("XDG_CACHE_HOME")) {
            return x.join("clonestage");
        }
    }
    let home = absolute(env("HOME")).unwrap_or_else(|| "/tmp".into());
    home.join(dirs.cache_under_home).join("clonestage")
}

/// `version_home` for the conventions `dirs`.
pub fn version_home_for(env: Env, dirs: &UserDirs, version: &str) -> anyhow::Result<PathBuf> {
    let data = match absolute(env("XDG_DATA_HOME")) {
        Some(x) => x,
        None => absolute(env("HOME"))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "neither XDG_DATA_HOME nor HOME is an absolute path, so there is no \
                     per-version home for clonestage {version}; pass --dir"
                )
            })?
            .join(dirs.data_under_home),
    };
    Ok(data.join("clonestage").join(version).join("bin"))
}

/// Creates `dir` and its missing parents, each 0700: the cache and the launcher's files hold
/// every input and output that goes through clonestage.
pub fn create_private(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// The value as a path when it is absolute.
pub fn absolute(v: Option<OsString>) -> Option<PathBuf> {
    v.map(PathBuf::from).filter(|p| p.is_absolute())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const LINUX: UserDirs = UserDirs {
        cache_under_home: ".cache",
        cache_honours_xdg: true,
        data_under_home: ".local/share",
        bazel_root_parent_under_home: Some(".cache/bazel"),
    };
    const MACOS: UserDirs = UserDirs {
        cache_under_home: "Library/Caches",
        cache_honours_xdg: false,
        data_under_home: "Library/Application Support",
        bazel_root_parent_under_home: None,
    };

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let m: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn the_cache_variable_wins_everywhere() {
        let e = env(&[
            ("CLONESTAGE_CACHE", "/c"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/h"),
        ]);
        assert_eq!(cache_dir_for(&e, &LINUX), PathBuf::from("/c"));
        assert_eq!(cache_dir_for(&e, &MACOS), PathBuf::from("/c"));
    }

    #[test]
    fn xdg_cache_home_counts_on_linux_when_absolute() {
        let e = env(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")]);
        assert_eq!(cache_dir_for(&e, &LINUX), PathBuf::from("/x/clonestage"));
        assert_eq!(
            cache_dir_for(&e, &MACOS),
            PathBuf::from("/h/Library/Caches/clonestage")
        );
        for x in ["rel/x", ""] {
            let e = env(&[("XDG_CACHE_HOME", x), ("HOME", "/h")]);
            assert_eq!(
                cache_dir_for(&e, &LINUX),
                PathBuf::from("/h/.cache/clonestage")
            );
        }
        let e = env(&[("CLONESTAGE_CACHE", ""), ("HOME", "/h")]);
        assert_eq!(
            cache_dir_for(&e, &LINUX),
            PathBuf::from("/h/.cache/clonestage")
        );
        assert_eq!(
            cache_dir_for(&env(&[]), &LINUX),
            PathBuf::from("/tmp/.cache/clonestage")
        );
    }

    #[test]
    fn xdg_data_home_wins_when_absolute() {
        let e = env(&[("XDG_DATA_HOME", "/x/data"), ("HOME", "/h")]);
        for dirs in [LINUX, MACOS] {
            let d = version_home_for(&e, &dirs, "0.1.0").unwrap();
            assert_eq!(d, PathBuf::from("/x/data/clonestage/0.1.0/bin"));
        }
    }

    #[test]
    fn relative_or_empty_xdg_data_home_falls_back_to_home() {
        for x in ["rel/data", ""] {
            let e = env(&[("XDG_DATA_HOME", x), ("HOME", "/h")]);
            let d = version_home_for(&e, &LINUX, "0.1.0").unwrap();
            assert_eq!(d, PathBuf::from("/h/.local/share/clonestage/0.1.0/bin"));
        }
        let d = version_home_for(&env(&[("HOME", "/h")]), &MACOS, "0.1.0").unwrap();
        assert_eq!(
            d,
            PathBuf::from("/h/Library/Application Support/clonestage/0.1.0/bin")
        );
    }

    #[test]
    fn no_usable_home_is_an_error() {
        assert!(version_home_for(&env(&[]), &LINUX, "0.1.0").is_err());
        assert!(version_home_for(&env(&[("HOME", "rel")]), &LINUX, "0.1.0").is_err());
    }
}
