//! One server per cache directory: an exclusive flock on `<cache>/server/lock`, held for the
//! server's lifetime, with the holder's pid written into the file so a second server (and
//! `clonestage address`) can say who holds it. The kernel drops the lock when the process
//! dies, so a crashed server never blocks the next one. The flock itself is the engine's
//! (`clonestage_engine::platform::try_lock`).

use anyhow::{bail, Context, Result};
use clonestage_engine::platform::{open_lock, try_lock, LockMode};
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::Path;

/// The held lock; released when dropped (or when the process exits).
#[derive(Debug)]
pub(crate) struct ServerLock {
    _file: File,
}

/// How long `acquire` retries a lock that looks held.
const ACQUIRE_PATIENCE: std::time::Duration = std::time::Duration::from_millis(200);

fn open(path: &Path) -> Result<File> {
    open_lock(path).with_context(|| format!("open {}", path.display()))
}

fn read_pid(f: &mut File) -> Option<i32> {
    let mut s = String::new();
    f.rewind().ok()?;
    f.read_to_string(&mut s).ok()?;
    s.trim().parse().ok()
}

impl ServerLock {
    /// Take the lock or fail naming the pid that holds it.
    pub fn acquire(path: &Path) -> Result<ServerLock> {
        let mut f = open(path)?;
        // A process of the previous holder's, between fork and exec, keeps a copy of its
        // descriptor for a moment after it stopped (a restart right after a stop, or tests
        // running several servers in one process): retry briefly before refusing.
        let t0 = std::time::Instant::now();
        let mut got = false;
        while !got {
            got = try_lock(&f, LockMode::Exclusive)
                .with_context(|| format!("flock {}", path.display()))?;
            if got || t0.elapsed() >= ACQUIRE_PATIENCE {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        if !got {
            let who = read_pid(&mut f)
                .map_or_else(|| "another process".to_string(), |p| format!("pid {p}"));
            bail!(
                "a clonestage server already serves this cache ({who} holds {}); stop it first or use another --cache",
                path.display()
            );
        }
        f.set_len(0)
            .with_context(|| format!("truncate {}", path.display()))?;
        f.rewind()
            .with_context(|| format!("seek {}", path.display()))?;
        writeln!(f, "{}", std::process::id())
            .with_context(|| format!("write {}", path.display()))?;
        Ok(ServerLock { _file: f })
    }

    /// The pid of the running server, or None when nobody holds the lock.
    pub fn holder(path: &Path) -> Result<Option<i32>> {
        let mut f = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("open {}", path.display())),
        };
        if try_lock(&f, LockMode::Shared).with_context(|| format!("flock {}", path.display()))? {
            return Ok(None); // we got it: nobody holds it (dropping `f` releases it)
        }
        Ok(Some(read_pid(&mut f).unwrap_or(0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_acquire_names_the_holder() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("lock");
        assert_eq!(ServerLock::holder(&p).unwrap(), None);
        let held = ServerLock::acquire(&p).unwrap();
        let err = ServerLock::acquire(&p).unwrap_err().to_string();
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        assert_eq!(
            ServerLock::holder(&p).unwrap(),
            Some(std::process::id() as i32)
        );
        drop(held);
        assert_eq!(ServerLock::holder(&p).unwrap(), None);
        ServerLock::acquire(&p).unwrap();
    }
}
