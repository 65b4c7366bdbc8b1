//! Hostile trees and requests through the real server (issue 10, findings 1, 4, 5 and 6):
//! trees nested thousands of levels deep (which once overflowed the serving thread's stack and
//! aborted the whole process, so they live in a test binary of their own), a leftover work dir
//! too deep for any path, trees whose expanded size doubles per level, symlink chains that
//! leave the root through the tree's own links, a working directory through a symlink, absurd
//! timeouts, output paths the filesystem cannot hold, and output lists REAPI forbids (a path
//! twice, as file and directory, or inside another output). Each is refused with
//! INVALID_ARGUMENT before staging, and nothing is left in the work dir.

mod common;

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::Digest;
use common::*;
use std::time::{Duration, Instant};
use tonic::Code;

/// Upload a chain of `depth` Directories (`a/a/a/...`), innermost empty; returns the root.
async fn deep_chain(c: &mut Clients, depth: usize) -> Digest {
    let mut blobs = Vec::with_capacity(depth);
    let mut prev = Digest::EMPTY;
    for _ in 0..depth {
        let d = pb::Directory {
            directories: vec![dir("a", prev)],
            ..Default::default()
        };
        let b = encode(&d);
        prev = Digest::of_bytes(&b);
        blobs.push(b);
    }
    for chunk in blobs.chunks(500) {
        c.upload(chunk).await;
    }
    prev
}

fn status(resp: &pb::ExecuteResponse) -> (i32, String) {
    let st = resp.status.clone().unwrap_or_default();
    (st.code, st.message)
}

async fn refused(c: &mut Clients, cmd: &pb::Command, root: Digest, want: &str) {
    refused_with_timeout(c, cmd, root, None, want).await
}

async fn refused_with_timeout(
    c: &mut Clients,
    cmd: &pb::Command,
    root: Digest,
    timeout_s: Option<i64>,
    want: &str,
) {
    let action = upload_action(c, cmd, root, timeout_s, false).await;
    let (_, resp) = c.execute(action, true).await;
    let (code, msg) = status(&resp);
    assert_eq!(code, Code::InvalidArgument as i32, "{want}: {msg}");
    assert!(msg.contains(want), "message must say '{want}': {msg}");
    assert!(resp.result.is_none(), "{want}: a result was returned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trees_thousands_of_levels_deep_are_refused_not_a_crash() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    for depth in [5_000, 10_000] {
        let root = deep_chain(&mut c, depth).await;
        refused(&mut c, &sh("true"), root, "--max-tree-depth").await;
    }
    // The server is still there and still runs actions.
    let action = upload_action(&mut c, &sh("true"), Digest::EMPTY, None, false).await;
    let (_, resp) = c.execute(action, true).await;
    assert_eq!(status(&resp).0, 0, "{:?}", resp.status);
    s.idle().await;
    assert!(work_entries_after_cleanup(&s.cache()).await.is_empty());
    s.stop().await;
}

