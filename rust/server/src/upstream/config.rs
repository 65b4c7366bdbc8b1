//! The upstream's settings (`clonestage serve --upstream*`, docs/upstream.md): the URL
//! (`grpc://HOST:PORT`, or `grpcs://HOST:PORT`: TLS with the system's roots), the instance name,
//! who may write, the timeout, the queue's bound, and the auth file, which is refused unless
//! it is a regular file of the server's uid with no group/other bits. Header values are never
//! logged or put in an error.

use anyhow::{bail, Context, Result};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};

/// Which results go upstream (`--upstream-write`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Only read.
    None,
    /// Results this server executed (exit 0, cacheable, not tampered).
    Executed,
    /// Those, and results Bazel sends with UpdateActionResult.
    All,
}

impl WriteMode {
    pub fn parse(s: &str) -> Result<WriteMode> {
        match s {
            "none" => Ok(WriteMode::None),
            "executed" => Ok(WriteMode::Executed),
            "all" => Ok(WriteMode::All),
            _ => bail!("--upstream-write {s:?}: expected none, executed or all"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            WriteMode::None => "none",
            WriteMode::Executed => "executed",
            WriteMode::All => "all",
        }
    }
}

/// Options of `clonestage serve` for the upstream.
#[derive(Debug, Clone)]
pub struct UpstreamOptions {
    /// `grpc://HOST:PORT` or `grpcs://HOST:PORT` (TLS, the system's roots).
    pub url: String,
    /// The upstream's REAPI instance_name.
    pub instance: String,
    /// `Header-Name: value` lines sent on every upstream call.
    pub auth_file: Option<PathBuf>,
    /// A credential helper (Bazel's protocol: `PROG get`).
    pub auth_helper: Option<PathBuf>,
    pub write: WriteMode,
    /// One lookup's deadline is twice this; connection attempts are bounded by it.
    pub timeout: Duration,
    /// Entries the write-behind queue holds at most.
    pub queue_max: usize,
}

impl UpstreamOptions {
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(1000);
    pub const DEFAULT_QUEUE_MAX: usize = 10_000;

    pub fn new(url: &str) -> UpstreamOptions {
        UpstreamOptions {
            url: url.to_string(),
            instance: String::new(),
            auth_file: None,
            auth_helper: None,
            write: WriteMode::Executed,
            timeout: Self::DEFAULT_TIMEOUT,
            queue_max: Self::DEFAULT_QUEUE_MAX,
        }
    }

    /// The line `clonestage status` prints.
    pub fn describe(&self) -> String {
        format!(
            "{} (instance \"{}\", write {})",
            self.url,
            self.instance,
            self.write.name()
        )
    }
}

/// The `http://HOST:PORT` (or, for `grpcs://`, `https://HOST:PORT`) tonic connects to.
pub(crate) fn endpoint_uri(url: &str) -> Result<String> {
    let (scheme, rest) = url
        .split_once("://")
        .with_context(|| format!("--upstream {url:?}: expected grpc://HOST:PORT"))?;
    let http = match scheme {
        "grpc" => "http",
        "grpcs" => "https",
        _ => bail!("--upstream {url:?}: expected grpc://HOST:PORT or grpcs://HOST:PORT"),
    };
    let hostport = rest.strip_suffix('/').unwrap_or(rest);
    let ok = match hostport.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty()
                && !host.contains('/')
                && !host.contains('@')
                && port.parse::<u16>().is_ok_and(|p| p != 0)
        }
        None => false,
    };
    if !ok {
        bail!("--upstream {url:?}: expected grpc://HOST:PORT (a host and a port, nothing else)");
    }
    Ok(format!("{http}://{hostport}"))
}

/// A header sent upstream.
pub(crate) type Header = (AsciiMetadataKey, AsciiMetadataValue);

/// One parsed header line; errors name the line, never the value.
pub(crate) fn header(name: &str, value: &str, origin: &str) -> Result<Header> {
    let key = AsciiMetadataKey::from_bytes(name.trim().to_ascii_lowercase().as_bytes())
        .map_err(|_| anyhow::anyhow!("{origin}: {name:?} is not a valid header name"))?;
    let mut v = AsciiMetadataValue::try_from(value.trim())
        .map_err(|_| anyhow::anyhow!("{origin}: the value of {name:?} is not valid ASCII"))?;
    v.set_sensitive(true);
    Ok((key, v))
}

/// Read the auth file: refused unless a regular file owned by this uid, mode 0600 or 0400.
pub(crate) fn read_auth_file(path: &Path) -> Result<Vec<Header>> {
    let meta = std::fs::symlink_metadata(path)
        .with_context(|| format!("--upstream-auth-file {}: lstat", path.display()))?;
    if !meta.file_type().is_file() {
        bail!(
            "--upstream-auth-file {}: not a regular file (symlinks are refused too)",
            path.display()
        );
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if meta.uid() != uid {
        bail!(
            "--upstream-auth-file {}: owned by uid {}, not by the server's uid {uid}",
            path.display(),
            meta.uid()
        );
    }
    if meta.mode() & 0o077 != 0 {
        bail!(
            "--upstream-auth-file {}: mode {:04o} lets others read it; chmod 600 it",
            path.display(),
            meta.mode() & 0o7777
        );
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--upstream-auth-file {}: read", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let origin = format!("--upstream-auth-file {} line {}", path.display(), i + 1);
        let Some((name, value)) = line.split_once(':') else {
            bail!("{origin}: expected `Header-Name: value`");
        };
        out.push(header(name, value, &origin)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn urls() {
        assert_eq!(endpoint_uri("grpc://h:1").unwrap(), "http://h:1");
        assert_eq!(
            endpoint_uri("grpc://127.0.0.1:8980/").unwrap(),
            "http://127.0.0.1:8980"
        );
        for bad in [
            "http://h:1",
            "h:1",
            "grpc://h",
            "grpc://h:0",
            "grpc://u@h:1",
            "grpc://h:1/x",
        ] {
            let e = endpoint_uri(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
        assert_eq!(endpoint_uri("grpcs://h:1").unwrap(), "https://h:1");
    }

    #[test]
    fn auth_file_mode_and_lines() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("auth");
        std::fs::write(&p, "# team cache\n\nAuthorization: Bearer s3cret\nx-a: b\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_auth_file(&p).unwrap_err().to_string();
        assert!(e.contains("0644") && !e.contains("s3cret"), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let h = read_auth_file(&p).unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].0.as_str(), "authorization");
        assert_eq!(h[0].1.to_str().unwrap(), "Bearer s3cret");
        std::fs::write(&p, "no colon s3cret\n").unwrap();
        let e = read_auth_file(&p).unwrap_err().to_string();
        assert!(e.contains("line 1") && !e.contains("s3cret"), "{e}");
    }
}
