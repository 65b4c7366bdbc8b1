//! Making sure a ready `clonestage serve` of this version runs on the cache, without ever
//! blocking Bazel for long:
//!
//! - Fast path: a ready server of this version holds the cache (its lock, its `tcp-port`,
//!   its `version`): a few syscalls, no lock, no process.
//! - Otherwise, under the launcher lock `<cache>/launcher/lock` (flock through the engine's
//!   platform layer; `CLONESTAGE_LOCK_TIMEOUT` seconds, default 900, for another launcher
//!   that is starting one), the launcher looks again and then: waits for a server that is
//!   starting; stops a server of another version (`clonestage stop`'s logic, bounded by
//!   `CLONESTAGE_STOP_TIMEOUT`, default 30 s) and starts its own; or starts one
//!   (`detach`), waiting at most `CLONESTAGE_START_TIMEOUT` seconds (default 15) and giving
//!   up at once when the log says serve exited. `clonestage serve` holds its own lock too,
//!   so two servers never run on one cache even without this one.
//! - A server that died since the last command (its log does not end with a clean exit) is
//!   restarted with one line saying so and the last lines of its log.
//!
//! Every failure is a `Problem`: one line, after which the launcher stands aside.

use crate::launch::detach::{self, Detached, EXIT_LINE_PREFIX};
use crate::launch::upstream::{self, Settings};
use clonestage_engine::platform::{open_lock, try_lock, LockMode};
use clonestage_server::client::RunningServer;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Why the launcher stands aside, and whether the server's log is worth quoting.
#[derive(Debug)]
pub struct Problem {
    pub line: String,
    pub quote_log: Option<PathBuf>,
}

impl Problem {
    fn new(line: String) -> Problem {
        Problem {
            line,
            quote_log: None,
        }
    }
}

/// What the launcher needs to start a server.
pub struct Start<'a> {
    pub cache: &'a Path,
    pub helper: &'a Path,
    pub upstream: &'a Settings,
    pub env: crate::dirs::Env<'a>,
}

/// The ready server of this version on `s.cache`, started if need be. `say` gets the lines
/// for the user (a restart after a death, a replaced version, waiting for a lock).
pub fn ensure(s: &Start, say: &mut dyn FnMut(String)) -> Result<RunningServer, Problem> {
    if let Some(r) = ready_ours(s.cache) {
        return Ok(r);
    }
    let launcher = s.cache.join("launcher");
    for dir in [s.cache, launcher.as_path()] {
        crate::dirs::create_private(dir)
            .map_err(|e| Problem::new(format!("cannot create {}: {e}", dir.display())))?;
    }
    let lock_path = launcher.join("lock");
    let lock = take_lock(
        &lock_path,
        seconds(s.env, "CLONESTAGE_LOCK_TIMEOUT", 900),
        say,
    )?;
    let mut replaced = false;
    match clonestage_server::client::running(s.cache) {
        Ok(Some(r)) if r.tcp_port.is_some() && r.version.as_deref() == Some(OURS) => return Ok(r),
        Ok(Some(r)) if r.tcp_port.is_some() => {
            replace(s, &r, say)?;
            replaced = true;
        }
        // Starting (not ready yet): wait for it below instead of starting another.
        Ok(Some(_)) => return wait_ready(s, None, None, say),
        _ => {}
    }
    let started = start(s, &lock, replaced, say);
    drop(lock);
    started
}

const OURS: &str = crate::dirs::VERSION;

fn ready_ours(cache: &Path) -> Option<RunningServer> {
    match clonestage_server::client::running(cache) {
        Ok(Some(r)) if r.tcp_port.is_some() && r.version.as_deref() == Some(OURS) => Some(r),
        _ => None,
    }
}

fn seconds(env: crate::dirs::Env, name: &str, default: u64) -> Duration {
    Duration::from_secs(
        env(name)
            .and_then(|v| v.to_str()?.trim().parse().ok())
            .unwrap_or(default),
    )
}

