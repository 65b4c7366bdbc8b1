//! `bazel`: a tiny workspace in the doctor's scratch directory (two genrules, the second
//! reading the first's output, a fresh token in both so nothing comes from a cache), built with
//! the user's Bazel through the server the server check found or started, with its own output
//! base (shut down and removed after). Passes when both actions ran remote, from Bazel's own
//! process summary (`INFO: N processes: ... K remote`). A failure names what was at fault:
//! the Bazel binary or version, the executor flag and the rc file it came from, or the spawn
//! strategy when actions ran locally. WORKSPACE for Bazel < 7, MODULE.bazel too for 7+
//! (Bazel 9 reads only that).

use super::report::Outcome;
use super::{exists, tail, Context};
use std::path::Path;
use std::time::{Duration, Instant};

/// The whole build may take this long (a cold Bazel server on a busy machine included).
const BUILD_WITHIN: Duration = Duration::from_secs(600);

pub fn check(ctx: &mut Context) -> Outcome {
    let Some(bazel) = ctx.bazel.clone() else {
        return Outcome::skip(
            "no bazel on PATH (pass --bazel PATH to check a build through clonestage)",
        );
    };
    if !exists(&bazel) {
        return Outcome::fail(format!("no Bazel at {} (--bazel)", bazel.display()));
    }
    let Some(v) = ctx.bazel_version() else {
        return Outcome::fail(format!(
            "`{} --version` failed: is it a Bazel binary (or bazelisk with a reachable release)?",
            bazel.display()
        ));
    };
    let version = v.text;
    let Some(server) = ctx.server.as_ref() else {
        return Outcome::skip(format!(
            "{version} found, but no server to build through (see server)"
        ));
    };
    let (socket, port, tcp_rc) = (
        server.socket.clone(),
        server.tcp_port,
        server.tcp_bazelrc.clone(),
    );
    let dir = match ctx.scratch("bazel") {
        Ok(d) => d,
        Err(e) => return Outcome::fail(format!("{e:#}")),
    };
    let ws = dir.join("ws");
    let output_base = dir.join("ob");
    // Bazel 6+ takes the unix socket; 4.x/5.x, and a Bazel that cannot say which it is, the
    // TCP rc file with the token (every Bazel takes that).
    let (rc, executor) = if v.major.is_some_and(|m| m >= 6) {
        let rc = dir.join("unix.bazelrc");
        let flag = format!("--remote_executor=unix://{}", socket.display());
        if let Err(e) = std::fs::write(&rc, format!("build {flag}\n")) {
            return Outcome::fail(format!("write {}: {e}", rc.display()));
        }
        (rc, flag)
    } else {
        (
            tcp_rc,
            format!("--remote_executor=grpc://127.0.0.1:{port} with the token header"),
        )
    };
    if let Err(e) = workspace(&ws, v.major.unwrap_or(0)) {
        return Outcome::fail(format!(
            "cannot write the trial workspace {}: {e}",
            ws.display()
        ));
    }
    let t = Instant::now();
    let built = run_bazel(
        std::process::Command::new(&bazel)
            .arg(format!("--bazelrc={}", rc.display()))
            .arg(format!("--output_base={}", output_base.display()))
            .args([
                "build",
                "--spawn_strategy=remote",
                "--noremote_local_fallback",
            ])
            .args(["--color=no", "--curses=no", "--jobs=2", "//:all"])
            .current_dir(&ws),
    );
    let took = t.elapsed();
    let _ = run_bazel(
        std::process::Command::new(&bazel)
            .arg(format!("--output_base={}", output_base.display()))
            .arg("shutdown")
            .current_dir(&ws),
    );
    let how = format!("{version} with {executor} (from {})", rc.display());
    let (ok, log) = match built {
        Ok(r) => r,
        Err(e) => return Outcome::fail(format!("{how}: {e}")),
    };
    let remote = remote_count(&log);
    if !ok {
        return Outcome::fail(format!("{how} failed: {}", errors(&log)));
    }
    match remote {
        Some(n) if n >= 2 => Outcome::pass(format!(
            "{how}: {n} actions ran remote through clonestage in {:.1} s",
            took.as_secs_f64()
        )),
        _ => Outcome::fail(format!(
            "{how}: the build passed but not every action ran remote ({}); --spawn_strategy=remote was given, so a no-remote tag or a strategy flag in an rc file kept them local",
            summary(&log).unwrap_or("no process summary")
        )),
    }
}

