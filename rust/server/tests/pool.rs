//! Issue 15 through Execute: a subtree every action reads (sdk/) becomes hot, the server's
//! janitor builds a ready copy, the next action takes it (`pool_hits` in its metadata), and
//! after the action the copy goes back when untouched and is discarded when the action (as
//! root, ignoring 0o555) added a file to it: no later action sees that file.

mod common;

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::Digest;
use common::*;
use prost::Message;
use std::path::Path;
use std::time::Duration;

/// sdk/include/ with 20 headers, as a Directory tree; returns the root digest.
async fn sdk_root(c: &mut Clients) -> Digest {
    let blobs: Vec<Vec<u8>> = (0..20)
        .map(|i| format!("header {i}\n").into_bytes())
        .collect();
    let ds = c.upload(&blobs).await;
    let include = pb::Directory {
        files: (0..20)
            .map(|i| file(&format!("f{i:02}.h"), ds[i], false))
            .collect(),
        ..Default::default()
    };
    let inc = c.upload(&[encode(&include)]).await[0];
    let sdk = pb::Directory {
        directories: vec![dir("include", inc)],
        ..Default::default()
    };
    let sd = c.upload(&[encode(&sdk)]).await[0];
    let root = pb::Directory {
        directories: vec![dir("sdk", sd)],
        ..Default::default()
    };
    c.upload(&[encode(&root)]).await[0]
}

fn pool_hits(resp: &pb::ExecuteResponse) -> f64 {
    let m = resp
        .result
        .as_ref()
        .unwrap()
        .execution_metadata
        .as_ref()
        .unwrap();
    let st = prost_types::Struct::decode(m.auxiliary_metadata[0].value.as_slice()).unwrap();
    match st.fields["pool_hits"].kind {
        Some(prost_types::value::Kind::NumberValue(n)) => n,
        ref k => panic!("pool_hits is {k:?}"),
    }
}

/// Ready copies in `<cache>/pool/` (not ones being built).
fn ready(cache: &Path) -> usize {
    std::fs::read_dir(cache.join("pool"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .count()
        })
        .unwrap_or(0)
}

async fn wait_ready(cache: &Path) {
    let t0 = std::time::Instant::now();
    while ready(cache) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the janitor built no pooled copy"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A fresh copy is lent once it is older than a clock tick.
    tokio::time::sleep(Duration::from_millis(150)).await;
}

