//! A lying team cache (issue 23, item 1), against the in-process fake upstream
//! (`common::fake_upstream`): for every lie the attack told, GetActionResult answers NOT_FOUND,
//! Execute runs the action here, the local action cache then holds the local result, and the
//! lie is counted (`upstream_rejected`). Every blob a lie names is in the upstream and
//! verifies: only the checks against the Command (`checks::result_check`) can refuse it.
//! Also: a result whose Action the upstream lacks cannot be checked and is refused without
//! opening the breaker; and a result made here that Bazel would reject is answered, not cached.

mod common;

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::Digest;
use clonestage_server::server_counters as counters;
use clonestage_server::UpstreamOptions;
use common::fake_upstream::FakeUpstream;
use common::*;
use std::collections::BTreeMap;
use std::time::Duration;
use tonic::Code;

fn opts(url: &str) -> UpstreamOptions {
    UpstreamOptions {
        timeout: Duration::from_secs(5),
        ..UpstreamOptions::new(url)
    }
}

fn counters(cache: &std::path::Path) -> BTreeMap<String, u64> {
    clonestage_engine::stats::load(cache).unwrap().extra
}

/// `echo local > out.txt`, declaring `out.txt` (`output_paths`, as Bazel 7-9), made unique
/// per case by an environment variable.
fn command(case: &str) -> pb::Command {
    let mut c = sh("echo local > out.txt");
    c.environment_variables
        .push(pb::command::EnvironmentVariable {
            name: "CASE".into(),
            value: case.into(),
        });
    c.output_paths = vec!["out.txt".into()];
    c
}

/// The Action and Command of `case` in the upstream's CAS (as Bazel's uploads put them there),
/// not in the local one (Bazel asks GetActionResult before it uploads anything).
fn upstream_action(up: &FakeUpstream, case: &str) -> Digest {
    let cmd = up.put_blob(&encode(&command(case)));
    up.put_blob(&encode(&pb::Action {
        command_digest: Some(cmd.to_proto()),
        input_root_digest: Some(Digest::EMPTY.to_proto()),
        ..Default::default()
    }))
}

fn out_file(path: &str, d: Digest) -> pb::OutputFile {
    pb::OutputFile {
        path: path.into(),
        digest: Some(d.to_proto()),
        ..Default::default()
    }
}

/// What the upstream answers for the case: every lie the attack told, each naming only blobs
/// the upstream has, with the right bytes.
fn lie(up: &FakeUpstream, case: &str) -> pb::ActionResult {
    let good = up.put_blob(b"upstream bytes\n");
    let other = up.put_blob(b"other upstream bytes\n");
    let ok = || pb::ActionResult {
        output_files: vec![out_file("out.txt", good)],
        stdout_digest: Some(up.put_blob(b"stdout\n").to_proto()),
        ..Default::default()
    };
    match case {
        "file-escapes" => pb::ActionResult {
            output_files: vec![
                out_file("../../UPSTREAM_ESCAPE", good),
                out_file("out.txt", good),
            ],
            ..ok()
        },
        "file-absolute" => pb::ActionResult {
            output_files: vec![
                out_file("out.txt", good),
                out_file("/tmp/UPSTREAM_ESCAPE", good),
            ],
            ..ok()
        },
        "symlink-escapes" => pb::ActionResult {
            output_symlinks: vec![pb::OutputSymlink {
                path: "../x".into(),
                target: "out.txt".into(),
                node_properties: None,
            }],
            ..ok()
        },
        "tree-entry-escapes" => {
            let tree = pb::Tree {
                root: Some(pb::Directory {
                    files: vec![file("../../TREE_ESCAPE", good, false)],
                    ..Default::default()
                }),
                children: vec![],
            };
            let t = up.put_blob(&encode(&tree));
            pb::ActionResult {
                output_files: vec![],
                output_directories: vec![pb::OutputDirectory {
                    path: "out.txt".into(),
                    tree_digest: Some(t.to_proto()),
                    ..Default::default()
                }],
                ..ok()
            }
        }
        "same-path-twice" => pb::ActionResult {
            output_files: vec![out_file("out.txt", good), out_file("out.txt", other)],
            ..ok()
        },
        "undeclared-200000" => pb::ActionResult {
            // Short paths and one digest, so the answer stays under the 16 MiB a call carries.
            output_files: (0..200_000)
                .map(|i| out_file(&format!("u{i}"), good))
                .collect(),
            ..ok()
        },
        "exit-1" => pb::ActionResult {
            exit_code: 1,
            ..ok()
        },
        other => panic!("no lie {other}"),
    }
}

