//! What the CLI's end-to-end tests share: running the `clonestage` binary on a cache, and a
//! `clonestage serve` on it that is ready to answer.
#![allow(dead_code)] // each test file uses its own part of it

use std::path::Path;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

/// `clonestage --cache CACHE ARGS...`, run to completion.
pub fn cs(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_clonestage"))
        .arg("--cache")
        .arg(cache)
        .args(args)
        .output()
        .unwrap()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A server on `cache`, ready (`clonestage address` answers). Nothing runs an action in these
/// tests, so any executable serves as the spawn wrapper.
pub fn serve(cache: &Path) -> Child {
    let mut server = Command::new(env!("CARGO_BIN_EXE_clonestage"))
        .arg("--cache")
        .arg(cache)
        .args(["serve", "--spawn", "/bin/true", "--jobs", "1"])
        .env("CLONESTAGE_PRESPAWN", "0")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !cs(cache, &["address"]).status.success() {
        assert!(t0.elapsed() < Duration::from_secs(30), "server never ready");
        assert!(server.try_wait().unwrap().is_none(), "serve ended early");
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

// One file for the server's integration tests and these.
#[path = "../../../server/tests/common/loop_mount.rs"]
pub mod loop_mount;
