//! Spawn wrappers started ahead of time (`clonestage-spawn --read_request`): an action takes a
//! waiting wrapper and writes it its directory, arguments and environment, instead of waiting
//! for the wrapper's exec and start-up (~1 ms of the per-action overhead measured here;
//! `tests/perf/overhead.sh`). A dedicated thread keeps `size` of them waiting.
//!
//! That thread never ends: the wrappers it starts ask for PR_SET_PDEATHSIG (`--die_with_parent`),
//! which Linux ties to the thread that started them, so it must outlive every action.
//! When the pool is closed it only stops starting wrappers and ends the waiting ones (an empty
//! request: they exit 0 without running anything). A wrapper binary without `--read_request`
//! (an older build; its `--help` says) or one that cannot be started disables the pool:
//! actions then start the wrapper directly, as before. A waiting wrapper that died is
//! replaced; its action starts one directly.

use std::collections::VecDeque;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

pub(crate) struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    wrapper: PathBuf,
    size: usize,
    idle: Mutex<VecDeque<Child>>,
    wake: Condvar,
    closed: AtomicBool,
    /// Closed, and no wrapper start in flight: nothing of ours is between fork and exec, still
    /// holding copies of the server's descriptors (its lock among them).
    parked: AtomicBool,
}

impl Pool {
    /// Keep `size` wrappers waiting (none: `size` 0).
    pub fn start(wrapper: &Path, size: usize) -> Pool {
        let inner = Arc::new(Inner {
            wrapper: wrapper.to_path_buf(),
            size,
            idle: Mutex::new(VecDeque::new()),
            wake: Condvar::new(),
            closed: AtomicBool::new(size == 0),
            parked: AtomicBool::new(size == 0),
        });
        if size > 0 {
            let i = inner.clone();
            let spawned = std::thread::Builder::new()
                .name("clonestage-prespawn".into())
                .spawn(move || i.fill());
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start the prespawn thread; wrappers start per action");
                inner.closed.store(true, Ordering::SeqCst);
                inner.parked.store(true, Ordering::SeqCst);
            }
        }
        Pool { inner }
    }

    /// A waiting wrapper, if one is ready (a replacement is started at once).
    pub fn take(&self) -> Option<Child> {
        if self.inner.closed.load(Ordering::SeqCst) {
            return None;
        }
        let child = self.inner.idle.lock().unwrap().pop_front();
        self.inner.wake.notify_one();
        child
    }

    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        self.inner.wake.notify_one();
    }

    /// Close, then wait (at most `limit`) until the pool starts nothing any more and its
    /// waiting wrappers have ended. The server calls this before releasing its lock: a child
    /// between fork and exec holds a copy of the lock's descriptor.
    pub fn close_and_wait(&self, limit: std::time::Duration) {
        self.close();
        let t0 = std::time::Instant::now();
        while !self.inner.parked.load(Ordering::SeqCst) && t0.elapsed() < limit {
            self.inner.wake.notify_one();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[cfg(test)]
    pub fn idle(&self) -> usize {
        self.inner.idle.lock().unwrap().len()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.close();
    }
}

impl Inner {
    fn fill(&self) {
        // A wrapper built before `--read_request` would fail the action it is handed.
        match Command::new(&self.wrapper)
            .arg("--help")
            .env_clear()
            .output()
        {
            Ok(o) if String::from_utf8_lossy(&o.stdout).contains("--read_request") => {}
            Ok(_) => {
                tracing::warn!(wrapper = %self.wrapper.display(), "the wrapper predates --read_request (rebuild it); starting it per action");
                self.closed.store(true, Ordering::SeqCst);
            }
            Err(e) => {
                tracing::warn!(wrapper = %self.wrapper.display(), error = %e, "cannot run the wrapper; starting it per action");
                self.closed.store(true, Ordering::SeqCst);
            }
        }
        loop {
            let mut idle = self.idle.lock().unwrap();
            if self.closed.load(Ordering::SeqCst) {
                // An empty request (stdin closed) ends a waiting wrapper; reap it.
                let ended: Vec<Child> = idle.drain(..).collect();
                drop(idle);
                for mut c in ended {
                    drop(c.stdin.take());
                    let _ = c.wait();
                }
                // Parked, not returned: see the module comment.
                let idle = self.idle.lock().unwrap();
                if idle.is_empty() {
                    self.parked.store(true, Ordering::SeqCst);
                }
                drop(self.wake.wait(idle).unwrap());
                continue;
            }
            if idle.len() >= self.size {
                drop(self.wake.wait(idle).unwrap());
                continue;
            }
            drop(idle);
            match self.start_one() {
                Ok(c) => self.idle.lock().unwrap().push_back(c),
                Err(e) => {
                    tracing::warn!(wrapper = %self.wrapper.display(), error = %e, "cannot prespawn the wrapper; starting it per action");
                    self.closed.store(true, Ordering::SeqCst);
                }
            }
        }
    }

    fn start_one(&self) -> std::io::Result<Child> {
        Command::new(&self.wrapper)
            .arg("--read_request")
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
    }
}

/// The `--read_request` format: NUL-terminated N_ARGS, N_ENV, DIR, arguments, `NAME=value`
/// entries. None when a string holds a NUL (the direct spawn reports that).
pub(crate) fn encode_request(
    dir: &Path,
    args: &[&std::ffi::OsStr],
    env: &[(&str, &str)],
) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(4096);
    let mut put = |b: &[u8]| {
        out.extend_from_slice(b);
        out.push(0);
        !b.contains(&0)
    };
    let mut ok = put(args.len().to_string().as_bytes());
    ok &= put(env.len().to_string().as_bytes());
    ok &= put(dir.as_os_str().as_bytes());
    for a in args {
        ok &= put(a.as_bytes());
    }
    for (k, v) in env {
        ok &= !k.contains('=') && put(format!("{k}={v}").as_bytes());
    }
    ok.then_some(out)
}

