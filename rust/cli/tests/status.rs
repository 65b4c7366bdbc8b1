//! `clonestage status` (up/down, pid, version, transport without the token, the cache's
//! filesystem and staging method with its reason), the server's version file, and
//! `address --same-version` (what tools/bazel restarts a server of another version by), and
//! the upstream's line and flags read from the environment (how the launcher passes them).

mod common;

use common::{cs, serve, stdout};
use std::path::{Path, PathBuf};
use std::process::Child;

fn stop(cache: &Path, mut server: Child) {
    assert_eq!(
        cs(cache, &["stop", "--timeout", "20"]).status.code(),
        Some(0)
    );
    server.wait().unwrap();
}

#[test]
fn status_says_down_then_up_with_pid_version_and_transport_but_never_the_token() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let missing = cs(&cache, &["status"]);
    assert_eq!(missing.status.code(), Some(3), "{missing:?}");
    assert!(
        stdout(&missing).contains("does not exist yet"),
        "{missing:?}"
    );

    let server = serve(&cache);
    let canon = cache.canonicalize().unwrap();
    assert_eq!(
        std::fs::read_to_string(canon.join("server/version")).unwrap(),
        format!("{}\n", env!("CARGO_PKG_VERSION")),
        "the server writes its version"
    );
    let up = cs(&cache, &["status"]);
    let text = stdout(&up);
    assert_eq!(up.status.code(), Some(0), "{up:?}");
    assert!(
        text.contains(&format!(
            "server: up, pid {}, clonestage {}",
            server.id(),
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
    let sock = canon.join("server/clonestage.sock");
    assert!(
        text.contains(&format!("unix socket: {}", sock.display())),
        "{text}"
    );
    let port = std::fs::read_to_string(canon.join("server/tcp-port")).unwrap();
    let port = port.lines().next().unwrap();
    assert!(text.contains(&format!("tcp: 127.0.0.1:{port} ")), "{text}");
    let token = std::fs::read_to_string(canon.join("server/token")).unwrap();
    assert!(!token.trim().is_empty());
    assert!(
        !text.contains(token.trim()),
        "the token must never be shown: {text}"
    );
    assert!(text.contains("staging: "), "{text}");
    assert!(text.contains("  why: on "), "{text}");
    assert!(text.contains("\nupstream: none\n"), "{text}");

    stop(&cache, server);
    let down = cs(&cache, &["status"]);
    assert_eq!(down.status.code(), Some(3), "{down:?}");
    assert!(stdout(&down).contains("server: down"), "{down:?}");
}

#[test]
fn address_same_version_refuses_a_server_of_another_version_naming_both() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let server = serve(&cache);
    let ok = cs(&cache, &["address", "--same-version"]);
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");
    assert!(
        stdout(&ok).starts_with("--remote_executor=unix:/"),
        "{ok:?}"
    );

    // As a server of another version would have written it.
    std::fs::write(cache.join("server/version"), "0.0.9\n").unwrap();
    let other = cs(&cache, &["address", "--same-version"]);
    assert_eq!(other.status.code(), Some(4), "{other:?}");
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(err.contains("is version 0.0.9"), "{err}");
    assert!(
        err.contains(&format!("this clonestage is {}", env!("CARGO_PKG_VERSION"))),
        "{err}"
    );
    assert!(
        other.stdout.is_empty(),
        "no flags for a server of another version"
    );
    assert!(
        cs(&cache, &["address"]).status.success(),
        "plain address is unchanged"
    );
    assert!(stdout(&cs(&cache, &["status"])).contains("clonestage 0.0.9"));
    stop(&cache, server);
}

/// On the loop mounts CI makes (`CLONESTAGE_TEST_{BTRFS,XFS,EXT4}`), status names the
/// filesystem and the method the engine probed there.
#[test]
fn status_names_the_filesystem_and_the_method_chosen_there() {
    let cases = [
        (
            "CLONESTAGE_TEST_BTRFS",
            "btrfs",
            "reflink per file, btrfs snapshots of whole subtrees",
        ),
        (
            "CLONESTAGE_TEST_XFS",
            "xfs",
            "reflink per file (copy-on-write",
        ),
        ("CLONESTAGE_TEST_EXT4", "ext4", "hardlink per file"),
    ];
    let mut ran = 0;
    for (var, fs, method) in cases {
        let Some(base) = std::env::var_os(var).map(PathBuf::from) else {
            continue;
        };
        ran += 1;
        let t = tempfile::tempdir_in(&base).unwrap();
        let cache = t.path().join("cache");
        std::fs::create_dir(&cache).unwrap();
        let o = cs(&cache, &["status"]);
        let text = stdout(&o);
        assert_eq!(o.status.code(), Some(3), "no server: {o:?}");
        assert!(text.contains(&format!("({fs})")), "{var}: {text}");
        assert!(
            text.contains(&format!("staging: {method}")),
            "{var}: {text}"
        );
        assert!(text.contains(&format!("why: on {fs} ")), "{var}: {text}");
    }
    if ran == 0 {
        eprintln!("no CLONESTAGE_TEST_{{BTRFS,XFS,EXT4}} set: filesystem cases not run");
    }
    // Whatever the temp dir's filesystem, the line is there.
    let t = tempfile::tempdir().unwrap();
    let o = cs(t.path(), &["status"]);
    assert!(stdout(&o).contains("staging: "), "{o:?}");
}

#[test]
fn status_names_the_upstream_given_by_environment_and_a_bad_url_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_clonestage"))
        .arg("--cache")
        .arg(&cache)
        .args(["serve", "--spawn", "/bin/true"])
        .env("CLONESTAGE_UPSTREAM", "https://team-cache:443")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");
    assert!(
        common::stderr(&bad).contains("\"https://team-cache:443\""),
        "{bad:?}"
    );

    // Nothing listens there: the server starts anyway (it dials lazily).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_clonestage"))
        .arg("--cache")
        .arg(&cache)
        .args(["serve", "--spawn", "/bin/true", "--jobs", "1"])
        .env("CLONESTAGE_PRESPAWN", "0")
        .env("CLONESTAGE_UPSTREAM", format!("grpc://127.0.0.1:{port}"))
        .env("CLONESTAGE_UPSTREAM_INSTANCE", "team/main")
        .env("CLONESTAGE_UPSTREAM_WRITE", "none")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while !cs(&cache, &["address"]).status.success() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "server never ready"
        );
        assert!(server.try_wait().unwrap().is_none(), "serve ended early");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let text = stdout(&cs(&cache, &["status"]));
    assert!(
        text.contains(&format!(
            "\nupstream: grpc://127.0.0.1:{port} (instance \"team/main\", write none)\n"
        )),
        "{text}"
    );
    let json = stdout(&cs(&cache, &["stats", "--json"]));
    assert!(json.contains("\"upstream_queue_len\":0"), "{json}");
    stop(&cache, server);
    assert!(stdout(&cs(&cache, &["status"])).contains("upstream: none"));
}
