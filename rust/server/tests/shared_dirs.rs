//! Issue 24, shared cache directories through Execute: rules_swift's module cache path in one
//! action's root is the directory the next action finds its modules in; an action that
//! crashes on a corrupt cache gets the directory cleared and runs once more (counted), never
//! forever; the directory counts toward --max-size and is cleared only while idle; and
//! actions that replace the link, leave links out of the directory or write it at the same
//! time make clonestage touch nothing outside the cache and the root, and cache no wrong
//! result.

mod common;

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::Digest;
use clonestage_server::server_counters;
use common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

const CACHE_DIR: &str = "bazel-out/k8-fastbuild/bin/_swift_module_cache";
const OUT: &str = "bazel-out/k8-fastbuild/bin/pkg/out";

fn counters(cache: &Path) -> BTreeMap<String, u64> {
    clonestage_engine::stats::load(cache).unwrap().extra
}

/// Wait (up to 20 s) until counter `key` reaches `want`.
async fn counter_reaches(cache: &Path, key: &str, want: u64) -> u64 {
    let t0 = Instant::now();
    loop {
        let v = counters(cache).get(key).copied().unwrap_or(0);
        if v >= want || t0.elapsed() > Duration::from_secs(20) {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An action running `script` in a root that holds `pkg/in.txt` and declares OUT.
async fn action(c: &mut Clients, script: &str) -> Digest {
    let root = one_file_root(c, b"in\n").await;
    let mut cmd = sh(script);
    cmd.output_paths = vec![OUT.into()];
    upload_action(c, &cmd, root, Some(60), false).await
}

async fn run(s: &TestServer, script: &str) -> (pb::ActionResult, String, String) {
    let mut c = s.clients().await;
    let a = action(&mut c, script).await;
    let (_, resp) = c.execute(a, true).await;
    let r = resp.result.expect("a result");
    let out = match r.output_files.first() {
        Some(f) => String::from_utf8(c.read_proto(f.digest.as_ref().unwrap()).await).unwrap(),
        None => String::new(),
    };
    let err = match &r.stderr_digest {
        Some(d) => String::from_utf8_lossy(&c.read_proto(d).await).into_owned(),
        None => String::new(),
    };
    (r, out, err)
}

/// A module-cache user in shell: builds `Foundation.pcm` in the cache unless it is there,
/// and says which it did.
fn compile(tag: &str) -> String {
    format!(
        "set -e; m={CACHE_DIR}/H1/Foundation-X.pcm; mkdir -p {CACHE_DIR}/H1; \
         if [ -f $m ]; then echo \"{tag} hit $(cat $m)\" > {OUT}; \
         else echo built-by-{tag} > $m.tmp.$$; mv $m.tmp.$$ $m; echo \"{tag} built\" > {OUT}; fi"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_action_reuses_the_module_the_first_built() {
    let s = TestServer::start().await;
    let (r1, out1, _) = run(&s, &compile("first")).await;
    assert_eq!((r1.exit_code, out1.as_str()), (0, "first built\n"));
    let (r2, out2, _) = run(&s, &compile("second")).await;
    assert_eq!(
        (r2.exit_code, out2.as_str()),
        (0, "second hit built-by-first\n"),
        "the second root's module cache is the first one's"
    );
    assert!(counter_reaches(&s.cache(), "shared_dirs_linked", 4).await >= 4);
    // The module is in the cache's shared directory, not in any root.
    let shared = clonestage_engine::shared::dir_name(CACHE_DIR);
    assert!(s
        .cache()
        .join("shared")
        .join(shared)
        .join("H1/Foundation-X.pcm")
        .is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sharing_off_every_root_starts_empty() {
    let dir = tempfile::Builder::new()
        .prefix("cs-srv")
        .tempdir_in("/tmp")
        .unwrap();
    let mut opts = TestServer::opts(dir.path(), 2);
    opts.shared_dirs = vec!["none".into()];
    let s = TestServer {
        handle: Some(clonestage_server::start(opts).await.unwrap()),
        dir,
    };
    run(&s, &compile("first")).await;
    let (_, out2, _) = run(&s, &compile("second")).await;
    assert_eq!(out2, "second built\n");
    assert!(!s.cache().join("shared").exists());
}

/// Fails with clang's corruption diagnostic while the cache holds a poisoned module.
fn poisoned_compile() -> String {
    format!(
        "m={CACHE_DIR}/H1/Foundation-X.pcm; \
         if grep -q poison $m 2>/dev/null; then \
           echo \"fatal error: malformed or corrupted AST file: '$PWD/$m'\" >&2; \
           echo \"note: after modifying system headers, please delete the module cache at '$PWD/{CACHE_DIR}/H1'\" >&2; exit 1; fi; \
         {}",
        compile("again")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_on_a_corrupt_module_clears_the_directory_and_runs_the_action_once_more() {
    let s = TestServer::start().await;
    let poison = format!(
        "mkdir -p {CACHE_DIR}/H1 && echo poison > {CACHE_DIR}/H1/Foundation-X.pcm && echo ok > {OUT}"
    );
    assert_eq!(run(&s, &poison).await.0.exit_code, 0);
    let (r, out, err) = run(&s, &poisoned_compile()).await;
    assert_eq!(r.exit_code, 0, "recovered: {err}");
    assert_eq!(out, "again built\n", "ran again on an empty cache");
    assert_eq!(
        counter_reaches(&s.cache(), server_counters::SHARED_DIR_RECOVERIES, 1).await,
        1
    );
    // An ordinary failure naming the directory is the action's own: no recovery.
    let plain = format!("echo \"error: no such module in {CACHE_DIR}\" >&2; exit 1");
    assert_eq!(run(&s, &plain).await.0.exit_code, 1);
    s.idle().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        counters(&s.cache()).get(server_counters::SHARED_DIR_RECOVERIES),
        Some(&1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_that_crashes_on_every_run_fails_after_one_rerun() {
    let s = TestServer::start().await;
    let always = format!(
        "mkdir -p {CACHE_DIR}; n=$(ls {CACHE_DIR} | wc -l); touch {CACHE_DIR}/run.$$; \
         echo \"runs seen in the cache: $n\" >&2; \
         echo \"fatal error: malformed or corrupted AST file: '{CACHE_DIR}/x.pcm'\" >&2; exit 1"
    );
    let (r, _, err) = run(&s, &always).await;
    assert_eq!(r.exit_code, 1);
    assert!(
        err.contains("runs seen in the cache: 0"),
        "the rerun found the cache empty: {err}"
    );
    assert_eq!(
        counter_reaches(&s.cache(), server_counters::SHARED_DIR_RECOVERIES_FAILED, 1).await,
        1
    );
    assert_eq!(
        counters(&s.cache()).get(server_counters::SHARED_DIR_RECOVERIES),
        Some(&1)
    );
    // Not cached: a later Execute runs it again (and recovers once again).
    let mut c = s.clients().await;
    let a = action(&mut c, &always).await;
    assert!(c.cached_result(a).await.is_err());
}

/// A directory outside the cache and every root, with a file that must survive.
fn victim() -> tempfile::TempDir {
    let v = tempfile::tempdir().unwrap();
    std::fs::create_dir(v.path().join("sub")).unwrap();
    std::fs::write(v.path().join("sub/keep.txt"), b"keep").unwrap();
    v
}

fn intact(v: &Path) {
    assert_eq!(std::fs::read(v.join("sub/keep.txt")).unwrap(), b"keep");
    assert_eq!(std::fs::read_dir(v).unwrap().count(), 1, "nothing added");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_an_action_plants_never_lead_clonestage_outside() {
    let s = TestServer::start().await;
    let v = victim();
    let vp = v.path().display();
    // 1. The link in the root replaced by one to the victim; 2. links out of the shared
    // directory, to a directory and to a file, and one climbing out.
    let script = format!(
        "mkdir -p {CACHE_DIR}/H; ln -s {vp} {CACHE_DIR}/out; ln -s {vp}/sub/keep.txt {CACHE_DIR}/H/file; \
         ln -s ../../../../../../../../.. {CACHE_DIR}/H/up; \
         rm {CACHE_DIR} && ln -s {vp} {CACHE_DIR} && echo ok > {OUT}"
    );
    let (r, out, err) = run(&s, &script).await;
    assert_eq!((r.exit_code, out.as_str()), (0, "ok\n"), "{err}");
    assert!(work_entries_after_cleanup(&s.cache()).await.is_empty());
    intact(v.path());
    // A recovery clears the directory with those links in it.
    let crash = format!(
        "echo \"fatal error: malformed or corrupted AST file: '{CACHE_DIR}/H/file'\" >&2; \
         [ -e {CACHE_DIR}/out ] && exit 1; echo clean > {OUT}"
    );
    let (r, out, _) = run(&s, &crash).await;
    assert_eq!((r.exit_code, out.as_str()), (0, "clean\n"));
    intact(v.path());
    // Clearing by eviction is the engine's own test (`shared::tests`): the same remover.
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_directory_counts_toward_max_size_and_is_cleared_only_while_idle() {
    let dir = tempfile::Builder::new()
        .prefix("cs-srv")
        .tempdir_in("/tmp")
        .unwrap();
    let mut opts = TestServer::opts(dir.path(), 2);
    opts.max_size = Some(200_000);
    opts.evict_every = Some(Duration::from_secs(3600));
    let s = TestServer {
        handle: Some(clonestage_server::start(opts).await.unwrap()),
        dir,
    };
    let flags = tempfile::tempdir().unwrap();
    let f = flags.path().display();
    // Fills the directory past the limit, then waits while a check runs.
    let fill = format!(
        "mkdir -p {CACHE_DIR}; head -c 300000 /dev/zero > {CACHE_DIR}/big.pcm; touch {f}/started; \
         i=0; while [ ! -e {f}/go ] && [ $i -lt 2000 ]; do sleep 0.01; i=$((i+1)); done; \
         cat {CACHE_DIR}/big.pcm | wc -c > {OUT}"
    );
    let mut c = s.clients().await;
    let a = action(&mut c, &fill).await;
    let running = tokio::spawn(async move { c.execute(a, true).await.1 });
    wait_file(&flags.path().join("started")).await;
    s.handle().evict_now().await;
    let d = s
        .cache()
        .join("shared")
        .join(clonestage_engine::shared::dir_name(CACHE_DIR));
    assert!(d.join("big.pcm").exists(), "cleared under a running action");
    std::fs::write(flags.path().join("go"), b"").unwrap();
    let resp = running.await.unwrap();
    let r = resp.result.unwrap();
    assert_eq!(r.exit_code, 0);
    assert_eq!(
        String::from_utf8(c_read(&s, &r).await).unwrap().trim(),
        "300000"
    );
    s.idle().await;
    s.handle().evict_now().await;
    assert!(!d.join("big.pcm").exists(), "an idle check clears it");
    assert_eq!(
        counter_reaches(&s.cache(), server_counters::SHARED_DIR_EVICTIONS, 1).await,
        1
    );
    assert!(counters(&s.cache())[server_counters::SHARED_DIR_EVICTED_BYTES] >= 300_000);
}

async fn c_read(s: &TestServer, r: &pb::ActionResult) -> Vec<u8> {
    let mut c = s.clients().await;
    c.read_proto(r.output_files[0].digest.as_ref().unwrap())
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_each_get_their_own_result() {
    let s = TestServer::start_with_jobs(4).await;
    // Each writes its own module under one name (temp file, rename, as clang does), many
    // times, and answers with what it wrote; another writer's bytes in its result would be a
    // wrong cache entry.
    let writer = |tag: &str| {
        format!(
            "mkdir -p {CACHE_DIR}/H; for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do \
             echo {tag}-$i > {CACHE_DIR}/H/m.tmp.$$; mv {CACHE_DIR}/H/m.tmp.$$ {CACHE_DIR}/H/M.pcm; done; \
             echo {tag} > {OUT}"
        )
    };
    let mut tasks = Vec::new();
    for tag in ["a", "b", "c", "d"] {
        let script = writer(tag);
        let mut c = s.clients().await;
        tasks.push(tokio::spawn(async move {
            let a = action(&mut c, &script).await;
            let (_, resp) = c.execute(a, true).await;
            let r = resp.result.unwrap();
            let out = c
                .read_proto(r.output_files[0].digest.as_ref().unwrap())
                .await;
            (a, r.exit_code, String::from_utf8(out).unwrap())
        }));
    }
    let mut c = s.clients().await;
    for (t, tag) in tasks.into_iter().zip(["a", "b", "c", "d"]) {
        let (a, code, out) = t.await.unwrap();
        assert_eq!((code, out.trim()), (0, tag));
        let cached = c.cached_result(a).await.unwrap();
        let got = c
            .read_proto(cached.output_files[0].digest.as_ref().unwrap())
            .await;
        assert_eq!(
            String::from_utf8(got).unwrap().trim(),
            tag,
            "cached result of {tag}"
        );
    }
    let d = s
        .cache()
        .join("shared")
        .join(clonestage_engine::shared::dir_name(CACHE_DIR));
    let last = std::fs::read_to_string(d.join("H/M.pcm")).unwrap();
    assert!(
        last.ends_with("-20\n"),
        "one writer's complete module: {last}"
    );
}