fn take_lock(
    path: &Path,
    patience: Duration,
    say: &mut dyn FnMut(String),
) -> Result<std::fs::File, Problem> {
    let f = open_lock(path).map_err(|e| {
        Problem::new(format!(
            "cannot open the launcher lock {}: {e}",
            path.display()
        ))
    })?;
    let t0 = Instant::now();
    let mut said = false;
    loop {
        match try_lock(&f, LockMode::Exclusive) {
            Ok(true) => return Ok(f),
            Ok(false) => {}
            Err(e) => {
                return Err(Problem::new(format!("flock {}: {e}", path.display())));
            }
        }
        if t0.elapsed() >= patience {
            return Err(Problem::new(format!(
                "gave up waiting for the launcher lock {}",
                path.display()
            )));
        }
        // Said once, and only when the wait is long enough to notice.
        if !said && t0.elapsed() >= Duration::from_secs(2) {
            say(format!(
                "waiting for another launcher that is starting the clonestage server ({})",
                path.display()
            ));
            said = true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Stops the server `r` of another version cleanly (running actions drain).
fn replace(s: &Start, r: &RunningServer, say: &mut dyn FnMut(String)) -> Result<(), Problem> {
    let theirs = r
        .version
        .clone()
        .unwrap_or_else(|| "unknown (it wrote no version file)".to_string());
    say(format!(
        "the clonestage server on {} is version {theirs}, this launcher's helper ({}) is \
         {OURS}: restarting it with ours",
        s.cache.display(),
        s.helper.display()
    ));
    let timeout = seconds(s.env, "CLONESTAGE_STOP_TIMEOUT", 30);
    use clonestage_server::client::Stopped;
    match clonestage_server::client::stop(s.cache, timeout) {
        Ok(Stopped::Stopped(_) | Stopped::NotRunning) => Ok(()),
        Ok(Stopped::StillRunning(pid)) => Err(Problem::new(format!(
            "could not stop the server of version {theirs} on {}: the server (pid {pid}) got \
             SIGTERM but still runs after {}s",
            s.cache.display(),
            timeout.as_secs()
        ))),
        Err(e) => Err(Problem::new(format!(
            "could not stop the server of version {theirs} on {}: {e:#}",
            s.cache.display()
        ))),
    }
}

fn start(
    s: &Start,
    lock: &std::fs::File,
    replaced: bool,
    say: &mut dyn FnMut(String),
) -> Result<RunningServer, Problem> {
    let log = s.cache.join("launcher/serve.log");
    let old = log.with_extension("log.1");
    // Keep the previous server's log: it may say why that one died (not after replacing a
    // server of another version, which was stopped and said so).
    let died = if replaced { None } else { died_why(&log) };
    if std::fs::metadata(&log).is_ok_and(|m| m.len() > 0) {
        let _ = std::fs::rename(&log, &old);
    }
    let mut env: Vec<(String, Option<OsString>)> = upstream::KEYS
        .iter()
        .map(|k| (k.to_string(), None))
        .collect();
    env.extend(
        s.upstream
            .values
            .iter()
            .map(|(k, v)| (k.to_string(), Some(v.clone()))),
    );
    // The log is a file for people to read, and the launcher quotes it.
    env.push(("NO_COLOR".into(), Some("1".into())));
    let d = Detached {
        program: s.helper,
        args: vec![
            "--cache".into(),
            s.cache.as_os_str().to_owned(),
            "serve".into(),
        ],
        env,
        log: log.clone(),
        close: vec![lock],
    };
    detach::spawn(&d).map_err(|e| {
        Problem::new(format!(
            "cannot start `clonestage serve` ({}): {e}",
            s.helper.display()
        ))
    })?;
    let r = wait_ready(s, Some(&log), died.map(|why| (why, old)), say)?;
    upstream::record(s.cache, s.upstream);
    Ok(r)
}

/// Waits until a ready server of this version answers; `log` is the log of the server this
/// launcher started, `died` the reason and old log to report once it is up.
fn wait_ready(
    s: &Start,
    log: Option<&Path>,
    died: Option<(String, PathBuf)>,
    say: &mut dyn FnMut(String),
) -> Result<RunningServer, Problem> {
    let limit = seconds(s.env, "CLONESTAGE_START_TIMEOUT", 15);
    let t0 = Instant::now();
    let mut waits = 0;
    loop {
        if let Some(r) = ready_ours(s.cache) {
            if let Some((why, old)) = died {
                say(format!(
                    "the clonestage server on {} had died since the last command ({why}); \
                     started a new one. The end of its log ({}):",
                    s.cache.display(),
                    old.display()
                ));
                for l in last_lines(&old, 4) {
                    say(format!("  | {l}"));
                }
            }
            return Ok(r);
        }
        if let Some(log) = log {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let ended = text
                .lines()
                .any(|l| l.starts_with(EXIT_LINE_PREFIX) || l.starts_with("clonestage: error"));
            // A server that lost the lock to one started elsewhere: wait for that one.
            let lost_lock = text.contains("already serves this cache");
            if ended && !lost_lock {
                return Err(Problem {
                    line: format!(
                        "`clonestage serve` exited before it was ready (log: {})",
                        log.display()
                    ),
                    quote_log: Some(log.to_path_buf()),
                });
            }
        }
        if t0.elapsed() >= limit {
            return Err(Problem {
                line: format!(
                    "`clonestage serve` was not ready after {}s (log: {})",
                    limit.as_secs(),
                    log.map_or_else(
                        || s.cache.join("launcher/serve.log").display().to_string(),
                        |l| l.display().to_string()
                    )
                ),
                quote_log: log.map(Path::to_path_buf),
            });
        }
        std::thread::sleep(Duration::from_millis(if waits < 20 { 50 } else { 200 }));
        waits += 1;
    }
}

/// Why the server whose log is `log` died rather than stopped; None when it stopped cleanly
/// (its last line is the supervisor's exit status 0) or never ran.
pub fn died_why(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let last = text.lines().last()?;
    match last.strip_prefix(EXIT_LINE_PREFIX) {
        Some("0") => None,
        Some(st) => Some(match st.trim().parse::<i32>() {
            Ok(n) if n > 128 => format!("killed by signal {}", n - 128),
            _ => format!("it exited with status {st}"),
        }),
        None => Some(
            "its log ends without an exit status: killed with its supervisor, or the machine \
             restarted"
                .to_string(),
        ),
    }
}

/// The last `n` lines of `path`, without colour codes.
pub fn last_lines(path: &Path, n: usize) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| strip_ansi(l))
        .collect()
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_tells_a_death_from_a_stop() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("serve.log");
        assert_eq!(died_why(&log), None, "no log: never ran");
        std::fs::write(&log, format!("INFO ready\n{EXIT_LINE_PREFIX}0\n")).unwrap();
        assert_eq!(died_why(&log), None);
        std::fs::write(&log, format!("INFO ready\n{EXIT_LINE_PREFIX}137\n")).unwrap();
        assert_eq!(died_why(&log).as_deref(), Some("killed by signal 9"));
        std::fs::write(&log, format!("{EXIT_LINE_PREFIX}1\n")).unwrap();
        assert_eq!(died_why(&log).as_deref(), Some("it exited with status 1"));
        std::fs::write(&log, "INFO ready\nINFO probed\n").unwrap();
        assert!(died_why(&log).unwrap().contains("without an exit status"));
    }

    #[test]
    fn quoted_lines_lose_their_colours() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("serve.log");
        std::fs::write(&log, "a\nb\n\u{1b}[2mc\u{1b}[0m d\ne\nf\n").unwrap();
        assert_eq!(last_lines(&log, 4), ["b", "c d", "e", "f"]);
    }
}
