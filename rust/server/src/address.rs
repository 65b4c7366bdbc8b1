//! `clonestage address [--tcp | --bazelrc]`: how Bazel reaches the server running on a cache.
//! Unix socket: `--remote_executor=unix:<absolute socket path>` (`listen::unix_target`). TCP:
//! `--remote_executor=grpc://127.0.0.1:<port>` only: the token it needs is a secret and never
//! goes into an argv, so Bazel reads it, with the executor, from the private rc file that
//! `--bazelrc` names (`<cache>/server/tcp.bazelrc`: pass it as `bazel --bazelrc=<path>`, or
//! `try-import` it). Fails when no server holds the cache's lock, or when one does but is not
//! ready yet: its `tcp-port` file (port, then the writer's pid) is missing or was written by
//! another process.

use crate::layout::Layout;
use crate::server_lock::ServerLock;
use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};

/// What `clonestage address` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressForm {
    /// `--remote_executor=unix:/...`
    Unix,
    /// `--remote_executor=grpc://127.0.0.1:<port>` (no token: see `tcp_bazelrc`)
    Tcp,
}

pub fn address(cache_dir: &Path, form: AddressForm) -> Result<Vec<String>> {
    let (layout, port) = ready(cache_dir)?;
    Ok(vec![match form {
        AddressForm::Unix => format!(
            "--remote_executor={}",
            crate::listen::unix_target(&layout.socket())
        ),
        AddressForm::Tcp => format!("--remote_executor=grpc://127.0.0.1:{port}"),
    }])
}

/// The server holding a cache, as `clonestage status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningServer {
    /// The cache, canonical.
    pub cache: PathBuf,
    pub pid: i32,
    /// The loopback TCP port once the server is ready; None while it starts.
    pub tcp_port: Option<u16>,
    pub socket: PathBuf,
    /// The private rc file with the TCP executor and token (the token itself is never shown).
    pub tcp_bazelrc: PathBuf,
    /// What the server wrote to `server/version`; None for a server from before that file.
    pub version: Option<String>,
}

/// The server holding `cache_dir`'s lock, ready or still starting; None when none runs.
pub fn running(cache_dir: &Path) -> Result<Option<RunningServer>> {
    let Ok(cache) = cache_dir.canonicalize() else {
        return Ok(None);
    };
    let layout = Layout::new(&cache);
    let Some(pid) = ServerLock::holder(&layout.lock())? else {
        return Ok(None);
    };
    let tcp_port = std::fs::read_to_string(layout.tcp_port())
        .ok()
        .and_then(|t| crate::layout::parse_tcp_port(&t))
        .and_then(|(port, writer)| (writer == pid).then_some(port));
    let version = std::fs::read_to_string(layout.version())
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty());
    Ok(Some(RunningServer {
        socket: layout.socket(),
        tcp_bazelrc: layout.tcp_bazelrc(),
        cache,
        pid,
        tcp_port,
        version,
    }))
}

/// Fails naming both versions when the ready server on `cache_dir` is not `crate::VERSION`
/// (`clonestage address --same-version`, which tools/bazel uses to restart a server of
/// another version with its own). A server without a version file predates it: another one.
pub fn check_same_version(cache_dir: &Path) -> Result<(), VersionMismatch> {
    let Ok(Some(s)) = running(cache_dir) else {
        return Ok(());
    };
    if s.version.as_deref() == Some(crate::VERSION) {
        return Ok(());
    }
    Err(VersionMismatch {
        cache: s.cache,
        pid: s.pid,
        server: s.version,
    })
}

/// A server of another clonestage version holds the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionMismatch {
    pub cache: PathBuf,
    pub pid: i32,
    /// None: the server wrote no version file (it predates 0.1.0's).
    pub server: Option<String>,
}

impl std::fmt::Display for VersionMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the clonestage server for {} (pid {}) is version {}, this clonestage is {}",
            self.cache.display(),
            self.pid,
            self.server
                .as_deref()
                .unwrap_or("unknown (no server/version file)"),
            crate::VERSION
        )
    }
}

/// The private rc file of the server running on `cache_dir`.
pub fn tcp_bazelrc(cache_dir: &Path) -> Result<PathBuf> {
    Ok(ready(cache_dir)?.0.tcp_bazelrc())
}

