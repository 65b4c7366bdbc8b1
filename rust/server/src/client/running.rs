//! What a client asks of the server running on a cache, without talking to it: whether one
//! holds the cache's lock (its pid is in the lock file), whether it is ready (its own
//! `tcp-port` file), its version (`server/version`) and upstream (`server/upstream`). What
//! `clonestage status`, `doctor`, `address --same-version` and the launcher read.

use crate::layout::Layout;
use crate::server_lock::ServerLock;
use anyhow::Result;
use std::path::{Path, PathBuf};

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

/// What the server running on this cache says of its upstream (`clonestage status`):
/// `URL (instance "NAME", write MODE)`, or None when it has none.
pub fn upstream_description(cache_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(Layout::new(cache_dir).upstream()).ok()?;
    Some(text.trim().to_string()).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
