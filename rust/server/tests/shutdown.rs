//! SIGTERM semantics, driven through `ServerHandle::shutdown`: running actions finish within
//! the grace period; past it they are cancelled (UNAVAILABLE, not cached), work dirs are
//! removed, and a restarted server sweeps what a killed one left.

mod common;

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::Digest;
use common::*;
use std::time::{Duration, Instant};
use tonic::Code;

async fn start_action(
    c: &mut Clients,
    script: &str,
) -> tonic::codec::Streaming<bazel_remote_apis::google::longrunning::Operation> {
    let action = upload_action(c, &sh(script), Digest::EMPTY, None, false).await;
    c.exec
        .execute(pb::ExecuteRequest {
            action_digest: Some(action.to_proto()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

async fn last(
    mut s: tonic::codec::Streaming<bazel_remote_apis::google::longrunning::Operation>,
) -> pb::ExecuteResponse {
    let mut last = None;
    while let Some(op) = s.message().await.unwrap() {
        last = Some(op);
    }
    response_of(&last.unwrap())
}

async fn wait_running(h: &clonestage_server::ServerHandle) {
    let t0 = Instant::now();
    while h.running_actions() == 0 && t0.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_running_actions() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let stream = start_action(&mut c, "sleep 0.5; echo finished").await;
    wait_running(s.handle()).await;
    tokio::time::sleep(Duration::from_millis(100)).await; // let it reach the wrapper
    let h = s.handle.take().unwrap();
    let stopping = tokio::spawn(h.shutdown(Duration::from_secs(10), std::future::pending()));
    let resp = last(stream).await;
    assert_eq!(
        resp.status.as_ref().map_or(0, |s| s.code),
        0,
        "{:?}",
        resp.status
    );
    assert_eq!(resp.result.unwrap().exit_code, 0);
    stopping.await.unwrap().unwrap();
    assert!(work_entries(&s.cache()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_cancels_after_the_grace_period() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let stream = start_action(&mut c, "exec sleep 60").await;
    wait_running(s.handle()).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let h = s.handle.take().unwrap();
    let t0 = Instant::now();
    let stopping = tokio::spawn(h.shutdown(Duration::from_millis(200), std::future::pending()));
    let resp = last(stream).await;
    assert_eq!(resp.status.unwrap().code, Code::Unavailable as i32);
    stopping.await.unwrap().unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(8),
        "cancel took {:?}",
        t0.elapsed()
    );
    assert!(work_entries(&s.cache()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_sweeps_leftover_work_dirs() {
    let dir = tempfile::Builder::new()
        .prefix("cs-srv")
        .tempdir_in("/tmp")
        .unwrap();
    let cache = dir.path().join("cache");
    let leftover = cache.join("work/12345-0/root/ro");
    std::fs::create_dir_all(&leftover).unwrap();
    std::fs::write(leftover.join("f"), b"x").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&leftover, std::fs::Permissions::from_mode(0o555)).unwrap();
    // A ready work dir the killed server was still filling.
    let half_made = cache.join("work-making/12345-1");
    std::fs::create_dir_all(&half_made).unwrap();
    std::fs::write(half_made.join("stdout"), b"").unwrap();
    let h = clonestage_server::start(TestServer::opts(dir.path(), 1))
        .await
        .unwrap();
    // The new server keeps work dirs ready from the start (CI under load caught one in
    // `work/` right after start): those are its own, not leftovers.
    assert!(
        used_work_entries(&cache).is_empty(),
        "left over: {:?}",
        used_work_entries(&cache)
    );
    assert!(!half_made.exists(), "a half-made ready dir was not swept");
    h.shutdown(Duration::from_secs(1), std::future::pending())
        .await
        .unwrap();
    assert!(
        work_entries(&cache).is_empty(),
        "ready dirs left at shutdown"
    );
    assert_eq!(
        std::fs::read_dir(cache.join("work-making"))
            .unwrap()
            .count(),
        0
    );
}
