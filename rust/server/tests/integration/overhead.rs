//! Per-action overhead of Execute against running the wrapper directly (ignored by default;
//! meaningful in release: `cargo test --release -p clonestage-server --test integration overhead:: -- --ignored --nocapture`).

use crate::common;

use clonestage_engine::Digest;
use common::*;
use std::time::Instant;

const N: usize = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn trivial_action_overhead() {
    let mut s = TestServer::start_with_jobs(1).await;
    let mut c = s.clients().await;
    let src = c.upload(&[b"input".to_vec()]).await[0];
    let root = bazel_remote_apis::build::bazel::remote::execution::v2::Directory {
        files: vec![file("in", src, false)],
        ..Default::default()
    };
    let root_d = c.upload(&[encode(&root)]).await[0];
    let mut actions: Vec<Digest> = Vec::new();
    for i in 0..N + 5 {
        let mut cmd = sh(&format!("echo {i} > out"));
        cmd.output_paths = vec!["out".into()];
        actions.push(upload_action(&mut c, &cmd, root_d, None, false).await);
    }
    for a in &actions[N..] {
        c.execute(*a, true).await; // warm up
    }
    let t0 = Instant::now();
    let mut phases = [0i128; 5];
    for a in &actions[..N] {
        let (_, r) = c.execute(*a, true).await;
        let r = r.result.unwrap();
        assert_eq!(r.exit_code, 0);
        let m = r.execution_metadata.unwrap();
        let ns = |t: &Option<bazel_remote_apis::google::protobuf::Timestamp>| {
            let t = t.as_ref().unwrap();
            t.seconds as i128 * 1_000_000_000 + t.nanos as i128
        };
        let marks = [
            ns(&m.queued_timestamp),
            ns(&m.input_fetch_start_timestamp),
            ns(&m.execution_start_timestamp),
            ns(&m.execution_completed_timestamp),
            ns(&m.output_upload_completed_timestamp),
            ns(&m.worker_completed_timestamp),
        ];
        for i in 0..5 {
            phases[i] += marks[i + 1] - marks[i];
        }
    }
    let served = t0.elapsed() / N as u32;
    let us: Vec<i128> = phases.iter().map(|p| p / N as i128 / 1000).collect();
    println!(
        "mean us: prepare+queue {}, staging {}, exec {}, outputs {}, cleanup {}",
        us[0], us[1], us[2], us[3], us[4]
    );

    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    for i in 0..N {
        let st = std::process::Command::new("/bin/sh")
            .current_dir(dir.path())
            .args(["-c", &format!("echo {i} > out")])
            .status()
            .unwrap();
        assert!(st.success());
    }
    let local = t0.elapsed() / N as u32;
    let t0 = Instant::now();
    for i in 0..N {
        let p = |n: &str| dir.path().join(n);
        let st = std::process::Command::new(spawn_wrapper())
            .arg("--cwd")
            .arg(dir.path())
            .args(["--timeout", "0", "--kill_delay", "5", "--stdout"])
            .arg(p("o"))
            .arg("--stderr")
            .arg(p("e"))
            .arg("--stats")
            .arg(p("s"))
            .args(["--", "/bin/sh", "-c", &format!("echo {i} > out")])
            .status()
            .unwrap();
        assert!(st.success());
    }
    let wrapped = t0.elapsed() / N as u32;
    println!(
        "per action: Execute {served:?}, wrapper alone {wrapped:?}, direct /bin/sh {local:?}; \
         server overhead {:?}, wrapper overhead {:?}",
        served.saturating_sub(wrapped),
        wrapped.saturating_sub(local)
    );
    let stats = clonestage_engine::stats::load(&s.cache()).unwrap();
    println!(
        "staging percentiles: {:?}",
        clonestage_server::stage_percentiles(&stats)
    );
    s.stop().await;
}
