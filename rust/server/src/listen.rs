//! The two listeners. The unix socket `<cache>/server/clonestage.sock` (0600, in the 0700
//! server directory) is what Bazel 7/8 use; the loopback TCP port is for Bazel 4.2.3, whose
//! netty cannot do unix sockets, and is guarded by the token (`auth`). Accepted TCP
//! connections get TCP_NODELAY: without it a peer's small writes wait ~40 ms for delayed ACKs.
//! The TCP port is kept across restarts (`bind_tcp_stable`): a server tries the port its
//! predecessor recorded in `<cache>/server/last-port` first, so addresses do not go stale.

use anyhow::{bail, Context, Result};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Longest unix socket path (sun_path is 108 bytes with the NUL on Linux, 104 on macOS).
const MAX_SOCKET_PATH: usize = clonestage_engine::platform::MAX_UNIX_SOCKET_PATH;

/// How Bazel is told to reach the socket: `unix:` and the absolute path, with no `//`.
/// Bazel strips only `unix:` (`new DomainSocketAddress(target.replaceFirst("^unix:", ""))` in
/// `GoogleAuthUtils.newUnixNettyChannelBuilder`, bazelbuild/bazel
/// src/main/java/com/google/devtools/build/lib/authandtls/GoogleAuthUtils.java), so
/// `unix:///p` would make it connect to `///p`, two bytes longer than the path checked here,
/// and overflow `sun_path` inside netty for a path close to the limit.
pub fn unix_target(socket: &Path) -> String {
    format!("unix:{}", socket.display())
}

/// The path Bazel's netty connects to for `target` (all after `unix:`).
fn bazel_connect_path(target: &str) -> &str {
    target.strip_prefix("unix:").unwrap_or(target)
}

/// Create (or tighten) the server directory: 0700.
pub(crate) fn server_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("mkdir {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("chmod 0700 {}", dir.display()))
}

/// Bind the unix socket, replacing a stale one (the caller holds the server lock, so no live
/// server owns it).
pub(crate) fn bind_unix(path: &Path) -> Result<tokio::net::UnixListener> {
    // The string Bazel will connect to, not only the path we bind.
    let target = unix_target(path);
    let len = bazel_connect_path(&target).len();
    if len > MAX_SOCKET_PATH {
        bail!(
            "unix socket path {} is {len} bytes as Bazel connects to it (from {target}), more than the {MAX_SOCKET_PATH} the OS allows; use a shorter --cache",
            path.display()
        );
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("remove stale socket {}", path.display()))
        }
        _ => {}
    }
    let l = std::os::unix::net::UnixListener::bind(path)
        .with_context(|| format!("bind {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod 0600 {}", path.display()))?;
    l.set_nonblocking(true).context("set_nonblocking")?;
    tokio::net::UnixListener::from_std(l).context("register unix listener")
}

/// Bind the loopback port: `explicit` when given (an error if it is taken), else the port the
/// previous server on this cache recorded, else (missing, or taken now) any free port. The new
/// port is recorded for the next start. Returns the listener and whether it is on the
/// recorded port (the token is kept only then: `auth::token_for_start`).
pub(crate) fn bind_tcp_stable(
    last_port: &Path,
    explicit: Option<u16>,
) -> Result<(tokio::net::TcpListener, bool)> {
    let previous: Option<u16> = std::fs::read_to_string(last_port)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .filter(|p| *p != 0);
    let listener = match (explicit, previous) {
        (Some(p), _) => bind_tcp(p)?,
        (None, Some(p)) => match bind_tcp(p) {
            Ok(l) => l,
            Err(e) => {
                tracing::info!(port = p, error = %format!("{e:#}"), "the previous TCP port is taken; using another");
                bind_tcp(0)?
            }
        },
        (None, None) => bind_tcp(0)?,
    };
    let port = listener.local_addr().context("local_addr")?.port();
    if previous != Some(port) {
        crate::auth::write_private(last_port, format!("{port}\n").as_bytes())?;
    }
    Ok((listener, previous == Some(port)))
}

/// Bind 127.0.0.1:`port` (0: any free port).
pub(crate) fn bind_tcp(port: u16) -> Result<tokio::net::TcpListener> {
    let l = std::net::TcpListener::bind(("127.0.0.1", port))
        .with_context(|| format!("bind 127.0.0.1:{port}"))?;
    l.set_nonblocking(true).context("set_nonblocking")?;
    tokio::net::TcpListener::from_std(l).context("register tcp listener")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket path of `len` bytes under a fresh temporary directory.
    fn socket_path_of(dir: &Path, len: usize) -> std::path::PathBuf {
        let base = dir.join("clonestage.sock");
        let pad = len - base.as_os_str().len() - 1;
        let sub = dir.join("p".repeat(pad));
        std::fs::create_dir(&sub).unwrap();
        let p = sub.join("clonestage.sock");
        assert_eq!(p.as_os_str().len(), len);
        p
    }

    #[tokio::test]
    async fn the_limit_holds_for_the_path_bazel_connects_to() {
        let d = tempfile::tempdir().unwrap();
        let longest = socket_path_of(d.path(), MAX_SOCKET_PATH);
        assert_eq!(
            bazel_connect_path(&unix_target(&longest)),
            longest.to_str().unwrap(),
            "Bazel strips only `unix:`: the target must add no slash"
        );
        bind_unix(&longest).expect("the longest path fits");
        let e = tempfile::tempdir().unwrap();
        let over = socket_path_of(e.path(), MAX_SOCKET_PATH + 1);
        let err = format!("{:#}", bind_unix(&over).unwrap_err());
        assert!(err.contains("as Bazel connects to it"), "{err}");
    }
}