/// Hand `request` to a waiting wrapper: write it and close its stdin.
pub(crate) fn send(child: &mut Child, request: &[u8]) -> std::io::Result<()> {
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("the wrapper's stdin is gone"))?;
    stdin.write_all(request)
}

/// A stand-in wrapper for tests: its `--help` names `--read_request`; otherwise it runs `body`.
#[cfg(test)]
pub(crate) fn fake_wrapper(dir: &Path, body: &str) -> PathBuf {
    let fake = dir.join("fake-spawn");
    let script =
        format!("#!/bin/sh\n[ \"$1\" = --help ] && {{ echo --read_request; exit 0; }}\n{body}\n");
    std::fs::write(&fake, script).unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    fake
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_nul_separated_and_refuse_embedded_nuls() {
        let r = encode_request(
            Path::new("/w"),
            &["--".as_ref(), "sh".as_ref(), "".as_ref()],
            &[("A", "b=c")],
        )
        .unwrap();
        assert_eq!(r, b"3\x001\x00/w\x00--\x00sh\x00\x00A=b=c\x00");
        assert!(encode_request(Path::new("/w"), &["a\0b".as_ref()], &[]).is_none());
        assert!(encode_request(Path::new("/w"), &[], &[("A=", "b")]).is_none());
    }

    /// Until the pool's starter thread has given up on its wrapper (at most 10 s).
    fn wait_until_closed(p: &Pool) {
        let t0 = std::time::Instant::now();
        while !p.inner.closed.load(Ordering::SeqCst) && t0.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn a_pool_of_a_missing_wrapper_disables_itself() {
        let p = Pool::start(Path::new("/nonexistent/clonestage-spawn"), 1);
        wait_until_closed(&p);
        assert!(p.take().is_none());
    }

    #[test]
    fn a_wrapper_without_read_request_is_never_prespawned() {
        let p = Pool::start(Path::new("/bin/true"), 1);
        wait_until_closed(&p);
        assert!(p.take().is_none());
        assert_eq!(p.idle(), 0);
    }

    #[test]
    fn a_closed_pool_ends_its_waiting_wrappers() {
        // Waits for EOF, as a wrapper waits for its request.
        let dir = tempfile::tempdir().unwrap();
        let fake = fake_wrapper(dir.path(), "exec cat >/dev/null");
        let p = Pool::start(&fake, 2);
        let t0 = std::time::Instant::now();
        while p.idle() < 2 && t0.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(p.idle(), 2);
        let pids: Vec<i32> = p
            .inner
            .idle
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.id() as i32)
            .collect();
        let mut taken = p.take().expect("a waiting process");
        drop(taken.stdin.take());
        taken.wait().unwrap();
        p.close();
        let t0 = std::time::Instant::now();
        while p.idle() > 0 && t0.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(p.idle(), 0);
        for pid in pids {
            // Ended: reaped by the pool (-1) or, racing it, by us (pid); 0 = still running.
            let t0 = std::time::Instant::now();
            let mut r = 0;
            while r == 0 && t0.elapsed().as_secs() < 10 {
                r = unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            assert_ne!(r, 0, "pid {pid} still running after the pool closed");
        }
    }
}
