//! `clonestage serve --shared-dir` and `CLONESTAGE_SHARED_DIRS` (issue 24): bad patterns are
//! refused before anything starts, naming the pattern; the variable reaches the server (the
//! launcher passes its environment to the server it starts), and `none` turns sharing off.

mod common;

use common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn serve_with(cache: &std::path::Path, args: &[&str], env: Option<&str>) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_clonestage"));
    c.arg("--cache").arg(cache).arg("serve").args(args);
    c.env_remove("CLONESTAGE_SHARED_DIRS");
    if let Some(v) = env {
        c.env("CLONESTAGE_SHARED_DIRS", v);
    }
    c.stdin(Stdio::null()).output().unwrap()
}

#[test]
fn bad_patterns_are_refused_before_the_server_starts() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("c");
    for (args, env, want) in [
        (
            &["--shared-dir", "/abs/_swift_module_cache"][..],
            None,
            "/abs/_swift_module_cache",
        ),
        (
            &["--shared-dir", "bazel-out/*"][..],
            None,
            "the last component must be a name",
        ),
        (&["--shared-dir", "a/../b"][..], None, "a/../b"),
        (
            &[][..],
            Some("none,bazel-out/*/bin/x"),
            "cannot be combined",
        ),
    ] {
        let o = serve_with(&cache, args, env);
        assert!(!o.status.success(), "{args:?} {env:?} started");
        let e = stderr(&o);
        assert!(e.contains(want), "{args:?} {env:?}: {e}");
        assert!(
            !cache.join("server/tcp-port").exists(),
            "a server got ready"
        );
    }
}

/// The server's log once it is ready, then stopped.
fn log_of_ready_server(env: &str) -> String {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("c");
    let log = t.path().join("serve.log");
    let mut server = Command::new(env!("CARGO_BIN_EXE_clonestage"))
        .arg("--cache")
        .arg(&cache)
        .args(["serve", "--spawn", "/bin/true", "--jobs", "1"])
        .env("CLONESTAGE_PRESPAWN", "0")
        .env("CLONESTAGE_SHARED_DIRS", env)
        .env("NO_COLOR", "1")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !cs(&cache, &["address"]).status.success() {
        assert!(t0.elapsed() < Duration::from_secs(30), "server never ready");
        assert!(server.try_wait().unwrap().is_none(), "serve ended early");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(cs(&cache, &["stop"]).status.success());
    server.wait().unwrap();
    let shared_made = cache.join("shared").is_dir();
    format!(
        "{}shared dir made: {shared_made}",
        std::fs::read_to_string(&log).unwrap()
    )
}

#[test]
fn the_variable_reaches_the_server_and_none_turns_sharing_off() {
    let on = log_of_ready_server("bazel-out/*/bin/_swift_module_cache,x/*/y");
    assert!(
        on.contains("patterns=bazel-out/*/bin/_swift_module_cache,x/*/y"),
        "{on}"
    );
    assert!(on.ends_with("shared dir made: true"), "{on}");
    let off = log_of_ready_server("none");
    assert!(off.contains("no shared cache directories"), "{off}");
    assert!(off.ends_with("shared dir made: false"), "{off}");
}
