//! A team's cache behind clonestage (issue 14), against the in-process fake upstream
//! (`common::fake_upstream`): two servers on two caches share results through it (B serves
//! A's result without running it, byte-identical, small blobs and a ByteStream-sized one);
//! Execute reads through too and fetches missing inputs from it; write modes (`none` never
//! writes, UpdateActionResult is not forwarded by default, `all` forwards it); the upload
//! queue survives a restart; auth headers (file, helper) reach the upstream and a loose auth
//! file is refused.
// Bazel 4 names outputs with output_files/output_directories.
#![allow(deprecated)]

mod common;

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::Digest;
use clonestage_server::server_counters;
use clonestage_server::{UpstreamOptions, WriteMode};
use common::fake_upstream::{down_url, FakeUpstream};
use common::*;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

/// Patient: a loaded CI machine can hold a first answer past a short timeout, which is a stall
/// that opens the breaker (`upstream_failures.rs` tests that).
fn opts(url: &str) -> UpstreamOptions {
    UpstreamOptions {
        timeout: Duration::from_secs(5),
        ..UpstreamOptions::new(url)
    }
}

/// The action every test builds: reads its input, writes a small file, a 2 MiB file (past
/// the batch size: ByteStream both ways) and a directory.
fn command() -> pb::Command {
    let mut cmd = sh(
        "mkdir -p out/dir && echo \"made from $(cat pkg/in.txt)\" > pkg/out.txt \
         && echo inner > out/dir/a.txt \
         && head -c 2097152 /dev/zero | tr '\\0' 'x' > out/big && echo ran",
    );
    cmd.output_files = vec!["pkg/out.txt".into(), "out/big".into()];
    cmd.output_directories = vec!["out/dir".into()];
    cmd
}

async fn action(c: &mut Clients, marker: &str) -> Digest {
    let root = one_file_root(c, marker.as_bytes()).await;
    upload_action(c, &command(), root, None, false).await
}

/// Every blob `r` names with its bytes, read through `c`.
async fn outputs(c: &mut Clients, r: &pb::ActionResult) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for f in &r.output_files {
        out.insert(
            f.path.clone(),
            c.read_proto(f.digest.as_ref().unwrap()).await,
        );
    }
    for d in &r.output_directories {
        out.insert(
            d.path.clone(),
            c.read_proto(d.tree_digest.as_ref().unwrap()).await,
        );
    }
    out.insert(
        "stdout".into(),
        c.read_proto(r.stdout_digest.as_ref().unwrap()).await,
    );
    out
}

