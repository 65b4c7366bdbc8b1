//! The TCP listener's secret. Any local user can connect to a loopback port, and this server
//! runs commands, so every TCP request must carry `x-clonestage-token: <token>`; the token is
//! 32 random bytes (hex) in `<cache>/server/token`, mode 0600 inside the 0700 server
//! directory, so only the cache's owner can read it. The unix socket needs no token: its file
//! mode already restricts who can connect.
//!
//! The token never travels on a command line (every user can read `/proc/<pid>/cmdline`):
//! Bazel gets it from `<cache>/server/tcp.bazelrc` (0600, `write_bazelrc`), which the launcher
//! passes as `--bazelrc` and users without it `try-import`. It survives restarts
//! (`token_for_start`) so that file and anything pointing at it stay valid, except when the
//! server could not get its previous port back: whoever held that port meanwhile may have
//! received the token from a Bazel that still pointed there, so a new port gets a new token.
//! A token file that is not a private regular file of ours with 64 hex digits is replaced.

use anyhow::{Context, Result};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use subtle::ConstantTimeEq;
use tonic::{Request, Status};

/// The header Bazel sends with `--remote_exec_header=x-clonestage-token=...` and the same
/// `--remote_cache_header`.
pub const TOKEN_HEADER: &str = "x-clonestage-token";

/// `bytes` bytes from /dev/urandom as lower-case hex digits (32 bytes: the 64-digit token).
pub(crate) fn random_hex(bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .context("read /dev/urandom")?;
    Ok(hex::encode(buf))
}

/// Make a fresh token and write it (0600, replacing any older one atomically).
pub(crate) fn create_token(path: &Path) -> Result<String> {
    let token = random_hex(32)?;
    write_private(path, token.as_bytes())?;
    Ok(token)
}

/// Write `bytes` to `path` through a 0600 temporary file renamed over it: readers see the old
/// or the new content, and the file is never readable by others, not even for a moment.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("create {}", tmp.display()))?;
    f.write_all(bytes)
        .with_context(|| format!("write {}", tmp.display()))?;
    drop(f);
    std::fs::rename(&tmp, path)
        .with_context(|| format!("rename {} to {}", tmp.display(), path.display()))
}

pub(crate) fn read_token(path: &Path) -> Result<String> {
    let t = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    Ok(t.trim().to_string())
}

/// The token a starting server uses: the one in `path` when `same_port` (it got its previous
/// TCP port back) and the file is a valid private token of ours, else a fresh one written
/// there. Says why it replaced one.
pub(crate) fn token_for_start(path: &Path, same_port: bool) -> Result<String> {
    match existing_token(path) {
        Ok(Some(t)) if same_port => return Ok(t),
        Ok(Some(_)) => tracing::info!(
            path = %path.display(),
            "new TCP token: the previous port was not free (its holder may have seen the old token)"
        ),
        Ok(None) => {}
        Err(why) => tracing::warn!(path = %path.display(), "replacing the TCP token file: {why}"),
    }
    create_token(path)
}

/// Ok(None): no token file. Err: one that must not be used, and why.
fn existing_token(path: &Path) -> std::result::Result<Option<String>, String> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("lstat: {e}")),
    };
    if !meta.file_type().is_file() {
        return Err("not a regular file".into());
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if meta.uid() != euid {
        return Err(format!("owned by uid {}, not {euid}", meta.uid()));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "mode {:o} lets others read it (it may have leaked)",
            meta.mode() & 0o777
        ));
    }
    let t = read_token(path).map_err(|e| format!("{e:#}"))?;
    if t.len() != 64 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("not 64 hex digits".into());
    }
    Ok(Some(t))
}

/// The Bazel rc lines that reach this server over TCP, written 0600 to `path`. The executor
/// is repeated for the commands that inherit `build` so that a `test --remote_executor=...`
/// in a workspace rc read earlier cannot send this token elsewhere; the header (a repeatable
/// flag) is given once, for executor and cache calls only: `--remote_header` would also go
/// to a team's `--experimental_remote_downloader` (Bazel 4.2.3 sends it with FetchBlob).
pub(crate) fn write_bazelrc(path: &Path, cache: &Path, port: u16, token: &str) -> Result<()> {
    let mut text = format!(
        "# Written by `clonestage serve` for the cache {}: its loopback TCP address and token.\n\
         # Private (0600): the token lets whoever holds it run commands as this user; never copy\n\
         # it into a command line or a file others can read. tools/bazel passes this file to\n\
         # Bazel (--bazelrc); without the launcher, `try-import` it from ~/.bazelrc. Port and\n\
         # token survive server restarts; the server removes this file when it stops.\n\
         build --remote_executor=grpc://127.0.0.1:{port}\n\
         build --remote_exec_header={TOKEN_HEADER}={token}\n\
         build --remote_cache_header={TOKEN_HEADER}={token}\n",
        cache.display()
    );
    for cmd in BUILD_LIKE {
        text.push_str(&format!(
            "{cmd} --remote_executor=grpc://127.0.0.1:{port}\n"
        ));
    }
    write_private(path, text.as_bytes())
}

