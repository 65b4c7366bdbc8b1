//! One function per subcommand. They open the cache, call the engine, and print; exit codes:
//! 0 success, 1 failure (message on stderr), 2 `address --for-bazel` with a version naming no
//! release or refused `self-install` arguments, 3 `address`/`status`/`stop` with no server
//! running, 4 `address --same-version` finding a server of another version; `doctor` exits 1
//! when any of its checks fails.

mod address;
mod doctor;
mod self_install;
mod stage;
mod stats;
mod status;

pub use address::{address, AddressMode};
pub use doctor::{doctor, DoctorArgs};
pub use self_install::{self_install, SelfInstallArgs};
pub use stage::{stage, StageArgs};
pub use stats::stats;
pub use status::status;

use anyhow::Context;
use clonestage_engine::{tree, Cache};
use std::path::Path;
use std::process::ExitCode;

pub fn open(cache: &Path) -> anyhow::Result<Cache> {
    Cache::open(cache).with_context(|| format!("opening cache {}", cache.display()))
}

pub fn ingest(cache: &Path, path: &Path, all_executable: bool) -> anyhow::Result<ExitCode> {
    let c = open(cache)?;
    let opts = tree::IngestOptions {
        all_executable,
        ..Default::default()
    };
    let d = tree::ingest_path(&c, path, opts)?;
    println!("{d}");
    Ok(ExitCode::SUCCESS)
}

pub fn verify(cache: &Path) -> anyhow::Result<ExitCode> {
    let c = open(cache)?;
    let (checked, bad) = c.verify()?;
    for b in &bad {
        let actual = b
            .actual
            .map(|a| a.to_string())
            .unwrap_or_else(|| "unreadable".into());
        eprintln!(
            "corrupt: {} at {} (content hashes to {actual}); quarantined",
            b.digest,
            b.path.display()
        );
    }
    println!("verified {checked} cache inodes, {} corrupt", bad.len());
    Ok(if bad.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub fn gc(cache: &Path, max_size: u64) -> anyhow::Result<ExitCode> {
    use clonestage_engine::gc;
    let c = open(cache)?;
    // Pooled copies go first (each pins what it links); a running server's are its own.
    let running = || matches!(clonestage_server::client::running(cache), Ok(Some(_)));
    let r = gc::collect(&c, gc::Pooled::Stale(&running), max_size)?;
    match r.pooled_dropped {
        Some(n) => println!("removed {n} stale pooled copies"),
        None => println!("a server holds this cache: its pooled copies are dropped by its own eviction (serve --max-size)"),
    }
    println!(
        "{} -> {} bytes; evicted {} blobs, {} subtrees; kept {} pinned ({} pinned roots)",
        r.bytes_before,
        r.bytes_after,
        r.blobs_evicted,
        r.subtrees_evicted,
        r.kept_pinned,
        r.pinned_roots
    );
    Ok(ExitCode::SUCCESS)
}

/// `clonestage stop`: 0 once the server released the cache, 3 when none was running, 1 when
/// it still runs after `timeout_s`.
pub fn stop(cache: &Path, timeout_s: u64) -> anyhow::Result<ExitCode> {
    use clonestage_server::client::Stopped;
    match clonestage_server::client::stop(cache, std::time::Duration::from_secs(timeout_s))? {
        Stopped::Stopped(pid) => {
            println!("stopped the server for {} (pid {pid})", cache.display());
            Ok(ExitCode::SUCCESS)
        }
        Stopped::NotRunning => {
            eprintln!("clonestage: no server is running for {}", cache.display());
            Ok(ExitCode::from(3))
        }
        Stopped::StillRunning(pid) => {
            eprintln!(
                "clonestage: the server for {} (pid {pid}) got SIGTERM but still runs after {timeout_s}s (running actions drain for up to 10s; send SIGTERM again to cancel them)",
                cache.display()
            );
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `123`, `10K`, `64M`, `2G` (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        Some('T' | 't') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("'{s}' is not a size (bytes, or with K/M/G/T)"))
}
