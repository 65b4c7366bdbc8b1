//! Running a command through `clonestage-spawn` (cc/), Bazel's process-wrapper contract:
//! `clonestage-spawn --cwd DIR --timeout SECS --kill_delay 5 --stdout F --stderr F --stats -
//! --die_with_parent PID -- argv...`, exit code = the command's, 128+signal, 124 on timeout,
//! 125 wrapper failure, 126/127 exec failures, and the stats JSON
//! `{"exit_code","signal","timed_out","wall_us","user_us","sys_us","max_rss_kb"}`, which the
//! wrapper writes to its own stdout: the server reads it, and the wrapper's own messages, from
//! pipes, so an action costs no stats or log file to create, rename and remove.
//!
//! The wrapper gets exactly the Command's environment, runs in its own process group (a
//! Ctrl-C at the server's terminal reaches the server, which decides whether to drain or
//! cancel), and on Linux gets SIGTERM when the server thread that started it ends
//! (`--die_with_parent`, PR_SET_PDEATHSIG), so a killed server leaves no action running.
//! The wrapper asks for that signal itself rather than the server between fork and exec:
//! without a `pre_exec` hook the standard library starts it with `posix_spawn` (vfork-like),
//! which costs about 1 ms less per action than forking the multi-threaded server. Usually the
//! action does not start it at all: it takes one started ahead of time (`prespawn`) and writes
//! it the same arguments, environment and directory.

use super::operations::ActionControl;
use super::prespawn;
use crate::failure::Failure;
use anyhow::{bail, Result};
use serde::Deserialize;
use std::ffi::OsStr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const WRAPPER_NAME: &str = "clonestage-spawn";
/// Seconds between SIGTERM and SIGKILL on timeout or cancel (Bazel's default).
pub const KILL_DELAY_SECS: u32 = 5;

/// Find the wrapper: the explicit option, `$CLONESTAGE_SPAWN`, beside the current executable,
/// then `$PATH`.
pub fn locate(explicit: Option<&Path>) -> Result<PathBuf> {
    let mut tried = Vec::new();
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = explicit {
        candidates.push(p.to_path_buf());
    } else if let Some(p) = std::env::var_os("CLONESTAGE_SPAWN").filter(|p| !p.is_empty()) {
        candidates.push(p.into());
    } else {
        if let Some(dir) = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf))
        {
            candidates.push(dir.join(WRAPPER_NAME));
        }
        for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
            candidates.push(dir.join(WRAPPER_NAME));
        }
    }
    for c in candidates {
        if is_executable(&c) {
            return Ok(std::path::absolute(&c).unwrap_or(c));
        }
        tried.push(c.display().to_string());
    }
    bail!(
        "cannot find the spawn wrapper {WRAPPER_NAME} (tried: {}); build it (`bazel build //cc:clonestage-spawn`) and pass --spawn or set CLONESTAGE_SPAWN",
        tried.join(", ")
    )
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The wrapper's `--stats` file.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct SpawnStats {
    pub exit_code: i32,
    pub signal: i32,
    pub timed_out: bool,
    pub wall_us: u64,
    pub user_us: u64,
    pub sys_us: u64,
    pub max_rss_kb: u64,
}

pub(crate) struct SpawnRequest<'a> {
    pub wrapper: &'a Path,
    /// The wrapper's own working directory (the action's work dir, outside the root).
    pub work_dir: &'a Path,
    pub cwd: &'a Path,
    pub args: &'a [String],
    pub env: Vec<(&'a str, &'a str)>,
    pub timeout: Option<Duration>,
    pub stdout: &'a Path,
    pub stderr: &'a Path,
    /// Wrappers started ahead of time; None: start one for this action.
    pub pool: Option<&'a prespawn::Pool>,
}

fn io(what: &str, p: &Path, e: std::io::Error) -> Failure {
    Failure::io(what, p, e)
}

