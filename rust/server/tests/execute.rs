//! Execute end to end through the real spawn wrapper: outputs of every kind under both API
//! versions, outputs beside inputs, missing and malformed inputs, timeouts, the action cache,
//! do_not_cache, WaitExecution, metadata and counters.

mod common;

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::Digest;
use clonestage_server::server_counters;
use common::*;
use prost::Message;
use tonic::Code;

fn ok(resp: &pb::ExecuteResponse) -> &pb::ActionResult {
    let st = resp.status.as_ref().map(|s| s.code).unwrap_or(0);
    assert_eq!(st, 0, "status {:?}", resp.status);
    resp.result.as_ref().expect("a result")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(deprecated)]
async fn runs_a_command_and_collects_every_kind_of_output() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let input = c.upload(&[b"hello input\n".to_vec()]).await[0];
    let pkg = pb::Directory {
        files: vec![file("in.txt", input, false)],
        ..Default::default()
    };
    let pkg_d = c.upload(&[encode(&pkg)]).await[0];
    let root = pb::Directory {
        directories: vec![dir("lib", pkg_d), dir("pkg", pkg_d)],
        ..Default::default()
    };
    let root_d = c.upload(&[encode(&root)]).await[0];

    for v21 in [true, false] {
        // The permission contract as the action sees it: the output's parent (which holds an
        // input) is writable, the input itself read-only, the root 0o755.
        let modes = if cfg!(target_os = "linux") {
            "test \"$(stat -c %a .)\" = 755; test \"$(stat -c %a pkg)\" = 755; test \"$(stat -c %a lib)\" = 555; \
             test \"$(stat -c %a pkg/in.txt)\" = 444 -o \"$(stat -c %a pkg/in.txt)\" = 555; "
        } else {
            ""
        };
        let mut cmd = sh(&format!(
            "set -e; {modes}test \"$FOO\" = bar; test -z \"${{HOME+set}}\"; \
             cat pkg/in.txt > pkg/out.txt; \
             mkdir -p out/dir/sub; echo a > out/dir/a; echo b > out/dir/sub/b; chmod +x out/dir/sub/b; \
             ln -s a out/dir/link; ln -s ../pkg/in.txt out/filelink; \
             printf '#!/bin/sh\\n' > out/tool; chmod 755 out/tool; \
             echo to-stdout; echo to-stderr >&2; \
             test ! -e out/absent"
        ));
        cmd.environment_variables.insert(
            0,
            pb::command::EnvironmentVariable {
                name: "FOO".into(),
                value: "bar".into(),
            },
        );
        let outs = [
            "out/absent",
            "out/dir",
            "out/filelink",
            "out/tool",
            "pkg/out.txt",
        ];
        if v21 {
            cmd.output_paths = outs.iter().map(|s| s.to_string()).collect();
        } else {
            cmd.output_files = vec![
                "out/absent".into(),
                "out/filelink".into(),
                "out/tool".into(),
                "pkg/out.txt".into(),
            ];
            cmd.output_directories = vec!["out/dir".into()];
        }
        let action = upload_action(&mut c, &cmd, root_d, None, false).await;
        let (_, resp) = c.execute(action, false).await;
        let r = ok(&resp).clone();
        assert!(!resp.cached_result);
        assert_eq!(
            r.exit_code,
            0,
            "stderr: {:?}",
            String::from_utf8_lossy(&c.read_proto(r.stderr_digest.as_ref().unwrap()).await)
        );
        assert_eq!(
            c.read_proto(r.stdout_digest.as_ref().unwrap()).await,
            b"to-stdout\n"
        );
        assert_eq!(
            c.read_proto(r.stderr_digest.as_ref().unwrap()).await,
            b"to-stderr\n"
        );

        let files: Vec<(&str, bool)> = r
            .output_files
            .iter()
            .map(|f| (f.path.as_str(), f.is_executable))
            .collect();
        assert_eq!(files, vec![("out/tool", true), ("pkg/out.txt", false)]);
        let out_txt = r
            .output_files
            .iter()
            .find(|f| f.path == "pkg/out.txt")
            .unwrap();
        assert_eq!(
            c.read_proto(out_txt.digest.as_ref().unwrap()).await,
            b"hello input\n"
        );

        // Symlinks go where the client's API version looks for them, and only there.
        let link = pb::OutputSymlink {
            path: "out/filelink".into(),
            target: "../pkg/in.txt".into(),
            node_properties: None,
        };
        if v21 {
            assert_eq!(r.output_symlinks, vec![link]);
            assert!(r.output_file_symlinks.is_empty());
        } else {
            assert_eq!(r.output_file_symlinks, vec![link]);
            assert!(r.output_symlinks.is_empty());
        }

        assert_eq!(r.output_directories.len(), 1);
        let od = &r.output_directories[0];
        assert_eq!(od.path, "out/dir");
        let tree = pb::Tree::decode(
            c.read_proto(od.tree_digest.as_ref().unwrap())
                .await
                .as_slice(),
        )
        .unwrap();
        let top = tree.root.unwrap();
        assert_eq!(
            top.files
                .iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>(),
            vec!["a"]
        );
        assert_eq!(top.symlinks[0].name, "link");
        assert_eq!(top.symlinks[0].target, "a");
        assert_eq!(top.directories[0].name, "sub");
        assert_eq!(tree.children.len(), 1);
        let b = &tree.children[0].files[0];
        assert!(b.is_executable);
        assert_eq!(c.read_proto(b.digest.as_ref().unwrap()).await, b"b\n");
        // The server builds the Tree from the Directory messages its ingest wrote: every one is
        // in the CAS, and the Tree is byte for byte the one read back from there (root first,
        // then breadth-first, each distinct directory once).
        let root_d = Digest::of_bytes(&top.encode_to_vec()).to_proto();
        let mut queue = std::collections::VecDeque::from([root_d]);
        let (mut seen, mut dirs) = (std::collections::HashSet::new(), Vec::new());
        while let Some(d) = queue.pop_front() {
            if !seen.insert(d.hash.clone()) {
                continue;
            }
            let dir = pb::Directory::decode(c.read_proto(&d).await.as_slice()).unwrap();
            queue.extend(dir.directories.iter().map(|n| n.digest.clone().unwrap()));
            dirs.push(dir);
        }
        let mut dirs = dirs.into_iter();
        let read_back = pb::Tree {
            root: dirs.next(),
            children: dirs.collect(),
        };
        assert_eq!(
            Some(Digest::of_bytes(&read_back.encode_to_vec()).to_proto()),
            od.tree_digest
        );

        // Timestamps in order and the staging figures for Bazel's logs.
        let m = r.execution_metadata.as_ref().unwrap();
        let t = |ts: &Option<bazel_remote_apis::google::protobuf::Timestamp>| {
            let ts = ts.as_ref().expect("timestamp set");
            ts.seconds as i128 * 1_000_000_000 + ts.nanos as i128
        };
        assert!(t(&m.queued_timestamp) <= t(&m.input_fetch_start_timestamp));
        assert!(t(&m.input_fetch_start_timestamp) <= t(&m.input_fetch_completed_timestamp));
        assert!(t(&m.input_fetch_completed_timestamp) <= t(&m.execution_start_timestamp));
        assert!(t(&m.execution_start_timestamp) <= t(&m.execution_completed_timestamp));
        assert!(t(&m.output_upload_start_timestamp) <= t(&m.output_upload_completed_timestamp));
        assert_eq!(m.auxiliary_metadata.len(), 1);
        let aux = &m.auxiliary_metadata[0];
        assert_eq!(aux.type_url, "type.googleapis.com/google.protobuf.Struct");
        let st = prost_types::Struct::decode(aux.value.as_slice()).unwrap();
        for k in ["staging_us", "bytes", "files", "fallbacks", "command"] {
            assert!(st.fields.contains_key(k), "aux metadata lacks {k}: {st:?}");
        }
    }
    s.idle().await;
    // Work dirs are removed off the response path by the janitor: wait for it (bounded).
    let left = work_entries_after_cleanup(&s.cache()).await;
    assert!(
        left.is_empty(),
        "work dirs not removed within 10 s: {left:?}"
    );
    s.idle().await;
    let counters = clonestage_engine::stats::load(&s.cache()).unwrap();
    assert_eq!(counters.extra[server_counters::ACTIONS], 2);
    assert_eq!(clonestage_server::stage_percentiles(&counters).len(), 3);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_inputs_are_listed_one_by_one() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let (m1, m2) = (
        Digest::of_bytes(b"never uploaded 1"),
        Digest::of_bytes(b"never uploaded 2"),
    );
    let sub = pb::Directory {
        files: vec![file("b", m2, false)],
        ..Default::default()
    };
    let sub_d = c.upload(&[encode(&sub)]).await[0];
    let root = pb::Directory {
        files: vec![file("a", m1, false)],
        directories: vec![dir("d", sub_d)],
        ..Default::default()
    };
    let root_d = c.upload(&[encode(&root)]).await[0];
    let action = upload_action(&mut c, &sh("true"), root_d, None, false).await;
    let (_, resp) = c.execute(action, false).await;
    let st = resp.status.unwrap();
    assert_eq!(st.code, Code::FailedPrecondition as i32, "{}", st.message);
    assert_eq!(st.details.len(), 1);
    assert_eq!(
        st.details[0].type_url,
        clonestage_server::PRECONDITION_FAILURE_TYPE
    );
    let pf =
        clonestage_server::PreconditionFailure::decode(st.details[0].value.as_slice()).unwrap();
    let mut subjects: Vec<String> = pf
        .violations
        .iter()
        .map(|v| format!("{} {}", v.r#type, v.subject))
        .collect();
    subjects.sort();
    let mut want = vec![
        format!("MISSING blobs/{}/{}", m1.hex(), m1.size),
        format!("MISSING blobs/{}/{}", m2.hex(), m2.size),
    ];
    want.sort();
    assert_eq!(subjects, want);

    // A missing Action is reported the same way.
    let ghost = Digest::of_bytes(b"no such action");
    let (_, resp) = c.execute(ghost, false).await;
    let st = resp.status.unwrap();
    assert_eq!(st.code, Code::FailedPrecondition as i32);
    let pf =
        clonestage_server::PreconditionFailure::decode(st.details[0].value.as_slice()).unwrap();
    assert_eq!(
        pf.violations[0].subject,
        format!("blobs/{}/{}", ghost.hex(), ghost.size)
    );
    s.idle().await;
    assert!(work_entries_after_cleanup(&s.cache()).await.is_empty());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_trees_are_refused_and_create_nothing() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let f = c.upload(&[b"payload".to_vec()]).await[0];
    let before: Vec<_> = std::fs::read_dir(s.dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();

    let dotdot = pb::Directory {
        files: vec![file("..", f, false)],
        ..Default::default()
    };
    let escaping = pb::Directory {
        symlinks: vec![pb::SymlinkNode {
            name: "l".into(),
            target: "../../etc/passwd".into(),
            node_properties: None,
        }],
        ..Default::default()
    };
    let absolute = pb::Directory {
        symlinks: vec![pb::SymlinkNode {
            name: "l".into(),
            target: "/etc/passwd".into(),
            node_properties: None,
        }],
        ..Default::default()
    };
    let unsorted = pb::Directory {
        files: vec![file("b", f, false), file("a", f, false)],
        ..Default::default()
    };
    for (what, bad) in [
        ("'..'", dotdot),
        ("climbs out", escaping),
        ("absolute", absolute),
        ("not sorted", unsorted),
    ] {
        let d = c.upload(&[encode(&bad)]).await[0];
        let action = upload_action(
            &mut c,
            &sh("touch /tmp/clonestage-should-not-exist"),
            d,
            None,
            false,
        )
        .await;
        let (_, resp) = c.execute(action, false).await;
        let st = resp.status.unwrap();
        assert_eq!(
            st.code,
            Code::InvalidArgument as i32,
            "{what}: {}",
            st.message
        );
        assert!(
            st.message.contains(what),
            "message names the problem ({what}): {}",
            st.message
        );
    }
    // An output path that climbs out is refused too.
    let mut cmd = sh("true");
    cmd.output_paths = vec!["../escape".into()];
    let action = upload_action(&mut c, &cmd, Digest::EMPTY, None, false).await;
    let (_, resp) = c.execute(action, false).await;
    assert_eq!(resp.status.unwrap().code, Code::InvalidArgument as i32);

    assert!(!std::path::Path::new("/tmp/clonestage-should-not-exist").exists());
    s.idle().await;
    assert!(work_entries_after_cleanup(&s.cache()).await.is_empty());
    let after: Vec<_> = std::fs::read_dir(s.dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(before, after, "nothing created beside the cache");
    s.idle().await;
    let counters = clonestage_engine::stats::load(&s.cache()).unwrap();
    assert_eq!(counters.extra[server_counters::ACTION_ERRORS], 5);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_answers_deadline_exceeded_with_the_partial_result() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let action = upload_action(
        &mut c,
        &sh("echo started; exec sleep 30"),
        Digest::EMPTY,
        Some(1),
        false,
    )
    .await;
    let t0 = std::time::Instant::now();
    let (_, resp) = c.execute(action, false).await;
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(10),
        "took {:?}",
        t0.elapsed()
    );
    let st = resp.status.as_ref().unwrap();
    assert_eq!(st.code, Code::DeadlineExceeded as i32, "{st:?}");
    let r = resp.result.as_ref().expect("partial result");
    assert_eq!(
        c.read_proto(r.stdout_digest.as_ref().unwrap()).await,
        b"started\n"
    );
    // Not cached.
    let err = c.cached_result(action).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    s.idle().await;
    assert_eq!(
        clonestage_engine::stats::load(&s.cache()).unwrap().extra[server_counters::ACTION_TIMEOUTS],
        1
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn action_cache_hits_skip_lookup_and_do_not_cache() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let mut cmd = sh("date +%s%N > out");
    cmd.output_paths = vec!["out".into()];
    let action = upload_action(&mut c, &cmd, Digest::EMPTY, None, false).await;
    let (_, first) = c.execute(action, false).await;
    assert!(!first.cached_result);
    let (_, second) = c.execute(action, false).await;
    assert!(
        second.cached_result,
        "second Execute is served from the action cache"
    );
    assert_eq!(ok(&second).output_files, ok(&first).output_files);
    let (_, third) = c.execute(action, true).await;
    assert!(!third.cached_result, "skip_cache_lookup runs it again");
    assert_ne!(
        ok(&third).output_files,
        ok(&first).output_files,
        "it really ran again"
    );
    let got =
        c.ac.get_action_result(pb::GetActionResultRequest {
            action_digest: Some(action.to_proto()),
            inline_stdout: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        got.output_files,
        ok(&third).output_files,
        "the newest result is stored"
    );

    // do_not_cache: never stored, never served.
    let nc = upload_action(&mut c, &cmd, Digest::EMPTY, None, true).await;
    let (_, a) = c.execute(nc, false).await;
    let (_, b) = c.execute(nc, false).await;
    assert!(!a.cached_result && !b.cached_result);
    let err = c.cached_result(nc).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    // A failing action is reported with its exit code and not cached.
    let fail = upload_action(
        &mut c,
        &sh("echo oops >&2; exit 3"),
        Digest::EMPTY,
        None,
        false,
    )
    .await;
    let (_, r) = c.execute(fail, false).await;
    assert_eq!(ok(&r).exit_code, 3);
    assert_eq!(
        c.read_proto(ok(&r).stderr_digest.as_ref().unwrap()).await,
        b"oops\n"
    );
    let (_, r2) = c.execute(fail, false).await;
    assert!(!r2.cached_result);

    // A result whose blob is gone is not served.
    let out = Digest::from_proto(ok(&third).output_files[0].digest.as_ref().unwrap()).unwrap();
    let blob = clonestage_engine::Cache::open(&s.cache())
        .unwrap()
        .blob_path(&out);
    std::fs::remove_file(blob).unwrap();
    let err = c.cached_result(action).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    s.idle().await;

    let counters = clonestage_engine::stats::load(&s.cache()).unwrap();
    assert_eq!(counters.extra[server_counters::ACTION_CACHE_HITS], 2);
    assert_eq!(counters.extra[server_counters::ACTION_FAILURES], 2);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_action_result_needs_its_blobs() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let action = Digest::of_bytes(b"some action");
    let present = c.upload(&[b"out".to_vec()]).await[0];
    let absent = Digest::of_bytes(b"absent");
    let result = |d: Digest| pb::ActionResult {
        output_files: vec![pb::OutputFile {
            path: "o".into(),
            digest: Some(d.to_proto()),
            ..Default::default()
        }],
        ..Default::default()
    };
    let err =
        c.ac.update_action_result(pb::UpdateActionResultRequest {
            action_digest: Some(action.to_proto()),
            action_result: Some(result(absent)),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    c.ac.update_action_result(pb::UpdateActionResultRequest {
        action_digest: Some(action.to_proto()),
        action_result: Some(result(present)),
        ..Default::default()
    })
    .await
    .unwrap();
    let got = c.cached_result(action).await.unwrap();
    assert_eq!(got, result(present));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_action_result_refuses_malformed_output_lists() {
    // Issue 23, item 4: a result naming a path twice, or a path that is not a normalized
    // relative one, is INVALID_ARGUMENT, as the same lists in a Command are for Execute
    // (every blob it names is present, so only the lists can refuse it).
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let d = c.upload(&[b"out".to_vec()]).await[0];
    let file = |path: &str| pb::OutputFile {
        path: path.into(),
        digest: Some(d.to_proto()),
        ..Default::default()
    };
    let files = |paths: &[&str]| pb::ActionResult {
        output_files: paths.iter().map(|p| file(p)).collect(),
        ..Default::default()
    };
    let tree = c
        .upload(&[encode(&pb::Tree {
            root: Some(pb::Directory::default()),
            children: vec![],
        })])
        .await[0];
    let cases: [(pb::ActionResult, &str); 5] = [
        (files(&["o", "o"]), "'o' is reported twice"),
        (
            pb::ActionResult {
                output_directories: vec![pb::OutputDirectory {
                    path: "o".into(),
                    tree_digest: Some(tree.to_proto()),
                    ..Default::default()
                }],
                ..files(&["o"])
            },
            "'o' is reported twice",
        ),
        (files(&["../../escape"]), "not allowed"),
        (files(&["/abs"]), "relative"),
        (files(&["a//o"]), "empty name"),
    ];
    for (i, (result, want)) in cases.into_iter().enumerate() {
        let action = Digest::of_bytes(format!("malformed {i}").as_bytes());
        let err =
            c.ac.update_action_result(pb::UpdateActionResultRequest {
                action_digest: Some(action.to_proto()),
                action_result: Some(result),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{want}: {err:?}");
        assert!(err.message().contains(want), "{want}: {}", err.message());
        assert_eq!(
            c.cached_result(action).await.unwrap_err().code(),
            Code::NotFound
        );
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_execution_follows_an_operation() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let action = upload_action(
        &mut c,
        &sh("sleep 0.3; echo done"),
        Digest::EMPTY,
        None,
        false,
    )
    .await;
    let mut stream = c
        .exec
        .execute(pb::ExecuteRequest {
            action_digest: Some(action.to_proto()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert!(!first.done);
    drop(stream); // the client's stream breaks; it comes back with WaitExecution
    let mut w = c
        .exec
        .wait_execution(pb::WaitExecutionRequest {
            name: first.name.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut last = None;
    while let Some(op) = w.message().await.unwrap() {
        last = Some(op);
    }
    let last = last.unwrap();
    assert!(last.done);
    let r = response_of(&last);
    assert_eq!(
        c.read_proto(ok(&r).stdout_digest.as_ref().unwrap()).await,
        b"done\n"
    );
    let err = c
        .exec
        .wait_execution(pb::WaitExecutionRequest {
            name: "operations/nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    s.stop().await;
}

/// Issue 22 item 5: Bazel gives every local spawn, on Linux as on macOS, the Bazel command's
/// TMPDIR (else /tmp) in place of the spawn's own (`execution/tmpdir.rs` cites where); the
/// server does the same with its own TMPDIR, for every action, Apple or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_action_gets_the_servers_tmpdir_in_place_of_its_own() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let want = std::env::var("TMPDIR")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "/tmp".into());
    for own in [None, Some("/nonexistent/the-actions-own")] {
        let mut cmd = sh("printf '%s' \"${TMPDIR-unset}\"");
        if let Some(v) = own {
            // Sorted by name, as REAPI asks: PATH, then TMPDIR.
            cmd.environment_variables
                .push(pb::command::EnvironmentVariable {
                    name: "TMPDIR".into(),
                    value: v.into(),
                });
        }
        let action = upload_action(&mut c, &cmd, Digest::EMPTY, None, false).await;
        let (_, resp) = c.execute(action, true).await;
        let r = ok(&resp);
        assert_eq!(r.exit_code, 0);
        let out = c.read_proto(r.stdout_digest.as_ref().unwrap()).await;
        assert_eq!(
            String::from_utf8(out).unwrap(),
            want,
            "action's own: {own:?}"
        );
    }
    s.stop().await;
}

/// `jobs` bounds how many actions run at once: two 1 s actions overlap with jobs=2 and run
/// one after the other with jobs=1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_bound_parallel_actions() {
    for (jobs, min_ms, max_ms) in [(2usize, 950u128, 1900u128), (1, 2000, 20_000)] {
        let mut s = TestServer::start_with_jobs(jobs).await;
        let mut c1 = s.clients().await;
        let mut c2 = s.clients().await;
        let a1 = upload_action(&mut c1, &sh("sleep 1; echo 1"), Digest::EMPTY, None, false).await;
        let a2 = upload_action(&mut c2, &sh("sleep 1; echo 2"), Digest::EMPTY, None, false).await;
        let t0 = std::time::Instant::now();
        let (r1, r2) = tokio::join!(c1.execute(a1, false), c2.execute(a2, false));
        let ms = t0.elapsed().as_millis();
        assert_eq!(ok(&r1.1).exit_code, 0);
        assert_eq!(ok(&r2.1).exit_code, 0);
        assert!(
            min_ms <= ms && ms <= max_ms,
            "jobs={jobs}: two actions took {ms} ms"
        );
        s.stop().await;
    }
}
