//! `clonestage address`: the lines users without the launcher paste into ~/.bazelrc.
//! `--for-bazel VERSION` gives Bazel 6+ the unix socket and 4.x/5.x a `try-import` of the
//! server's private TCP rc file (Bazel 4.2.3 exits 37 without a message on `unix:`), then the
//! settings only that release has, as `build:clonestage` lines (the launcher's table); the
//! bare form, which prints the unix executor, says on stderr that it is for Bazel 6+.

mod common;

use common::{cs, serve, stderr, stdout};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// A ready server that is stopped when the test ends, with its TCP side up too (the rc file
/// `--for-bazel 4.x` names).
fn serve_guarded(cache: &Path) -> Server {
    let server = Server(serve(cache));
    let t0 = Instant::now();
    while !cs(cache, &["address", "--tcp"]).status.success() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "TCP side never ready"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

#[test]
fn for_bazel_prints_the_rc_line_that_version_can_use() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let none = cs(&cache, &["address", "--for-bazel", "7.4.1"]);
    assert_eq!(none.status.code(), Some(3), "{none:?}");
    assert!(
        stderr(&none).contains("no clonestage server is running"),
        "{none:?}"
    );

    let _server = serve_guarded(&cache);
    let real = cache.canonicalize().unwrap();
    let sock = real.join("server/clonestage.sock");
    let rc = real.join("server/tcp.bazelrc");

    let compression_5 = "build:clonestage --noexperimental_remote_cache_compression";
    // Each version-specific line names the releases that have its flag.
    let compression_5_line =
        "build:clonestage --noexperimental_remote_cache_compression  # Bazel 5.0.0 to 6.x";
    let compression_7 = "build:clonestage --noremote_cache_compression";
    let additive = "build:clonestage --incompatible_modify_execution_info_additive";
    let no_remote = "build:clonestage --modify_execution_info=SwiftCompile|";
    let cases: &[(&str, &[&str], &[&str])] = &[
        ("6", &[compression_5], &[compression_7, additive, no_remote]),
        (
            "7.1.0",
            &[compression_7],
            &[compression_5, additive, no_remote],
        ),
        (
            "7.4.1",
            &[compression_7, additive, no_remote],
            &[compression_5],
        ),
        ("bazel 8.0.0", &[compression_7, additive, no_remote], &[]),
        ("release 9.0.0rc1", &[compression_7, no_remote], &[additive]),
    ];
    for (v, has, lacks) in cases {
        let o = cs(&cache, &["address", "--for-bazel", v]);
        assert_eq!(o.status.code(), Some(0), "{v}: {o:?}");
        let out = stdout(&o);
        let mut lines = out.lines();
        assert_eq!(
            lines.next().unwrap(),
            format!("build --remote_executor=unix:{}", sock.display()),
            "{v}"
        );
        let rest: Vec<&str> = lines.collect();
        assert_eq!(rest.len(), has.len(), "{v}: {out}");
        for h in *has {
            assert!(
                rest.iter().any(|l| l.starts_with(h)),
                "{v} lacks {h}: {out}"
            );
        }
        for l in *lacks {
            assert!(!rest.iter().any(|r| r.starts_with(l)), "{v} has {l}: {out}");
        }
    }
    for (v, extra) in [
        ("4.2.3", None),
        ("bazel 5.4.1", Some(compression_5_line)),
        ("5", Some(compression_5_line)),
    ] {
        let o = cs(&cache, &["address", "--for-bazel", v]);
        assert_eq!(o.status.code(), Some(0), "{v}: {o:?}");
        let want = format!("try-import {}\n", rc.display())
            + &extra.map(|e| format!("{e}\n")).unwrap_or_default();
        assert_eq!(stdout(&o), want, "{v}");
    }
    // The line names a file that holds the executor and the token, readable by its owner only.
    let text = std::fs::read_to_string(&rc).unwrap();
    assert!(
        text.contains("--remote_executor=grpc://127.0.0.1:"),
        "{text}"
    );
    assert!(text.contains("x-clonestage-token="), "{text}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&rc).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // A development build says no version: refuse, naming what to pass.
    let bad = cs(&cache, &["address", "--for-bazel", "bazel no_version"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(stdout(&bad).is_empty(), "{bad:?}");
    assert!(stderr(&bad).contains("--for-bazel 7.4.1"), "{bad:?}");

    // --for-bazel takes the place of --tcp and --bazelrc, never both.
    let both = cs(&cache, &["address", "--tcp", "--for-bazel", "7"]);
    assert_eq!(both.status.code(), Some(2), "{both:?}");
}

#[test]
fn the_bare_unix_line_says_it_is_for_bazel_6_and_later() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let _server = serve_guarded(&cache);
    let o = cs(&cache, &["address"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    // stdout stays the one flag the launcher reads.
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.starts_with("--remote_executor=unix:/"), "{out}");
    assert!(!out.starts_with("--remote_executor=unix://"), "{out}");
    let err = stderr(&o);
    assert!(err.contains("Bazel 6+"), "{err}");
    assert!(err.contains("--for-bazel VERSION"), "{err}");
    // The TCP forms are for scripts: no note.
    let tcp = cs(&cache, &["address", "--tcp"]);
    assert!(stderr(&tcp).is_empty(), "{tcp:?}");
}
