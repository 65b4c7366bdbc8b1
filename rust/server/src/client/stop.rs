//! `clonestage stop`: find the server holding the cache's lock (its pid is in the lock file),
//! send it SIGTERM (it drains running actions, then exits: `server`), and wait until the lock
//! is free, which is when the cache is no longer served.

use crate::layout::Layout;
use crate::server_lock::ServerLock;
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::time::{Duration, Instant};

/// How `stop` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// The server with this pid released the cache.
    Stopped(i32),
    /// No server was running for the cache.
    NotRunning,
    /// The server with this pid still holds the cache after the timeout.
    StillRunning(i32),
}

pub fn stop(cache_dir: &Path, timeout: Duration) -> Result<Stopped> {
    let lock = Layout::new(cache_dir).lock();
    let Some(pid) = ServerLock::holder(&lock)? else {
        return Ok(Stopped::NotRunning);
    };
    if pid <= 0 {
        bail!(
            "a process holds {} but its pid is unreadable; not signalling it",
            lock.display()
        );
    }
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            return Err(e).with_context(|| format!("kill -TERM {pid}"));
        }
    }
    tracing::info!(
        pid,
        "sent SIGTERM to the server; waiting for it to release the cache"
    );
    let t0 = Instant::now();
    loop {
        if ServerLock::holder(&lock)?.is_none() {
            return Ok(Stopped::Stopped(pid));
        }
        if t0.elapsed() >= timeout {
            return Ok(Stopped::StillRunning(pid));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
