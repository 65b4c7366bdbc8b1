//! `server`: a server for this cache is up, or can be started (the doctor starts one, uses it
//! for the bazel check, and stops it at the end), and the transport this Bazel would use to
//! reach it: the unix socket for Bazel 6+, loopback TCP with the token in the private rc file
//! for 4.x/5.x (which exit 37 on unix: addresses; `clonestage address --for-bazel`). A server
//! that cannot start fails with the last lines of its log (a missing spawn wrapper, say).

use super::report::Outcome;
use super::{tail, Context, Server};
use std::time::{Duration, Instant};

/// How long a server may take to become ready (the launcher waits as long).
const READY_WITHIN: Duration = Duration::from_secs(60);

pub fn check(ctx: &mut Context) -> Outcome {
    if ctx.cache.is_none() {
        return Outcome::skip("no cache (see filesystem)");
    }
    let found = match clonestage_server::client::running(&ctx.cache_dir) {
        Ok(s) => s,
        Err(e) => {
            return Outcome::fail(format!(
                "cannot tell whether a server holds {}: {e:#}",
                ctx.cache_dir.display()
            ))
        }
    };
    let (how, child): (String, Option<std::process::Child>) = match found {
        Some(s) => (
            format!(
                "up, pid {}, clonestage {}{}",
                s.pid,
                s.version.as_deref().unwrap_or("unknown"),
                if s.version.as_deref() == Some(clonestage_server::VERSION) {
                    String::new()
                } else {
                    format!(
                        " (this doctor is {}: tools/bazel restarts it with its own)",
                        clonestage_server::VERSION
                    )
                }
            ),
            None,
        ),
        None => match start(ctx) {
            Ok(child) => (
                format!(
                    "none was running; started one (pid {}) for these checks",
                    child.id()
                ),
                Some(child),
            ),
            Err(e) => return Outcome::fail(e),
        },
    };
    let mut child = child;
    let ready = match wait_ready(ctx, child.as_mut()) {
        Ok(s) => s,
        Err(e) => {
            if let Some(mut c) = child {
                let _ = c.kill();
                let _ = c.wait();
            }
            return Outcome::fail(format!("{how}; {e}"));
        }
    };
    let port = ready.tcp_port.expect("ready");
    let transport = match ctx.bazel_version().and_then(|v| v.major) {
        Some(m) if m >= 6 => format!("Bazel {m} would use the unix socket {}", ready.socket.display()),
        Some(m) => format!(
            "Bazel {m} would use loopback TCP 127.0.0.1:{port} with the token from {} (Bazel 4.x/5.x exit 37 on unix: executors)",
            ready.tcp_bazelrc.display()
        ),
        None => format!(
            "unix socket {} for Bazel 6+, loopback TCP 127.0.0.1:{port} with the token file for 4.x/5.x",
            ready.socket.display()
        ),
    };
    ctx.server = Some(Server {
        socket: ready.socket,
        tcp_port: port,
        tcp_bazelrc: ready.tcp_bazelrc,
        started: child,
    });
    Outcome::pass(format!("{how}; {transport}"))
}

/// `clonestage --cache DIR serve`, its output in the doctor's scratch directory.
fn start(ctx: &mut Context) -> Result<std::process::Child, String> {
    let me = std::env::current_exe()
        .map_err(|e| format!("cannot find this binary to start a server: {e}"))?;
    let dir = ctx.scratch("server").map_err(|e| format!("{e:#}"))?;
    let log = dir.join("serve.log");
    let out = std::fs::File::create(&log).map_err(|e| format!("create {}: {e}", log.display()))?;
    let err = out
        .try_clone()
        .map_err(|e| format!("dup {}: {e}", log.display()))?;
    ctx.server_log = Some(log);
    std::process::Command::new(&me)
        .arg("--cache")
        .arg(&ctx.cache_dir)
        .arg("serve")
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("cannot start {} serve: {e}", me.display()))
}

/// The server once it is ready; an error naming why it is not (with its log's last lines
/// when the doctor started it).
fn wait_ready(
    ctx: &mut Context,
    mut started: Option<&mut std::process::Child>,
) -> Result<clonestage_server::client::RunningServer, String> {
    let t0 = Instant::now();
    loop {
        if let Ok(Some(s)) = clonestage_server::client::running(&ctx.cache_dir) {
            if s.tcp_port.is_some() {
                return Ok(s);
            }
        }
        if let Some(c) = started.as_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                return Err(format!(
                    "the server it started exited ({status}){}",
                    log_tail(ctx)
                ));
            }
        }
        if t0.elapsed() >= READY_WITHIN {
            return Err(format!(
                "no server became ready within {}s{}",
                READY_WITHIN.as_secs(),
                log_tail(ctx)
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn log_tail(ctx: &Context) -> String {
    match ctx
        .server_log
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok())
    {
        Some(t) if !t.trim().is_empty() => format!(": {}", tail(&t, 3)),
        _ => String::new(),
    }
}
