//! `clonestage address [--tcp]`: the Bazel flags that reach the server running on a cache.
//! Unix socket: `--remote_executor=unix://<absolute socket path>`. TCP:
//! `--remote_executor=grpc://127.0.0.1:<port>` and `--remote_header=x-clonestage-token=<token>`.
//! Fails when no server holds the cache's lock, or when one does but is not ready yet.

use crate::auth::{read_token, TOKEN_HEADER};
use crate::layout::Layout;
use crate::lock::ServerLock;
use anyhow::{bail, Context, Result};
use std::path::Path;

pub fn address(cache_dir: &Path, tcp: bool) -> Result<Vec<String>> {
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
    let port = match std::fs::read_to_string(layout.tcp_port()) {
        Ok(p) => p
            .trim()
            .parse::<u16>()
            .with_context(|| format!("{}: not a port number", layout.tcp_port().display()))?,
        Err(_) => bail!(
            "the clonestage server for {} (pid {pid}) is still starting; try again",
            cache.display()
        ),
    };
    if tcp {
        let token = read_token(&layout.token())?;
        Ok(vec![
            format!("--remote_executor=grpc://127.0.0.1:{port}"),
            format!("--remote_header={TOKEN_HEADER}={token}"),
        ])
    } else {
        Ok(vec![format!(
            "--remote_executor=unix://{}",
            layout.socket().display()
        )])
    }
}
