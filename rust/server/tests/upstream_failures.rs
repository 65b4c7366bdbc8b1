//! The upstream fails (issue 14): down (closed port), stalled (accepts, never answers),
//! answering errors, lying with wrong bytes, lying with a result naming a blob it lacks.
//! Builds stay green and finish (a generous bound only a hang would hit), the breaker stops
//! the asking, and nothing wrong enters the local cache.

// Bazel 4 names outputs with output_files.
#![allow(deprecated)]

mod common;

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::{Cache, Digest};
use clonestage_server::server_counters;
use clonestage_server::UpstreamOptions;
use common::fake_upstream::{down_url, stalled_url, FakeUpstream, Mode};
use common::*;
use std::time::Duration;

/// Far above what the breaker allows (3 lookups of 2 x 300 ms, then none): only a hang
/// reaches it.
const HANG: Duration = Duration::from_secs(60);

/// The timeout of the tests about a dead or stalled upstream: short, so they are quick.
const QUICK: Duration = Duration::from_millis(300);
/// The timeout of the tests about an answering upstream: an in-process fake answers in
/// microseconds, but a loaded CI machine can hold a first answer past 300 ms, which is a stall
/// that opens the breaker before the behaviour under test is seen.
const PATIENT: Duration = Duration::from_secs(5);

fn opts(url: &str, timeout: Duration) -> UpstreamOptions {
    UpstreamOptions {
        timeout,
        ..UpstreamOptions::new(url)
    }
}

fn command() -> pb::Command {
    let mut cmd = sh("echo \"made from $(cat pkg/in.txt)\" > pkg/out.txt");
    cmd.output_files = vec!["pkg/out.txt".into()];
    cmd
}

/// Like Bazel: GetActionResult (a miss), then Execute; the action must run here and succeed.
async fn build(c: &mut Clients, marker: &str, plant: &impl Fn(Digest)) -> pb::ActionResult {
    let root = one_file_root(c, marker.as_bytes()).await;
    let act = upload_action(c, &command(), root, None, false).await;
    plant(act);
    let miss = c.cached_result(act).await.unwrap_err();
    assert_eq!(miss.code(), tonic::Code::NotFound, "{miss:?}");
    let (_, resp) = c.execute(act, false).await;
    assert!(!resp.cached_result);
    let r = resp.result.expect("a result");
    assert_eq!(r.exit_code, 0);
    let out = r.output_files[0].digest.clone().unwrap();
    assert_eq!(
        c.read_proto(&out).await,
        format!("made from {marker}\n").into_bytes()
    );
    // What the local cache serves now is what ran here.
    assert_eq!(c.cached_result(act).await.unwrap(), r);
    r
}

/// Four actions through a server whose upstream is `url`; returns its counters.
async fn four_builds(
    url: &str,
    timeout: Duration,
    plant: impl Fn(Digest),
) -> std::collections::BTreeMap<String, u64> {
    let mut s = TestServer::start_upstream(opts(url, timeout)).await;
    let mut c = s.clients().await;
    tokio::time::timeout(HANG, async {
        for i in 0..4 {
            build(&mut c, &format!("{url} {i}"), &plant).await;
        }
    })
    .await
    .expect("the builds finished");
    s.stop().await;
    let (_, bad) = Cache::open(&s.cache()).unwrap().verify().unwrap();
    assert!(bad.is_empty(), "corrupt blobs in the local cache: {bad:?}");
    clonestage_engine::stats::load(&s.cache()).unwrap().extra
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_upstream_builds_stay_green() {
    let k = four_builds(&down_url(), QUICK, |_| {}).await;
    assert_eq!(k[server_counters::ACTIONS], 4);
    assert!(k[server_counters::UPSTREAM_ERRORS] >= 3, "{k:?}");
    assert_eq!(k[server_counters::UPSTREAM_BREAKER_OPENS], 1, "{k:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_upstream_builds_stay_green() {
    let k = four_builds(&stalled_url(), QUICK, |_| {}).await;
    assert_eq!(k[server_counters::ACTIONS], 4);
    assert_eq!(
        k[server_counters::UPSTREAM_ERRORS],
        1,
        "one unanswered lookup opens the breaker at once (each costs a timeout): {k:?}"
    );
    assert_eq!(k[server_counters::UPSTREAM_BREAKER_OPENS], 1, "{k:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erroring_upstream_is_asked_three_times_then_left_alone() {
    let up = FakeUpstream::start().await;
    up.set_mode(Mode::Errors);
    let k = four_builds(&up.url, PATIENT, |_| {}).await;
    assert_eq!(k[server_counters::ACTIONS], 4);
    assert_eq!(
        up.calls("GetActionResult"),
        3,
        "breaker open after 3 failures"
    );
    assert_eq!(k[server_counters::UPSTREAM_BREAKER_OPENS], 1, "{k:?}");
    assert_eq!(k.get(server_counters::UPSTREAM_AC_HITS), None);
}

/// A result the upstream claims for `act`, naming `blob`.
fn planted(blob: Digest) -> pb::ActionResult {
    pb::ActionResult {
        output_files: vec![pb::OutputFile {
            path: "pkg/out.txt".into(),
            digest: Some(blob.to_proto()),
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_bytes_never_enter_the_local_cache() {
    let up = FakeUpstream::start().await;
    let lie = up.put_blob(b"planted output\n");
    up.set_mode(Mode::WrongBytes);
    let fake = up.fake.clone();
    let mut s = TestServer::start_upstream(opts(&up.url, PATIENT)).await;
    let mut c = s.clients().await;
    tokio::time::timeout(HANG, async {
        for i in 0..2 {
            build(&mut c, &format!("wrong {i}"), &|act| {
                fake.data.lock().unwrap().ac.insert(act, planted(lie));
            })
            .await;
        }
    })
    .await
    .expect("the builds finished");
    s.stop().await;
    let cache = Cache::open(&s.cache()).unwrap();
    assert!(
        !cache.contains(&lie),
        "a blob the upstream sent wrong bytes for"
    );
    assert!(cache.verify().unwrap().1.is_empty());
    let k = clonestage_engine::stats::load(&s.cache()).unwrap().extra;
    assert!(k[server_counters::UPSTREAM_REJECTED] >= 2, "{k:?}");
    assert_eq!(k[server_counters::ACTIONS], 2);
    assert_eq!(k.get(server_counters::UPSTREAM_AC_HITS), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_naming_a_missing_blob_is_rejected() {
    let up = FakeUpstream::start().await;
    let absent = Digest::of_bytes(b"the upstream never had this");
    let fake = up.fake.clone();
    let k = four_builds(&up.url, PATIENT, move |act| {
        fake.data.lock().unwrap().ac.insert(act, planted(absent));
    })
    .await;
    assert_eq!(k[server_counters::ACTIONS], 4);
    assert!(k[server_counters::UPSTREAM_REJECTED] >= 3, "{k:?}");
    assert_eq!(k.get(server_counters::UPSTREAM_AC_HITS), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcs_to_a_plaintext_server_fails_cleanly() {
    // The TLS path is taken (handshake against a server that speaks plain HTTP/2) and fails
    // as an upstream error: no panic, builds green.
    let up = FakeUpstream::start().await;
    let url = up.url.replace("grpc://", "grpcs://");
    let k = four_builds(&url, PATIENT, |_| {}).await;
    assert_eq!(k[server_counters::ACTIONS], 4);
    assert!(k[server_counters::UPSTREAM_ERRORS] >= 3, "{k:?}");
    assert_eq!(up.calls("GetActionResult"), 0);
}
