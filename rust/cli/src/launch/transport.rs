//! How Bazel reaches the server: the unix socket (Bazel 6+), or loopback TCP with a token for
//! Bazel 4.x/5.x, whose remote executor cannot use a unix socket (4.2.3 exits 37 without a
//! message on a `unix:` executor). `CLONESTAGE_TCP=1`/`0` overrides; an unknown version
//! (Debian's `no_version`) gets TCP, which every version takes.
//!
//! Over TCP the token must never be in an argv or environment (every local user can read
//! `/proc/<pid>/cmdline`), so the executor line of the launcher's rc file is a `try-import`
//! of the server's private `<cache>/server/tcp.bazelrc` (0600), which holds the executor and
//! the token header. Bazel's server logs every command's options, those of rc files included,
//! to `java.log` in its output base (0644), and resets its output user root and output base to
//! 0755 at every start, but not their parent (checked with 4.2.3): so over TCP the parent of
//! the default output user root, Bazel's alone, is made 0700 once (`keep_bazel_root_private`).

use crate::bazel::Version;
use crate::dirs::{self, Env};
use clonestage_engine::platform::USER_DIRS;
use clonestage_server::client::RunningServer;
use std::path::{Path, PathBuf};

/// The first Bazel release whose remote executor takes `unix:` addresses.
pub const FIRST_UNIX_MAJOR: u32 = 6;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Unix,
    Tcp,
}

impl Transport {
    /// `CLONESTAGE_TCP`, else the unix socket for Bazel 6+ and TCP for older or unknown.
    pub fn choose(env: Env, version: Option<Version>) -> Transport {
        match env("CLONESTAGE_TCP").as_deref().and_then(|v| v.to_str()) {
            Some("1") => return Transport::Tcp,
            Some("0") => return Transport::Unix,
            _ => {}
        }
        match version {
            Some(v) if v.major >= FIRST_UNIX_MAJOR => Transport::Unix,
            _ => Transport::Tcp,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Transport::Unix => "unix",
            Transport::Tcp => "tcp",
        }
    }

    /// The rc line that names the executor of the running server `server`.
    pub fn executor_line(self, server: &RunningServer) -> String {
        match self {
            Transport::Unix => format!(
                "build {}",
                crate::bazel::rc_word(&format!(
                    "--remote_executor={}",
                    clonestage_server::unix_target(&server.socket)
                ))
            ),
            Transport::Tcp => format!(
                "try-import {}",
                crate::bazel::rc_word(&server.tcp_bazelrc.display().to_string())
            ),
        }
    }
}

/// Over TCP, the parents of Bazel's default output user root made 0700 (once; a marker file
/// `.clonestage-private` says it was done, so later commands only stat it). Not when the
/// command names its own `--output_user_root`/`--output_base` (strategy/README.md leaves those
/// to the user), nor on macOS, whose default root is not under HOME. Current Bazel puts the
/// root under `$XDG_CACHE_HOME/bazel` when that is set, 4.2.3 under `~/.cache/bazel` always:
/// both are made private. Err names the directory that could not be.
pub fn keep_bazel_root_private(env: Env) -> Result<(), String> {
    for dir in bazel_root_parents(env) {
        if dir.join(".clonestage-private").is_file() {
            continue;
        }
        make_private(&dir).map_err(|e| {
            format!(
                "cannot make {} private (0700): {e}; Bazel would log the TCP token where \
                 other users can read it",
                dir.display()
            )
        })?;
    }
    Ok(())
}

fn bazel_root_parents(env: Env) -> Vec<PathBuf> {
    let Some(under_home) = USER_DIRS.bazel_root_parent_under_home else {
        return Vec::new();
    };
    let mut dirs = Vec::new();
    if let Some(home) = dirs::absolute(env("HOME")) {
        dirs.push(home.join(under_home));
    }
    if let Some(x) = dirs::absolute(env("XDG_CACHE_HOME")) {
        let d = x.join("bazel");
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    dirs
}

fn make_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    std::fs::write(dir.join(".clonestage-private"), "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn the_socket_from_bazel_6_and_tcp_before_or_unknown() {
        let none = env(&[]);
        assert_eq!(
            Transport::choose(&none, Version::parse("6.0.0")),
            Transport::Unix
        );
        assert_eq!(
            Transport::choose(&none, Version::parse("5.4.1")),
            Transport::Tcp
        );
        assert_eq!(Transport::choose(&none, None), Transport::Tcp);
        let tcp = env(&[("CLONESTAGE_TCP", "1")]);
        assert_eq!(
            Transport::choose(&tcp, Version::parse("8.1.0")),
            Transport::Tcp
        );
        let unix = env(&[("CLONESTAGE_TCP", "0")]);
        assert_eq!(
            Transport::choose(&unix, Version::parse("4.2.3")),
            Transport::Unix
        );
    }
}
