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

/// The Bazel flags that reach the running server for this cache, one per element: the unix
/// socket's executor, or (`Tcp`) the loopback executor alone. The TCP token is never printed:
/// Bazel reads it from `tcp_bazelrc`. Errors when no server is running or ready.
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

/// The private (0600) Bazel rc file holding the TCP executor and token of the server running
/// on `cache_dir`: what `bazel --bazelrc=` or `try-import` takes. Errors like `address`.
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
