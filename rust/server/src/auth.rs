//! The TCP listener's secret. Any local user can connect to a loopback port, and this server
//! runs commands, so every TCP request must carry `x-clonestage-token: <token>`; the token is
//! 32 random bytes (hex) written to `<cache>/server/token` with mode 0600 inside the 0700
//! server directory, so only the cache's owner can read it. The unix socket needs no token:
//! its file mode already restricts who can connect.

use anyhow::{Context, Result};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use tonic::{Request, Status};

/// The header Bazel sends with `--remote_header=x-clonestage-token=...`.
pub const TOKEN_HEADER: &str = "x-clonestage-token";

/// 32 bytes from /dev/urandom as 64 hex digits.
pub(crate) fn random_hex(bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .context("read /dev/urandom")?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Make a fresh token and write it (0600, replacing any older one atomically).
pub(crate) fn create_token(path: &Path) -> Result<String> {
    let token = random_hex(32)?;
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("create {}", tmp.display()))?;
    f.write_all(token.as_bytes())
        .with_context(|| format!("write {}", tmp.display()))?;
    drop(f);
    std::fs::rename(&tmp, path)
        .with_context(|| format!("rename {} to {}", tmp.display(), path.display()))?;
    Ok(token)
}

pub(crate) fn read_token(path: &Path) -> Result<String> {
    let t = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    Ok(t.trim().to_string())
}

/// Compare without an early exit, so response time does not tell how much of a guess matched.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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
                "missing {TOKEN_HEADER} header: TCP clients must send the token from the server's token file (see `clonestage address --tcp`)"
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
}
