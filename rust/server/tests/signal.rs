//! `serve()` itself: runs until SIGTERM, then stops cleanly and releases the cache. Alone in
//! its test binary because it signals its own process.

mod common;

use clonestage_server::client::{self, AddressForm};
use common::*;
use std::time::{Duration, Instant};

#[test]
fn serve_stops_on_sigterm() {
    let dir = tempfile::Builder::new()
        .prefix("cs-srv")
        .tempdir_in("/tmp")
        .unwrap();
    let opts = TestServer::opts(dir.path(), 1);
    let cache = opts.cache_dir.clone();
    let server = std::thread::spawn(move || clonestage_server::serve(opts));
    let t0 = Instant::now();
    while client::address(&cache, AddressForm::Tcp).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "server did not become ready"
        );
        assert!(!server.is_finished(), "serve() ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
    unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    server
        .join()
        .unwrap()
        .expect("serve() returns Ok after SIGTERM");
    let err = client::address(&cache, AddressForm::Unix)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no clonestage server is running"), "{err}");
}
