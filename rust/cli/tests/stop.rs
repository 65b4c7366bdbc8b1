//! `clonestage stop`: stops the server serving a cache (SIGTERM, then waits for it to release
//! the cache lock), with exit 3 when none runs.

mod common;

use common::{cs, serve};

#[test]
fn stop_ends_the_server_for_the_cache_and_says_when_none_runs() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let none = cs(&cache, &["stop"]);
    assert_eq!(none.status.code(), Some(3), "{none:?}");
    assert!(String::from_utf8_lossy(&none.stderr).contains("no server is running"));

    let mut server = serve(&cache);
    let stopped = cs(&cache, &["stop", "--timeout", "20"]);
    assert_eq!(stopped.status.code(), Some(0), "{stopped:?}");
    assert!(
        String::from_utf8_lossy(&stopped.stdout).contains(&format!("pid {}", server.id())),
        "{stopped:?}"
    );
    // By the time stop returns, the cache is free: the server has exited (or is exiting).
    let status = server.wait().unwrap();
    assert!(status.success(), "serve exited with {status}");
    assert_eq!(cs(&cache, &["address"]).status.code(), Some(3));
    assert_eq!(cs(&cache, &["stop"]).status.code(), Some(3));
}