async fn wait_for<F: Fn() -> bool>(what: &str, f: F) {
    let t0 = std::time::Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{what} never happened"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn counters(cache: &std::path::Path) -> BTreeMap<String, u64> {
    clonestage_engine::stats::load(cache).unwrap().extra
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b_serves_a_result_without_running_it() {
    let up = FakeUpstream::start().await;
    let mut a = TestServer::start_upstream(opts(&up.url)).await;
    let mut ca = a.clients().await;
    let act = action(&mut ca, "share").await;
    assert_eq!(
        ca.cached_result(act).await.unwrap_err().code(),
        tonic::Code::NotFound
    );
    let (_, resp) = ca.execute(act, false).await;
    let ra = resp.result.unwrap();
    assert_eq!(ra.exit_code, 0);
    assert!(!resp.cached_result);
    let want = outputs(&mut ca, &ra).await;
    wait_for("A's upload", || up.result(&act).is_some()).await;

    let mut b = TestServer::start_upstream(opts(&up.url)).await;
    let mut cb = b.clients().await;
    let rb = cb.cached_result(act).await.expect("B serves A's result");
    assert_eq!(outputs(&mut cb, &rb).await, want, "byte-identical outputs");
    // The tree's files came too: B can stage the output directory's file.
    let tree = <pb::Tree as prost::Message>::decode(want["out/dir"].as_slice()).unwrap();
    let inner = tree.root.unwrap().files[0].digest.clone().unwrap();
    assert_eq!(cb.read_proto(&inner).await, b"inner\n");
    // A second lookup is local.
    let reads = up.calls("GetActionResult");
    cb.cached_result(act).await.unwrap();
    assert_eq!(up.calls("GetActionResult"), reads);

    a.stop().await;
    b.stop().await;
    let ka = counters(&a.cache());
    assert_eq!(ka[server_counters::ACTIONS], 1);
    assert_eq!(ka[server_counters::UPSTREAM_RESULTS_UPLOADED], 1);
    assert!(ka[server_counters::UPSTREAM_BLOBS_UPLOADED] >= 4, "{ka:?}");
    assert!(
        ka[server_counters::UPSTREAM_BYTES_UPLOADED] >= 2 << 20,
        "{ka:?}"
    );
    assert_eq!(ka.get(server_counters::UPSTREAM_AC_MISSES), Some(&1));
    let kb = counters(&b.cache());
    assert_eq!(
        kb.get(server_counters::ACTIONS),
        None,
        "B never ran it: {kb:?}"
    );
    assert_eq!(kb[server_counters::UPSTREAM_AC_HITS], 1);
    assert!(
        kb[server_counters::UPSTREAM_BYTES_FETCHED] >= 2 << 20,
        "{kb:?}"
    );
    assert_eq!(kb.get(server_counters::UPSTREAM_REJECTED), None);
    assert!(clonestage_engine::Cache::open(&b.cache())
        .unwrap()
        .verify()
        .unwrap()
        .1
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_reads_through_and_fetches_missing_inputs() {
    let up = FakeUpstream::start().await;
    // A result the upstream has: Execute on a fresh server answers it without running.
    let mut a = TestServer::start_upstream(opts(&up.url)).await;
    let mut ca = a.clients().await;
    let act = action(&mut ca, "exec-read").await;
    let (_, first) = ca.execute(act, false).await;
    wait_for("A's upload", || up.result(&act).is_some()).await;
    let mut b = TestServer::start_upstream(opts(&up.url)).await;
    let mut cb = b.clients().await;
    assert_eq!(action(&mut cb, "exec-read").await, act);
    let (_, resp) = cb.execute(act, false).await;
    assert!(resp.cached_result, "served from the upstream");
    assert_eq!(resp.result, first.result);

    // Inputs only the upstream has: Bazel uploaded the Action and Command, not the input
    // root; Execute fetches it, verified, and runs.
    let input = up.put_blob(b"only upstream");
    let pkg = up.put_blob(&encode(&pb::Directory {
        files: vec![file("in.txt", input, false)],
        ..Default::default()
    }));
    let root = up.put_blob(&encode(&pb::Directory {
        directories: vec![dir("pkg", pkg)],
        ..Default::default()
    }));
    let act2 = upload_action(&mut cb, &command(), root, None, false).await;
    let (_, resp) = cb.execute(act2, false).await;
    let r = resp.result.expect("ran");
    assert_eq!(r.exit_code, 0, "{:?}", resp.status);
    let out = r
        .output_files
        .iter()
        .find(|f| f.path == "pkg/out.txt")
        .unwrap();
    assert_eq!(
        cb.read_proto(out.digest.as_ref().unwrap()).await,
        b"made from only upstream\n"
    );

    // What neither has is still reported to Bazel as missing.
    let gone = Digest::of_bytes(b"nowhere");
    let root3 = cb
        .upload(&[encode(&pb::Directory {
            files: vec![file("in.txt", gone, false)],
            ..Default::default()
        })])
        .await[0];
    let act3 = upload_action(&mut cb, &command(), root3, None, false).await;
    let (_, resp) = cb.execute(act3, false).await;
    let st = resp.status.unwrap();
    assert_eq!(st.code, tonic::Code::FailedPrecondition as i32, "{st:?}");
    assert!(st.message.contains(&gone.hex()), "{}", st.message);
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_none_never_writes_and_update_is_forwarded_only_with_all() {
    let up = FakeUpstream::start().await;
    let mut s = TestServer::start_upstream(UpstreamOptions {
        write: WriteMode::None,
        ..opts(&up.url)
    })
    .await;
    let mut c = s.clients().await;
    let act = action(&mut c, "none").await;
    let (_, resp) = c.execute(act, false).await;
    assert_eq!(resp.result.unwrap().exit_code, 0);
    s.stop().await;
    for rpc in [
        "UpdateActionResult",
        "BatchUpdateBlobs",
        "Write",
        "FindMissingBlobs",
    ] {
        assert_eq!(up.calls(rpc), 0, "{rpc} with --upstream-write none");
    }
    assert_eq!(up.calls("GetActionResult"), 1, "it still reads");

    // Default (executed): a result Bazel ran itself is stored here, not forwarded.
    let blob = Digest::of_bytes(b"bazel ran it");
    let result = pb::ActionResult {
        output_files: vec![pb::OutputFile {
            path: "o".into(),
            digest: Some(blob.to_proto()),
            ..Default::default()
        }],
        ..Default::default()
    };
    let update = |act: Digest| pb::UpdateActionResultRequest {
        action_digest: Some(act.to_proto()),
        action_result: Some(result.clone()),
        ..Default::default()
    };
    let mut s = TestServer::start_upstream(opts(&up.url)).await;
    let mut c = s.clients().await;
    c.upload(&[b"bazel ran it".to_vec()]).await;
    let act = Digest::of_bytes(b"an action bazel ran");
    c.ac.update_action_result(update(act)).await.unwrap();
    s.stop().await;
    assert_eq!(up.calls("UpdateActionResult"), 0);

    let mut s = TestServer::start_upstream(UpstreamOptions {
        write: WriteMode::All,
        ..opts(&up.url)
    })
    .await;
    let mut c = s.clients().await;
    c.upload(&[b"bazel ran it".to_vec()]).await;
    c.ac.update_action_result(update(act)).await.unwrap();
    wait_for("the forwarded update", || up.result(&act).is_some()).await;
    assert_eq!(up.data.lock().unwrap().blobs[&blob], b"bazel ran it");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_survives_a_restart() {
    // The upstream is down while A builds: the upload stays queued.
    let mut a = TestServer::start_upstream(opts(&down_url())).await;
    let mut c = a.clients().await;
    let act = action(&mut c, "queued").await;
    let (_, resp) = c.execute(act, false).await;
    assert_eq!(resp.result.unwrap().exit_code, 0);
    let entry = a
        .cache()
        .join("upstream/queue")
        .join(format!("{}-{}", act.hex(), act.size));
    wait_file(&entry).await;
    a.stop().await;
    assert!(entry.exists(), "still queued after the stop");
    assert_eq!(clonestage_server::upstream_queue_len(&a.cache()), Some(1));

    let up = FakeUpstream::start().await;
    a.restart(Some(opts(&up.url))).await;
    wait_for("the queued upload", || up.result(&act).is_some()).await;
    wait_for("the queue to empty", || !entry.exists()).await;
    a.stop().await;
    let k = counters(&a.cache());
    assert_eq!(k[server_counters::UPSTREAM_RESULTS_UPLOADED], 1);
    assert!(k[server_counters::UPSTREAM_UPLOAD_RETRIES] >= 1, "{k:?}");
    assert_eq!(clonestage_server::upstream_queue_len(&a.cache()), Some(0));
}

fn private_file(dir: &std::path::Path, name: &str, text: &str, mode: u32) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_headers_reach_the_upstream_and_a_loose_file_is_refused() {
    let up = FakeUpstream::start().await;
    let d = tempfile::tempdir().unwrap();
    let loose = private_file(d.path(), "loose", "X-Team-Token: s3cret\n", 0o644);
    let dir = tempfile::tempdir().unwrap();
    let mut o = TestServer::opts(dir.path(), 1);
    o.upstream = Some(UpstreamOptions {
        auth_file: Some(loose.clone()),
        ..opts(&up.url)
    });
    let e = format!(
        "{:#}",
        clonestage_server::start(o).await.err().expect("refused")
    );
    assert!(e.contains("0644") && e.contains("loose"), "{e}");
    assert!(!e.contains("s3cret"), "{e}");

    let file = private_file(d.path(), "auth", "# team\nX-Team-Token: s3cret\n", 0o600);
    let helper = private_file(
        d.path(),
        "helper",
        "#!/bin/sh\ncat > /dev/null\necho '{\"headers\":{\"x-from-helper\":[\"h1\"]}}'\n",
        0o700,
    );
    let mut s = TestServer::start_upstream(UpstreamOptions {
        auth_file: Some(file),
        auth_helper: Some(helper),
        instance: "team/main".into(),
        ..opts(&up.url)
    })
    .await;
    let mut c = s.clients().await;
    let _ = c.cached_result(Digest::of_bytes(b"anything")).await;
    s.stop().await;
    let h = up.data.lock().unwrap().headers.clone();
    assert!(h.contains(&"x-team-token: s3cret".to_string()), "{h:?}");
    assert!(h.contains(&"x-from-helper: h1".to_string()), "{h:?}");
}

/// A server whose upstream is down, keeping its cache within one byte.
async fn tiny_cache_server(write: WriteMode) -> TestServer {
    let dir = tempfile::Builder::new()
        .prefix("cs-srv")
        .tempdir_in("/tmp")
        .unwrap();
    let mut o = TestServer::opts(dir.path(), 2);
    o.max_size = Some(1);
    o.evict_every = Some(Duration::from_secs(3600));
    o.upstream = Some(UpstreamOptions {
        write,
        ..opts(&down_url())
    });
    let handle = clonestage_server::start(o).await.expect("server starts");
    TestServer {
        dir,
        handle: Some(handle),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_uploads_pin_their_blobs_against_eviction() {
    for write in [WriteMode::Executed, WriteMode::None] {
        let mut s = tiny_cache_server(write).await;
        let mut c = s.clients().await;
        let act = action(&mut c, "pinned").await;
        let (_, resp) = c.execute(act, false).await;
        let r = resp.result.unwrap();
        let big = r.output_files.iter().find(|f| f.path == "out/big").unwrap();
        let big = Digest::from_proto(big.digest.as_ref().unwrap()).unwrap();
        s.idle().await;
        if write == WriteMode::Executed {
            let entry =
                s.cache()
                    .join("upstream/queue")
                    .join(format!("{}-{}", act.hex(), act.size));
            wait_file(&entry).await;
        }
        // Past the grace every answered result gets (`answer_grace`): only the queue holds it.
        s.handle().end_answer_grace();
        s.handle().evict_now().await.expect("eviction ran");
        let kept = clonestage_engine::Cache::open(&s.cache())
            .unwrap()
            .contains(&big);
        // Without a queued upload nothing holds it: the same eviction removes it.
        assert_eq!(kept, write == WriteMode::Executed, "write {write:?}");
        s.stop().await;
    }
}
