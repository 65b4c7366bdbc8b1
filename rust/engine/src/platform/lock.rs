//! Advisory whole-file locks (flock(2)), the one place that calls it: the cache's pin files
//! and `gc.lock`, `stats.json`'s read-add-rewrite (the ledger) and the server's one-per-cache
//! lock all take them here. flock is POSIX-alike on Linux and macOS, so this file serves both.
//! A lock belongs to the open file: it is released when the `File` closes (or the process
//! dies), never by another descriptor of the same path.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Which lock to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    Shared,
    Exclusive,
}

impl LockMode {
    fn op(self) -> libc::c_int {
        match self {
            LockMode::Shared => libc::LOCK_SH,
            LockMode::Exclusive => libc::LOCK_EX,
        }
    }
}

/// Open (creating if needed, never truncating) a file to lock, read and rewrite in place.
pub fn open_lock(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
}

/// Take the lock, waiting for other holders; a signal (EINTR) does not end the wait.
pub fn lock(f: &File, mode: LockMode) -> io::Result<()> {
    super::dir::retry(|| unsafe { libc::flock(f.as_raw_fd(), mode.op()) }).map(|_| ())
}

/// Take the lock if nobody else holds it: `Ok(false)` when held elsewhere (EWOULDBLOCK).
pub fn try_lock(f: &File, mode: LockMode) -> io::Result<bool> {
    match super::dir::retry(|| unsafe { libc::flock(f.as_raw_fd(), mode.op() | libc::LOCK_NB) }) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_refused_to_another_open_file_until_it_closes() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("lock");
        let (a, b) = (open_lock(&p).unwrap(), open_lock(&p).unwrap());
        lock(&a, LockMode::Exclusive).unwrap();
        assert!(!try_lock(&b, LockMode::Shared).unwrap());
        assert!(!try_lock(&b, LockMode::Exclusive).unwrap());
        drop(a);
        assert!(try_lock(&b, LockMode::Shared).unwrap());
        // Shared locks coexist; an exclusive one waits for them.
        let c = open_lock(&p).unwrap();
        assert!(try_lock(&c, LockMode::Shared).unwrap());
        let e = open_lock(&p).unwrap();
        assert!(!try_lock(&e, LockMode::Exclusive).unwrap());
    }

    #[test]
    fn a_blocking_lock_waits_for_the_holder() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("lock");
        let a = open_lock(&p).unwrap();
        lock(&a, LockMode::Exclusive).unwrap();
        let p2 = p.clone();
        let t = std::thread::spawn(move || {
            let b = open_lock(&p2).unwrap();
            let t0 = std::time::Instant::now();
            lock(&b, LockMode::Shared).unwrap();
            t0.elapsed()
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        drop(a);
        assert!(t.join().unwrap() >= std::time::Duration::from_millis(80));
    }

    #[test]
    fn open_lock_keeps_what_the_file_holds() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("lock");
        std::fs::write(&p, "1234\n").unwrap();
        drop(open_lock(&p).unwrap());
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "1234\n");
    }
}