/// Run the command; returns the wrapper's stats. Blocks until the command has ended.
pub(crate) fn spawn_command(
    req: &SpawnRequest,
    control: &ActionControl,
) -> Result<SpawnStats, Failure> {
    if control.is_cancelled() {
        return Err(Failure::Unavailable(
            "the server is shutting down; action not started".into(),
        ));
    }
    let timeout = format!("{}", req.timeout.map_or(0.0, |t| t.as_secs_f64()));
    let kill_delay = KILL_DELAY_SECS.to_string();
    let me = std::process::id().to_string();
    let mut argv: Vec<&OsStr> = vec![
        "--cwd".as_ref(),
        req.cwd.as_os_str(),
        "--timeout".as_ref(),
        timeout.as_ref(),
        "--kill_delay".as_ref(),
        kill_delay.as_ref(),
        "--stdout".as_ref(),
        req.stdout.as_os_str(),
        "--stderr".as_ref(),
        req.stderr.as_os_str(),
        "--stats".as_ref(),
        "-".as_ref(),
        "--die_with_parent".as_ref(),
        me.as_ref(),
        "--".as_ref(),
    ];
    argv.extend(req.args.iter().map(OsStr::new));
    let mut child = match prespawned(req, &argv) {
        Some(c) => c,
        None => Command::new(req.wrapper)
            .args(&argv)
            .env_clear()
            .envs(req.env.iter().copied())
            .current_dir(req.work_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| io("cannot start the spawn wrapper", req.wrapper, e))?,
    };
    let pid = child.id() as i32;
    control.set_pid(Some(pid));
    wait_exited(pid);
    control.set_pid(None);
    // It has exited: what it wrote is in the pipes (a few hundred bytes at most).
    let out = child.stdout.take().map(drain).unwrap_or_default();
    let err = child.stderr.take().map(drain).unwrap_or_default();
    let status = child.wait().map_err(|e| io("wait for", req.wrapper, e))?;
    if out.is_empty() {
        return Err(Failure::internal(
            format_args!(
                "the spawn wrapper {} ended ({status}) without its stats",
                req.wrapper.display()
            ),
            String::from_utf8_lossy(&err).trim(),
        ));
    }
    serde_json::from_slice(&out).map_err(|e| {
        Failure::internal(
            format_args!("not the spawn wrapper's stats JSON ({e})"),
            String::from_utf8_lossy(&out).trim(),
        )
    })
}

/// A waiting wrapper from the pool, handed this action; None: start one directly.
fn prespawned(req: &SpawnRequest, argv: &[&OsStr]) -> Option<Child> {
    let pool = req.pool?;
    let request = prespawn::encode_request(req.work_dir, argv, &req.env)?;
    let mut child = pool.take()?;
    match prespawn::send(&mut child, &request) {
        Ok(()) => Some(child),
        Err(e) => {
            // It died while waiting (killed from outside): this action starts its own.
            tracing::warn!(pid = child.id(), error = %e, "a waiting wrapper did not take its request");
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    }
}

/// Everything readable now from a pipe whose writer has exited. Non-blocking, so a pipe some
/// escaped descendant still holds open cannot hang the action.
fn drain(pipe: impl std::io::Read + std::os::fd::AsRawFd) -> Vec<u8> {
    let mut pipe = pipe;
    let fd = pipe.as_raw_fd();
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    out
}

/// Wait until `pid` has exited without reaping it (so its pid stays ours until `wait`).
fn wait_exited(pid: i32) {
    loop {
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_json_parses() {
        let s: SpawnStats = serde_json::from_str(
            r#"{"exit_code": 124, "signal": 15, "timed_out": true, "wall_us": 10, "user_us": 1, "sys_us": 2, "max_rss_kb": 3}"#,
        )
        .unwrap();
        assert!(s.timed_out);
        assert_eq!(s.exit_code, 124);
    }

    #[test]
    fn a_waiting_wrapper_that_died_is_skipped_and_replaced() {
        // Exits at once, as a waiting wrapper killed from outside would have.
        let dir = tempfile::tempdir().unwrap();
        let fake = prespawn::fake_wrapper(dir.path(), "exit 0");
        let pool = prespawn::Pool::start(&fake, 1);
        let t0 = std::time::Instant::now();
        while pool.idle() < 1 && t0.elapsed().as_secs() < 10 {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(300)); // it has exited by now
        let p = dir.path();
        let req = SpawnRequest {
            wrapper: &fake,
            work_dir: p,
            cwd: p,
            args: &[],
            env: vec![("PATH", "/bin")],
            timeout: None,
            stdout: p,
            stderr: p,
            pool: Some(&pool),
        };
        // The request is large enough that writing it to a dead reader fails.
        let big = "x".repeat(1 << 20);
        let argv = [OsStr::new("--"), OsStr::new(&big)];
        assert!(
            prespawned(&req, &argv).is_none(),
            "a dead wrapper was handed the action"
        );
        // The pool stays on and starts a replacement.
        let t0 = std::time::Instant::now();
        while pool.idle() < 1 && t0.elapsed().as_secs() < 10 {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(pool.idle(), 1);
    }

    #[test]
    fn explicit_wrapper_must_exist() {
        assert!(locate(Some(Path::new("/nonexistent/clonestage-spawn"))).is_err());
        assert_eq!(
            locate(Some(Path::new("/bin/sh"))).unwrap(),
            PathBuf::from("/bin/sh")
        );
    }
}