/// Make `base/a/a/.../a` `depth` levels deep through directory fds (no path is short enough),
/// every other level read-only, with a file and a symlink to `outside` at the bottom.
fn make_deep_dir(base: &std::path::Path, depth: usize, outside: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(base.as_os_str().as_bytes()).unwrap();
    let mut fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    assert!(fd >= 0);
    let a = c"a";
    for i in 0..depth {
        assert_eq!(
            unsafe { libc::mkdirat(fd, a.as_ptr(), 0o755) },
            0,
            "mkdir {i}"
        );
        let next = unsafe { libc::openat(fd, a.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
        assert!(next >= 0);
        if i % 2 == 1 {
            unsafe { libc::fchmod(fd, 0o555) };
        }
        unsafe { libc::close(fd) };
        fd = next;
    }
    let f = unsafe { libc::openat(fd, c"f".as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o444) };
    assert!(f >= 0);
    unsafe { libc::close(f) };
    let t = std::ffi::CString::new(outside.as_os_str().as_bytes()).unwrap();
    assert_eq!(
        unsafe { libc::symlinkat(t.as_ptr(), fd, c"out".as_ptr()) },
        0
    );
    unsafe { libc::fchmod(fd, 0o555) };
    unsafe { libc::close(fd) };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leftover_work_dir_5000_levels_deep_is_swept_at_start() {
    let dir = tempfile::Builder::new()
        .prefix("cs-srv")
        .tempdir_in("/tmp")
        .unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("keep"), b"k").unwrap();
    let left = dir.path().join("cache/work/1-0/root");
    std::fs::create_dir_all(&left).unwrap();
    make_deep_dir(&left, 5_000, &outside);
    let h = clonestage_server::start(TestServer::opts(dir.path(), 1))
        .await
        .expect("server starts");
    let s = TestServer {
        dir,
        handle: Some(h),
    };
    assert!(
        used_work_entries(&s.cache()).is_empty(),
        "left over: {:?}",
        used_work_entries(&s.cache())
    );
    assert!(
        s.dir.path().join("outside/keep").exists(),
        "a symlink was followed"
    );
    let mut s = s;
    s.stop().await;
}

/// 40 Directories, each listing the previous one twice: 2^41 entries once expanded.
async fn doubling_tree(c: &mut Clients, levels: usize, file: Digest) -> Digest {
    let mut prev = pb::Directory {
        files: vec![common::file("f", file, false)],
        ..Default::default()
    };
    let mut d = c.upload(&[encode(&prev)]).await[0];
    for _ in 0..levels {
        prev = pb::Directory {
            directories: vec![dir("a", d), dir("b", d)],
            ..Default::default()
        };
        d = c.upload(&[encode(&prev)]).await[0];
    }
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_that_doubles_per_level_is_refused_at_once() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let f = c.upload(&[b"x".to_vec()]).await[0];
    let root = doubling_tree(&mut c, 40, f).await;
    let t0 = Instant::now();
    refused(&mut c, &sh("true"), root, "--max-tree-entries").await;
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t0.elapsed()
    );
    s.idle().await;
    assert!(work_entries_after_cleanup(&s.cache()).await.is_empty());
    s.stop().await;
}

fn link(name: &str, target: &str) -> pb::SymlinkNode {
    pb::SymlinkNode {
        name: name.into(),
        target: target.into(),
        node_properties: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_chain_through_the_trees_own_links_cannot_leave_the_root() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let sub = pb::Directory {
        symlinks: vec![link("up", "..")],
        ..Default::default()
    };
    let sub_d = c.upload(&[encode(&sub)]).await[0];
    // Lexically x never leaves the root; through sub/up it resolves to the work dir's parent.
    let root = pb::Directory {
        directories: vec![dir("sub", sub_d)],
        symlinks: vec![link("x", "sub/up/sub/up/../../../MARK")],
        ..Default::default()
    };
    let root_d = c.upload(&[encode(&root)]).await[0];
    let cmd = sh("echo pwned > x");
    refused(&mut c, &cmd, root_d, "leaves the root").await;
    assert!(!s.cache().join("work/MARK").exists());
    assert!(!s.cache().join("MARK").exists());
    s.idle().await;
    assert!(work_entries_after_cleanup(&s.cache()).await.is_empty());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_working_directory_through_a_symlink_is_resolved_within_the_tree() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let input = c.upload(&[b"in\n".to_vec()]).await[0];
    let real = pb::Directory {
        files: vec![file("in.txt", input, false)],
        ..Default::default()
    };
    let real_d = c.upload(&[encode(&real)]).await[0];
    let root = pb::Directory {
        directories: vec![dir("real", real_d)],
        symlinks: vec![link("wd", "real")],
        ..Default::default()
    };
    let root_d = c.upload(&[encode(&root)]).await[0];
    let mut cmd = sh("set -e; cat in.txt > out.txt; pwd -P > where");
    cmd.working_directory = "wd".into();
    cmd.output_paths = vec!["out.txt".into(), "where".into()];
    let action = upload_action(&mut c, &cmd, root_d, None, false).await;
    let (_, resp) = c.execute(action, true).await;
    assert_eq!(status(&resp).0, 0, "{:?}", resp.status);
    let r = resp.result.unwrap();
    assert_eq!(r.exit_code, 0);
    let got: Vec<&str> = r.output_files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(got, vec!["out.txt", "where"]);
    let out = c
        .read_proto(r.output_files[0].digest.as_ref().unwrap())
        .await;
    assert_eq!(out, b"in\n");
    let wd = c
        .read_proto(r.output_files[1].digest.as_ref().unwrap())
        .await;
    let wd = String::from_utf8(wd).unwrap();
    assert!(wd.trim_end().ends_with("/root/real"), "cwd {wd}");

    // A working directory that lies outside the tree through a link is refused.
    let up = pb::Directory {
        symlinks: vec![link("up", "..")],
        ..Default::default()
    };
    let up_d = c.upload(&[encode(&up)]).await[0];
    let root = pb::Directory {
        directories: vec![dir("sub", up_d)],
        ..Default::default()
    };
    let root_d = c.upload(&[encode(&root)]).await[0];
    let mut cmd = sh("touch pwned");
    cmd.working_directory = "sub/up/sub/up/sub/up".into();
    let action = upload_action(&mut c, &cmd, root_d, None, false).await;
    let (_, resp) = c.execute(action, true).await;
    // sub/up/... stays in the root: accepted, and run in the root itself.
    assert_eq!(status(&resp).0, 0, "{:?}", resp.status);
    s.idle().await;
    assert!(work_entries_after_cleanup(&s.cache()).await.is_empty());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_timeouts_and_unholdable_output_paths_are_refused_before_staging() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    refused_with_timeout(
        &mut c,
        &sh("true"),
        Digest::EMPTY,
        Some(2_000_000_000),
        "Action.timeout",
    )
    .await;
    refused_with_timeout(
        &mut c,
        &sh("true"),
        Digest::EMPTY,
        Some(i64::MAX),
        "Action.timeout",
    )
    .await;
    let long_name = "n".repeat(300);
    let mut cmd = sh("true");
    cmd.output_paths = vec![format!("out/{long_name}")];
    refused(&mut c, &cmd, Digest::EMPTY, "NAME_MAX").await;
    let long_path = vec!["d".repeat(200); 25].join("/");
    let mut cmd = sh("true");
    cmd.output_paths = vec![long_path];
    refused(&mut c, &cmd, Digest::EMPTY, "PATH_MAX").await;
    #[allow(deprecated)]
    {
        let mut cmd = sh("true");
        cmd.output_files = vec![format!("a/{long_name}")];
        refused(&mut c, &cmd, Digest::EMPTY, "NAME_MAX").await;
    }
    // Nothing was staged for any of them.
    let counters = clonestage_engine::stats::load(&s.cache()).unwrap_or_default();
    assert_eq!(
        counters.stages + counters.stage_failures,
        0,
        "an action was staged"
    );
    s.idle().await;
    assert!(work_entries_after_cleanup(&s.cache()).await.is_empty());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(deprecated)]
async fn malformed_output_lists_are_refused_before_staging() {
    // Issue 23, item 4: REAPI forbids clients to send these (remote_execution.proto,
    // Command.output_files / output_directories / output_paths); run as if fine, a path given
    // as both file and directory produced a result listing the directory twice.
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let strs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // (output_files, output_directories, output_paths, what the message must quote)
    type Case<'a> = (&'a [&'a str], &'a [&'a str], &'a [&'a str], &'a str);
    let cases: [Case; 8] = [
        (&["a", "a"], &[], &[], "An output file cannot be duplicated"),
        (
            &["a"],
            &["a"],
            &[],
            "same path as any of the listed output directories",
        ),
        (
            &[],
            &["d", "d"],
            &[],
            "An output directory cannot be duplicated",
        ),
        (&["a", "a/b"], &[], &[], "parent of another output file"),
        (&["d/f"], &["d"], &[], "inside output 'd'"),
        (&[], &["d", "d/e"], &[], "inside output 'd'"),
        (&[], &[], &["p", "p"], "MUST be deduplicated"),
        // Bazel 7-9 send the deprecated lists beside output_paths.
        (&["p"], &[], &["p", "p"], "MUST be deduplicated"),
    ];
    for (files, dirs, paths, want) in cases {
        let mut cmd = sh("mkdir -p d/e p a; echo x > a/b");
        cmd.output_files = strs(files);
        cmd.output_directories = strs(dirs);
        cmd.output_paths = strs(paths);
        refused(&mut c, &cmd, Digest::EMPTY, want).await;
        refused(&mut c, &cmd, Digest::EMPTY, "remote_execution.proto").await;
    }
    let counters = clonestage_engine::stats::load(&s.cache()).unwrap_or_default();
    assert_eq!(
        counters.stages + counters.stage_failures,
        0,
        "an action was staged"
    );
    s.stop().await;
}