const LIES: [&str; 7] = [
    "file-escapes",
    "file-absolute",
    "symlink-escapes",
    "tree-entry-escapes",
    "same-path-twice",
    "undeclared-200000",
    "exit-1",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lie_of_the_upstream_enters_the_local_cache() {
    let up = FakeUpstream::start().await;
    for case in LIES {
        let action = upstream_action(&up, case);
        let lie = lie(&up, case);
        up.data.lock().unwrap().ac.insert(action, lie);
        // A fresh server per lie: each one is the first the breaker sees.
        let mut s = TestServer::start_upstream(opts(&up.url)).await;
        let mut c = s.clients().await;
        let asked = up.calls("GetActionResult");
        let err = c
            .cached_result(action)
            .await
            .err()
            .unwrap_or_else(|| panic!("{case}: the lie was served"));
        assert_eq!(err.code(), Code::NotFound, "{case}: {err:?}");
        assert_eq!(up.calls("GetActionResult"), asked + 1, "{case}: not asked");

        // Bazel uploads the Action and Command and calls Execute: it runs here.
        assert_eq!(
            upload_action(&mut c, &command(case), Digest::EMPTY, None, false).await,
            action
        );
        let (_, resp) = c.execute(action, false).await;
        assert!(!resp.cached_result, "{case}: Execute served the lie");
        let r = resp.result.expect("a result");
        assert_eq!(r.exit_code, 0, "{case}: {:?}", resp.status);
        let local = |r: &pb::ActionResult| {
            assert_eq!(r.output_files.len(), 1, "{case}: {r:?}");
            assert_eq!(r.output_files[0].path, "out.txt");
            r.output_files[0].digest.clone().unwrap()
        };
        assert_eq!(c.read_proto(&local(&r)).await, b"local\n", "{case}");

        // And the local action cache holds the local result.
        let stored = c.cached_result(action).await.expect("the local result");
        assert_eq!(local(&stored), local(&r), "{case}");
        s.stop().await;
        let k = counters(&s.cache());
        assert_eq!(
            k.get(counters::UPSTREAM_REJECTED),
            Some(&1),
            "{case}: {k:?}"
        );
        assert_eq!(k.get(counters::UPSTREAM_AC_HITS), None, "{case}: {k:?}");
        assert_eq!(k[counters::ACTIONS], 1, "{case}: {k:?}");
        assert!(
            clonestage_engine::Cache::open(&s.cache())
                .unwrap()
                .verify()
                .unwrap()
                .1
                .is_empty(),
            "{case}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_whose_command_the_upstream_lacks_is_refused_without_tripping_the_breaker() {
    let up = FakeUpstream::start().await;
    let mut s = TestServer::start_upstream(opts(&up.url)).await;
    let mut c = s.clients().await;
    // A well-formed result, but neither the Action nor the Command is anywhere: it cannot be
    // checked. Four in a row (the breaker opens after three failures).
    let good = up.put_blob(b"upstream bytes\n");
    for i in 0..4 {
        let action = Digest::of_bytes(format!("an action nobody uploaded {i}").as_bytes());
        up.data.lock().unwrap().ac.insert(
            action,
            pb::ActionResult {
                output_files: vec![out_file("out.txt", good)],
                ..Default::default()
            },
        );
        let err = c.cached_result(action).await.unwrap_err();
        assert_eq!(err.code(), Code::NotFound);
    }
    assert_eq!(up.calls("GetActionResult"), 4, "the breaker opened");
    s.stop().await;
    let k = counters(&s.cache());
    assert_eq!(k.get(counters::UPSTREAM_REJECTED), Some(&4), "{k:?}");
    assert_eq!(k.get(counters::UPSTREAM_BREAKER_OPENS), None, "{k:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_made_here_that_bazel_would_refuse_is_answered_and_not_cached() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    // Exit 0 without its declared output (Bazel 7+ fails the build on a cached one: "mandatory
    // output ... was not created"), and an output symlink that climbs out of the root.
    let mut missing = sh("true");
    missing.output_paths = vec!["out.txt".into()];
    let mut escaping = sh("ln -s ../../outside link");
    escaping.output_paths = vec!["link".into()];
    // A Bazel test spawn has no mandatory output: cached without them.
    let mut test = missing.clone();
    test.environment_variables
        .push(pb::command::EnvironmentVariable {
            name: "XML_OUTPUT_FILE".into(),
            value: "test.xml".into(),
        });
    for (cmd, cached) in [(missing, false), (escaping, false), (test, true)] {
        let action = upload_action(&mut c, &cmd, Digest::EMPTY, None, false).await;
        let (_, resp) = c.execute(action, false).await;
        assert_eq!(resp.result.unwrap().exit_code, 0, "{:?}", resp.status);
        let got = c.cached_result(action).await;
        assert_eq!(got.is_ok(), cached, "{cmd:?}: {got:?}");
    }
    s.stop().await;
    assert_eq!(counters(&s.cache())[counters::RESULTS_NOT_CACHED], 2);
}
