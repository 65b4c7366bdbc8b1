//! Starting `clonestage serve` detached from the Bazel command that needed it, through libc
//! (no setsid(1), which macOS lacks, and no perl):
//!
//! - fork, `setsid()` in the child (a session of its own: Ctrl-C on the Bazel command does
//!   not reach the server, and it outlives the command), fork again and let the first child
//!   exit, so the server is never a child of the process that becomes Bazel (an exiting
//!   server would linger as the Bazel client's zombie);
//! - the grandchild is a small supervisor: stdin from /dev/null, stdout and stderr to the log
//!   (so the server holds none of the caller's pipes: `$(bazel ...)` returns when Bazel does),
//!   the working directory `/`, and descriptors the launcher holds (its lock) closed; it runs
//!   serve, waits for it, and appends `clonestage-launcher: serve exited with status N` (128+
//!   the signal for a killed server) to the log, which the next launcher reads to tell a
//!   server that died from one that was stopped.
//!
//! The launcher is single-threaded when it forks, so the children may allocate and spawn.

use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The line the supervisor appends to the log when serve ends.
pub const EXIT_LINE_PREFIX: &str = "clonestage-launcher: serve exited with status ";

/// What to run: the program, its arguments, and environment changes (None: remove).
pub struct Detached<'a> {
    pub program: &'a Path,
    pub args: Vec<OsString>,
    pub env: Vec<(String, Option<OsString>)>,
    pub log: PathBuf,
    /// Descriptors the supervisor must not keep (the launcher's lock).
    pub close: Vec<&'a File>,
}

/// Starts `d` detached; returns once the first child has exited (the supervisor runs on).
pub fn spawn(d: &Detached) -> std::io::Result<()> {
    let log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(&d.log)?;
    let null = File::open("/dev/null")?;
    // SAFETY: the launcher runs no other thread; each child either _exits or runs to _exit.
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error()),
        0 => {
            unsafe { libc::setsid() };
            match unsafe { libc::fork() } {
                0 => {
                    supervise(d, &log, &null);
                    unsafe { libc::_exit(0) }
                }
                -1 => unsafe { libc::_exit(1) },
                _ => unsafe { libc::_exit(0) },
            }
        }
        child => {
            let mut status = 0;
            while unsafe { libc::waitpid(child, &mut status, 0) } == -1
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
            {}
            Ok(())
        }
    }
}

/// The supervisor: never returns to the launcher's code.
fn supervise(d: &Detached, log: &File, null: &File) {
    for f in &d.close {
        unsafe { libc::close(f.as_raw_fd()) };
    }
    unsafe {
        libc::dup2(null.as_raw_fd(), 0);
        libc::dup2(log.as_raw_fd(), 1);
        libc::dup2(log.as_raw_fd(), 2);
    }
    let _ = std::env::set_current_dir("/");
    let mut cmd = Command::new(d.program);
    cmd.args(&d.args)
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    for (k, v) in &d.env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let code = match cmd.status() {
        Ok(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)),
        Err(e) => {
            let _ = writeln!(
                &*log,
                "clonestage-launcher: cannot run {}: {e}",
                d.program.display()
            );
            127
        }
    };
    let _ = writeln!(&*log, "{EXIT_LINE_PREFIX}{code}");
}