/// Run `script` over the root (never cached); returns the response and its stdout.
async fn run(c: &mut Clients, root: Digest, script: &str) -> (pb::ExecuteResponse, String) {
    let mut cmd = sh(script);
    cmd.output_paths = vec!["out.txt".into()];
    let a = upload_action(c, &cmd, root, Some(30), true).await;
    let (_, resp) = c.execute(a, true).await;
    let r = resp.result.as_ref().expect("a result");
    assert_eq!(r.exit_code, 0, "{script}: {resp:?}");
    let out = r
        .output_files
        .iter()
        .find(|f| f.path == "out.txt")
        .expect("out.txt");
    let d = Digest::from_proto(out.digest.as_ref().unwrap()).unwrap();
    (resp.clone(), String::from_utf8(c.read(&d).await).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_copy_is_recycled_untouched_and_discarded_when_an_action_wrote_in_it() {
    let mut s = TestServer::start().await;
    let cache = s.cache();
    let mut c = s.clients().await;
    let root = sdk_root(&mut c).await;
    let list = "ls sdk/include > out.txt; stat -c %i sdk >> out.txt";
    for i in 0..2 {
        let (resp, _) = run(&mut c, root, &format!("echo {i} >/dev/null; {list}")).await;
        assert_eq!(pool_hits(&resp), 0.0);
    }
    wait_ready(&cache).await;

    // Untouched: taken, returned, and the same copy lent again.
    let (resp, first) = run(&mut c, root, &format!("echo a >/dev/null; {list}")).await;
    assert_eq!(pool_hits(&resp), 1.0, "the ready copy was not taken");
    s.idle().await;
    wait_ready(&cache).await;
    let (resp, again) = run(&mut c, root, &format!("echo b >/dev/null; {list}")).await;
    assert_eq!(pool_hits(&resp), 1.0);
    assert_eq!(first, again, "the untouched copy did not come back");
    s.idle().await;
    wait_ready(&cache).await;

    // Written into (as root, through 0o555): discarded, never lent again.
    let (resp, _) = run(&mut c, root, "echo evil > sdk/include/zz.h; echo > out.txt").await;
    assert_eq!(pool_hits(&resp), 1.0);
    s.idle().await;
    for i in 0..3 {
        let (_, seen) = run(&mut c, root, &format!("echo c{i} >/dev/null; {list}")).await;
        assert!(
            !seen.contains("zz.h"),
            "a later action saw the tampered copy: {seen}"
        );
        s.idle().await;
        wait_ready(&cache).await;
    }
    s.stop().await;
    let counters = clonestage_engine::stats::load(&cache).unwrap();
    // The one written copy, found by its directory's mtime (checked before its listing).
    assert_eq!(counters.pool_discarded, 1, "{counters:?}");
    assert!(
        counters.pool_recycled >= 1 && counters.pool_built >= 1,
        "{counters:?}"
    );
}

/// Issue 23 item 5: an action running as root mounts a tmpfs over the pooled subtree it was
/// lent and writes into it. Its work dir was left behind (rmdir of the mount point: EBUSY),
/// mount and all. Now the mount is detached before the copy is proven and the dir removed: the
/// work dir goes, no mount is left in the cache, and no later action sees the tmpfs's file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tmpfs_an_action_mounts_over_its_pooled_copy_is_detached_and_its_work_dir_removed() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: mounting a tmpfs needs root");
        return;
    }
    let mut s = TestServer::start().await;
    let cache = s.cache();
    let mut c = s.clients().await;
    let root = sdk_root(&mut c).await;
    let list = "ls sdk/include > out.txt";
    for i in 0..2 {
        run(&mut c, root, &format!("echo {i} >/dev/null; {list}")).await;
    }
    wait_ready(&cache).await;
    let (resp, _) = run(
        &mut c,
        root,
        "mount -t tmpfs cs-pool-test sdk/include && echo evil > sdk/include/zz.h && echo > out.txt",
    )
    .await;
    assert_eq!(pool_hits(&resp), 1.0, "the ready copy was not taken");
    s.idle().await;
    let left = work_entries_after_cleanup(&cache).await;
    let mounts = clonestage_engine::platform::mounts::under(&cache).unwrap();
    for m in &mounts {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(m)
            .status();
    }
    assert!(left.is_empty(), "work dirs left: {left:?}");
    assert!(mounts.is_empty(), "mounts left in the cache: {mounts:?}");
    for i in 0..2 {
        let (_, seen) = run(&mut c, root, &format!("echo d{i} >/dev/null; {list}")).await;
        assert!(seen.contains("f00.h") && !seen.contains("zz.h"), "{seen}");
        s.idle().await;
    }
    s.stop().await;
}

/// `--pool-copies 0`: no copy is ever built or taken, however hot a subtree is, and a pool an
/// earlier server left is emptied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_copies_zero_turns_the_pool_off() {
    let dir = tempfile::tempdir().unwrap();
    let stale = dir.path().join("cache/pool/left-by-an-earlier-server");
    std::fs::create_dir_all(&stale).unwrap();
    let mut opts = TestServer::opts(dir.path(), 2);
    opts.pool_copies = 0;
    let h = clonestage_server::start(opts).await.expect("server starts");
    let mut s = TestServer {
        dir,
        handle: Some(h),
    };
    assert!(!stale.exists(), "the stale pool was not emptied");
    let cache = s.cache();
    let mut c = s.clients().await;
    let root = sdk_root(&mut c).await;
    for i in 0..4 {
        let (resp, _) = run(
            &mut c,
            root,
            &format!("echo {i} >/dev/null; echo > out.txt"),
        )
        .await;
        assert_eq!(pool_hits(&resp), 0.0);
        s.idle().await;
        // Hot after two sightings: with a pool, the janitor builds a copy within this.
        tokio::time::sleep(Duration::from_millis(if i == 1 { 1500 } else { 100 })).await;
        assert_eq!(ready(&cache), 0, "a copy was built");
    }
    s.stop().await;
    let counters = clonestage_engine::stats::load(&cache).unwrap();
    assert_eq!(counters.pool_built + counters.pool_hits, 0, "{counters:?}");
}