/// The running, ready server's layout and TCP port.
fn ready(cache_dir: &Path) -> Result<(Layout, u16)> {
    let cache = match cache_dir.canonicalize() {
        Ok(c) => c,
        Err(_) => bail!("no clonestage server is running for {} (no such cache); start one with `clonestage serve`", cache_dir.display()),
    };
    let layout = Layout::new(&cache);
    let Some(pid) = ServerLock::holder(&layout.lock())? else {
        bail!(
            "no clonestage server is running for cache {}; start one with `clonestage serve`",
            cache.display()
        );
    };
    let starting = || {
        anyhow!(
            "the clonestage server for {} (pid {pid}) is still starting; try again",
            cache.display()
        )
    };
    // A server killed by SIGKILL leaves its tcp-port behind, and its successor takes the
    // lock a moment before it removes that file: only the holder's own file counts.
    let Ok(text) = std::fs::read_to_string(layout.tcp_port()) else {
        return Err(starting());
    };
    let (port, writer) = crate::layout::parse_tcp_port(&text)
        .with_context(|| format!("{}: not \"<port>\\n<pid>\"", layout.tcp_port().display()))?;
    if writer != pid {
        return Err(starting());
    }
    Ok((layout, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tcp_port_left_by_a_killed_server_is_not_an_address() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        std::fs::create_dir_all(layout.server_dir()).unwrap();
        // The killed server's file, then its successor between taking the lock and
        // removing that file.
        std::fs::write(layout.tcp_port(), "40001\n1\n").unwrap();
        let _lock = ServerLock::acquire(&layout.lock()).unwrap();
        let err = address(dir.path(), AddressForm::Tcp)
            .unwrap_err()
            .to_string();
        assert!(err.contains("still starting"), "{err}");
        assert!(tcp_bazelrc(dir.path()).is_err());

        std::fs::write(layout.tcp_port(), crate::layout::tcp_port_text(40002)).unwrap();
        let flags = address(dir.path(), AddressForm::Tcp).unwrap();
        assert_eq!(flags, ["--remote_executor=grpc://127.0.0.1:40002"]);

        std::fs::write(layout.tcp_port(), "40003\n").unwrap();
        let err = format!("{:#}", address(dir.path(), AddressForm::Tcp).unwrap_err());
        assert!(err.contains("not \"<port>\\n<pid>\""), "{err}");
    }

    #[test]
    fn a_ready_server_of_another_version_is_a_mismatch_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        std::fs::create_dir_all(layout.server_dir()).unwrap();
        assert_eq!(
            check_same_version(dir.path()),
            Ok(()),
            "no server: nothing to restart"
        );
        let _lock = ServerLock::acquire(&layout.lock()).unwrap();
        std::fs::write(layout.tcp_port(), crate::layout::tcp_port_text(40005)).unwrap();
        let err = check_same_version(dir.path()).unwrap_err();
        assert_eq!(err.server, None, "no version file: another (older) server");
        std::fs::write(layout.version(), "0.0.9\n").unwrap();
        let err = check_same_version(dir.path()).unwrap_err().to_string();
        assert!(err.contains("is version 0.0.9"), "{err}");
        assert!(
            err.contains(&format!("this clonestage is {}", crate::VERSION)),
            "{err}"
        );
        std::fs::write(layout.version(), format!("{}\n", crate::VERSION)).unwrap();
        assert_eq!(check_same_version(dir.path()), Ok(()));
        let s = running(dir.path()).unwrap().unwrap();
        assert_eq!(s.tcp_port, Some(40005));
        assert_eq!(s.pid, std::process::id() as i32);
    }

    #[test]
    fn the_unix_address_is_the_very_path_bazel_connects_to() {
        // Bazel strips only `unix:` (GoogleAuthUtils.newUnixNettyChannelBuilder): what follows
        // it must be the socket path itself, not `//` and the path.
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(&dir.path().canonicalize().unwrap());
        std::fs::create_dir_all(layout.server_dir()).unwrap();
        let _lock = ServerLock::acquire(&layout.lock()).unwrap();
        std::fs::write(layout.tcp_port(), crate::layout::tcp_port_text(40006)).unwrap();
        let flag = address(dir.path(), AddressForm::Unix).unwrap().remove(0);
        let target = flag.strip_prefix("--remote_executor=").unwrap();
        assert_eq!(
            target.strip_prefix("unix:"),
            Some(layout.socket().to_str().unwrap()),
            "{flag}"
        );
    }

    #[test]
    fn no_lock_holder_means_no_server() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        std::fs::create_dir_all(layout.server_dir()).unwrap();
        std::fs::write(layout.tcp_port(), crate::layout::tcp_port_text(40004)).unwrap();
        let err = address(dir.path(), AddressForm::Unix)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no clonestage server is running"), "{err}");
    }
}
