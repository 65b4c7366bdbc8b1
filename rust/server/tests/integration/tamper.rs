//! Issue 10, finding 2: two concurrent Executes through the real wrapper share a hardlinked
//! input; A appends to it, B reads it. Whatever the order of A's write and the two checks
//! after the actions, no action whose root held the written inode is cached or reported as a
//! success (both end ABORTED); an action checked before the write is a clean, cached success.
//! Runs where the test's cache stages by hardlink (ext4, tmpfs: /tmp on CI); elsewhere the
//! inputs are private clones and nothing is shared, which the test checks and reports.

use crate::common;

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::Digest;
use common::*;
use std::path::Path;
use std::time::Duration;
use tonic::Code;

const INPUT: &[u8] = b"hello input\n";

/// `wait_for FLAG` in the action's shell, bounded so a broken test cannot hang.
fn wait(flag: &Path) -> String {
    format!(
        "i=0; while [ ! -e {f} ] && [ $i -lt 2000 ]; do sleep 0.01; i=$((i+1)); done; ",
        f = flag.display()
    )
}

fn writer(flags: &Path, after_write: &str) -> pb::Command {
    sh(&format!(
        "chmod u+w pkg/in.txt && echo oops >> pkg/in.txt && touch {}/a-wrote; {after_write}",
        flags.display()
    ))
}

fn reader(before_read: &str) -> pb::Command {
    let mut cmd = sh(&format!("{before_read}cat pkg/in.txt > out.txt"));
    cmd.output_paths = vec!["out.txt".into()];
    cmd
}

async fn touch_when(flag: &Path) {
    std::fs::write(flag, b"").unwrap();
}

fn code(resp: &pb::ExecuteResponse) -> i32 {
    resp.status.as_ref().map_or(0, |s| s.code)
}

/// Whether this server stages by hardlink (otherwise the race cannot happen).
fn hardlinks(cache: &Path) -> bool {
    clonestage_engine::stats::load(cache)
        .map(|s| s.hardlink > 0)
        .unwrap_or(false)
}

fn assert_tainted(name: &str, resp: &pb::ExecuteResponse) {
    assert_eq!(
        code(resp),
        Code::Aborted as i32,
        "{name}: its root held the written inode, yet status {:?}",
        resp.status
    );
    assert!(!resp.cached_result);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_written_shared_input_taints_every_action_that_held_it_in_any_order() {
    for order in [
        "a_checked_first",
        "b_checked_first",
        "write_after_b_checked",
    ] {
        let mut s = TestServer::start().await;
        let mut c = s.clients().await;
        let flags = tempfile::tempdir().unwrap();
        let f = flags.path();
        let root = one_file_root(&mut c, INPUT).await;
        let (a_cmd, b_cmd) = match order {
            // A writes and ends (its check quarantines the inode) while B waits; then B reads
            // the written file and is checked: before the fix it found the cache path gone,
            // reported a clean success and cached it.
            "a_checked_first" => (
                writer(f, ""),
                reader(&format!(
                    "touch {}/b-started; {}",
                    f.display(),
                    wait(&f.join("b-go"))
                )),
            ),
            // B reads after A's write and ends first (its check quarantines); A is checked
            // last and, before the fix, was cached as a clean success.
            "b_checked_first" => (
                writer(f, &wait(&f.join("a-go"))),
                reader(&wait(&f.join("a-wrote"))),
            ),
            // B is done and checked before A writes: B read clean bytes and is cached.
            _ => (writer(f, ""), reader("")),
        };
        let a = upload_action(&mut c, &a_cmd, root, Some(60), false).await;
        let b = upload_action(&mut c, &b_cmd, root, Some(60), false).await;
        let (ra, rb) = match order {
            "a_checked_first" => {
                let mut cb = s.clients().await;
                let tb = tokio::spawn(async move { cb.execute(b, true).await.1 });
                wait_file(&f.join("b-started")).await;
                let ra = c.execute(a, true).await.1;
                touch_when(&f.join("b-go")).await;
                (ra, tb.await.unwrap())
            }
            "b_checked_first" => {
                let mut ca = s.clients().await;
                let ta = tokio::spawn(async move { ca.execute(a, true).await.1 });
                let rb = c.execute(b, true).await.1;
                touch_when(&f.join("a-go")).await;
                (ta.await.unwrap(), rb)
            }
            _ => {
                let rb = c.execute(b, true).await.1;
                // Asked now: its output has the input's bytes, so the AC entry stops being
                // served (a blob gone) once A's write quarantines that blob.
                assert!(
                    c.cached_result(b).await.is_ok(),
                    "{order}: B's clean result is cached"
                );
                let out = &rb.result.as_ref().unwrap().output_files[0];
                assert_eq!(c.read_proto(out.digest.as_ref().unwrap()).await, INPUT);
                let ra = c.execute(a, true).await.1;
                (ra, rb)
            }
        };
        s.idle().await;
        if !hardlinks(&s.cache()) {
            eprintln!("SKIP {order}: this cache's filesystem clones inputs; nothing is shared");
            s.stop().await;
            continue;
        }
        if order == "write_after_b_checked" {
            assert_eq!(code(&rb), 0, "{order}: B {:?}", rb.status);
        } else {
            assert_tainted(&format!("{order}: B (the reader)"), &rb);
            assert!(
                c.cached_result(b).await.is_err(),
                "{order}: B's result, built from the written input, was cached"
            );
        }
        assert_tainted(&format!("{order}: A (the writer)"), &ra);
        assert!(c.cached_result(a).await.is_err(), "{order}: A was cached");
        // The written inode is out of service and counted once; the bytes can come back.
        // stats.json is rewritten in place by the server's flush: read it until it parses
        // with the figure (a read in the middle of a rewrite sees it empty).
        let mut counters = Default::default();
        for _ in 0..100 {
            counters = clonestage_engine::stats::load(&s.cache()).unwrap();
            if counters.tampered > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let counters: clonestage_engine::stats::Counters = counters;
        let quarantined: Vec<_> = std::fs::read_dir(s.cache().join("quarantine"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(
            counters.tampered, 1,
            "{order}: {counters:?}, quarantine/: {quarantined:?}"
        );
        let input = Digest::of_bytes(INPUT);
        assert!(!clonestage_engine::Cache::open(&s.cache())
            .unwrap()
            .contains(&input));
        c.upload(&[INPUT.to_vec()]).await;
        let again = c.execute(b, true).await.1;
        assert_eq!(code(&again), 0, "{order}: B again after the re-upload");
        s.stop().await;
    }
}