/// Commands that inherit `build`'s options and may run actions or read the executor. Not
/// `mobile-install`: Debian's Bazel 4.2.3 has no such command and warns about the line on
/// every command that reads this file (it still inherits the `build` lines).
const BUILD_LIKE: [&str; 5] = ["test", "run", "coverage", "cquery", "aquery"];

/// Compare in constant time, so response time does not tell how much of a guess matched (the
/// length may show; every token is 64 hex digits).
fn same(a: &[u8], b: &[u8]) -> bool {
    bool::from(a.ct_eq(b))
}

/// A tonic interceptor refusing requests without the right token (UNAUTHENTICATED).
#[derive(Clone)]
pub(crate) struct TokenCheck {
    token: std::sync::Arc<str>,
}

impl TokenCheck {
    pub fn new(token: &str) -> TokenCheck {
        TokenCheck {
            token: token.into(),
        }
    }
}

impl tonic::service::Interceptor for TokenCheck {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        match req.metadata().get(TOKEN_HEADER) {
            Some(v) if same(v.as_bytes(), self.token.as_bytes()) => Ok(req),
            Some(_) => Err(Status::unauthenticated(format!("wrong {TOKEN_HEADER}"))),
            None => Err(Status::unauthenticated(format!(
                "missing {TOKEN_HEADER} header: TCP clients must send the token from the server's token file; Bazel reads it from the rc file `clonestage address --bazelrc` names"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use tonic::service::Interceptor;

    #[test]
    fn token_file_is_private_and_checked() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("token");
        let t = create_token(&p).unwrap();
        assert_eq!(t.len(), 64);
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(read_token(&p).unwrap(), t);
        assert_ne!(create_token(&p).unwrap(), t, "tokens must be fresh");

        let mut check = TokenCheck::new("abc");
        assert!(check.call(Request::new(())).is_err());
        let mut r = Request::new(());
        r.metadata_mut()
            .insert(TOKEN_HEADER, "abd".parse().unwrap());
        assert_eq!(
            check.call(r).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        let mut r = Request::new(());
        r.metadata_mut()
            .insert(TOKEN_HEADER, "abc".parse().unwrap());
        assert!(check.call(r).is_ok());
    }

    #[test]
    fn a_valid_private_token_is_kept_and_anything_else_replaced() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("token");
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777;

        let t = token_for_start(&p, true).unwrap();
        assert_eq!(token_for_start(&p, true).unwrap(), t, "kept across starts");
        let t2 = token_for_start(&p, false).unwrap();
        assert_ne!(t2, t, "a new port gets a new token");
        assert_eq!(read_token(&p).unwrap(), t2);

        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        let t3 = token_for_start(&p, true).unwrap();
        assert_ne!(t3, t2, "a token others could read is replaced");
        assert_eq!(mode(&p), 0o600);

        std::fs::write(&p, "not a token\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let t4 = token_for_start(&p, true).unwrap();
        assert_eq!(t4.len(), 64);
        assert_eq!(read_token(&p).unwrap(), t4);

        // A symlink is replaced by a file, and what it pointed at is left alone.
        let target = d.path().join("elsewhere");
        std::fs::write(&target, "ab".repeat(32)).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink(&target, &p).unwrap();
        let t5 = token_for_start(&p, true).unwrap();
        assert_ne!(t5, "ab".repeat(32));
        assert!(std::fs::symlink_metadata(&p).unwrap().file_type().is_file());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "ab".repeat(32));

        // Owned by another user (only root can make one): replaced.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
            let t6 = token_for_start(&p, true).unwrap();
            assert_ne!(t6, t5, "a token file of another uid is replaced");
            assert_eq!(std::fs::metadata(&p).unwrap().uid(), 0);
        }
    }

    #[test]
    fn the_bazelrc_is_private_and_names_executor_and_header() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("tcp.bazelrc");
        std::fs::write(&p, "old").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_bazelrc(&p, Path::new("/c"), 4321, "t0k").unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let text = std::fs::read_to_string(&p).unwrap();
        let rules: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(rules[0], "build --remote_executor=grpc://127.0.0.1:4321");
        // Executor and cache only: a --remote_header would also go to a team's
        // --experimental_remote_downloader (seen with Bazel 4.2.3).
        assert_eq!(
            rules[1],
            "build --remote_exec_header=x-clonestage-token=t0k"
        );
        assert_eq!(
            rules[2],
            "build --remote_cache_header=x-clonestage-token=t0k"
        );
        assert!(!text.contains("--remote_header"));
        assert!(rules.contains(&"test --remote_executor=grpc://127.0.0.1:4321"));
    }
}