/// Two genrules with this run's token, for Bazel `major`.
fn workspace(ws: &Path, major: u32) -> std::io::Result<()> {
    std::fs::create_dir_all(ws)?;
    let token = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    std::fs::write(
        ws.join("WORKSPACE"),
        "workspace(name = \"clonestage_doctor\")\n",
    )?;
    if major >= 7 {
        std::fs::write(
            ws.join("MODULE.bazel"),
            "module(name = \"clonestage_doctor\")\n",
        )?;
    }
    std::fs::write(
        ws.join("BUILD"),
        format!(
            "genrule(\n    name = \"a\",\n    outs = [\"a.txt\"],\n    cmd = \"echo doctor {token} > $@\",\n)\n\n\
             genrule(\n    name = \"b\",\n    srcs = [\":a\"],\n    outs = [\"b.txt\"],\n    cmd = \"cat $< > $@ && echo b >> $@\",\n)\n"
        ),
    )
}

/// Run a Bazel command to its end (bounded by `BUILD_WITHIN`): (success, stderr and stdout).
fn run_bazel(cmd: &mut std::process::Command) -> Result<(bool, String), String> {
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    let read = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let err = read(Box::new(child.stderr.take().expect("piped")));
    let out = read(Box::new(child.stdout.take().expect("piped")));
    let t = Instant::now();
    let status = loop {
        if let Ok(Some(s)) = child.try_wait() {
            break s;
        }
        if t.elapsed() > BUILD_WITHIN {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("gave up after {}s", BUILD_WITHIN.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut log = err.join().unwrap_or_default();
    log.push_str(&out.join().unwrap_or_default());
    Ok((status.success(), log))
}

/// Bazel's process summary line, e.g. "INFO: 3 processes: 1 internal, 2 remote.".
fn summary(log: &str) -> Option<&str> {
    log.lines()
        .rev()
        .find(|l| l.contains(" processes: ") || l.contains(" process: "))
}

/// How many actions Bazel says ran remote.
fn remote_count(log: &str) -> Option<u64> {
    let line = summary(log)?;
    let after = line.split_once(':').map(|x| x.1)?;
    let list = after.split_once(':').map(|x| x.1).unwrap_or(after);
    list.split(',').find_map(|part| {
        let mut w = part.split_whitespace();
        let n = w.next()?.parse().ok()?;
        (w.next()?.trim_end_matches('.') == "remote").then_some(n)
    })
}

/// The lines that say what went wrong.
fn errors(log: &str) -> String {
    let errs: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("ERROR:") || l.contains("FATAL"))
        .collect();
    if errs.is_empty() {
        tail(log, 4)
    } else {
        tail(&errs.join("\n"), 3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_counts_from_the_summaries_bazel_prints() {
        let log = "INFO: Analyzed 2 targets\nINFO: 3 processes: 1 internal, 2 remote.\nINFO: Build completed successfully, 3 total actions\n";
        assert_eq!(remote_count(log), Some(2));
        assert_eq!(
            remote_count("INFO: 5 processes: 2 internal, 1 local, 2 remote.\n"),
            Some(2)
        );
        assert_eq!(remote_count("INFO: 2 processes: 2 linux-sandbox.\n"), None);
        assert_eq!(remote_count("INFO: 1 process: 1 internal.\n"), None);
        assert_eq!(remote_count("no summary"), None);
    }
}
