//! `clonestage status`: whether a server is up for the cache (pid, version, unix socket, TCP
//! port; never the token), its upstream (`upstream: URL (...)` or `upstream: none`), the cache's filesystem, and the method the engine stages by there
//! and why (its probe of that device, the one the server uses, kept in devices.json). Exit 0
//! when a ready server holds the cache, 3 when none does (or it is still starting), like
//! `address` and `stop`.

use anyhow::Context;
use clonestage_engine::platform::{self, TreeClone};
use clonestage_engine::stage::{DeviceProfile, FileMethod};
use clonestage_engine::Stager;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

pub fn status(cache: &Path) -> anyhow::Result<ExitCode> {
    let server = clonestage_server::client::running(cache)?;
    let up = matches!(&server, Some(s) if s.tcp_port.is_some());
    if !cache.exists() {
        println!("cache: {} (does not exist yet)", cache.display());
        println!("server: down (no cache)");
        return Ok(ExitCode::from(3));
    }
    let fs = platform::filesystem_name(cache)
        .with_context(|| format!("the filesystem of {}", cache.display()))?;
    println!("cache: {} ({fs})", cache.display());
    match &server {
        None => println!(
            "server: down (nothing holds {}; tools/bazel starts one, or `clonestage serve`)",
            cache.join("server/lock").display()
        ),
        Some(s) => {
            let version = s
                .version
                .as_deref()
                .unwrap_or("unknown (no server/version file)");
            match s.tcp_port {
                Some(_) => println!("server: up, pid {}, clonestage {version}", s.pid),
                None => println!(
                    "server: starting, pid {}, clonestage {version} (not ready yet)",
                    s.pid
                ),
            }
            if s.version.as_deref() != Some(clonestage_server::VERSION) {
                println!(
                    "  (this clonestage is {}: tools/bazel of this version restarts it)",
                    clonestage_server::VERSION
                );
            }
            println!("  unix socket: {} (Bazel 6+)", s.socket.display());
            if let Some(port) = s.tcp_port {
                println!(
                    "  tcp: 127.0.0.1:{port} (Bazel 4/5; executor and token in {}, 0600; the token is not shown)",
                    s.tcp_bazelrc.display()
                );
            }
        }
    }
    // The running server's team cache (`--upstream`), as it wrote it at start.
    match server
        .as_ref()
        .and_then(|_| clonestage_server::client::upstream_description(cache))
    {
        Some(d) => println!("upstream: {d}"),
        None => println!("upstream: none"),
    }
    let c = Arc::new(super::open(cache)?);
    // Actions are staged into <cache>/work; before any server made it, the cache's own
    // directory is on the same device.
    let work = c.root().join("work");
    let dest = if work.is_dir() {
        work
    } else {
        c.root().to_path_buf()
    };
    let prof = Stager::new(c.clone())
        .profile_for(&dest)
        .with_context(|| format!("probing staging into {}", dest.display()))?;
    let (method, why) = explain(&prof, &fs, &dest);
    println!("staging: {method}");
    println!("  why: {why}");
    Ok(if up {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}

/// The method in a few words, and why the probe chose it.
pub(crate) fn explain(p: &DeviceProfile, fs: &str, dest: &Path) -> (String, String) {
    let clone = platform::FILE_CLONE_METHOD;
    let to = format!("from the cache into {}", dest.display());
    let (method, mut why) = match (p.file_method, p.tree_clone) {
        (FileMethod::Clone, Some(TreeClone::Snapshot)) => (
            format!("{clone} per file, btrfs snapshots of whole subtrees"),
            format!("on {fs} a trial {clone} and a trial snapshot {to} both worked; a subtree is snapshotted when that costs less than placing its files"),
        ),
        (FileMethod::Clone, Some(TreeClone::Clonefile)) => (
            "clonefile per file and of whole directories".to_string(),
            format!("on {fs} a trial clonefile of a file and of a directory {to} both worked"),
        ),
        (FileMethod::Clone, None) => (
            format!("{clone} per file (copy-on-write: each action gets private inodes)"),
            format!("on {fs} a trial {clone} {to} worked; {fs} clones no whole trees"),
        ),
        (FileMethod::Hardlink, _) => (
            "hardlink per file (the cache's read-only inodes; tampering is detected and quarantined)".to_string(),
            format!("on {fs} a trial {clone} {to} failed (no copy-on-write clones here: ext4 has none, XFS needs reflink=1; put the cache on btrfs, XFS with reflink or APFS for clones), and a hardlink worked"),
        ),
        (FileMethod::Copy, _) => (
            "copy per file (slowest)".to_string(),
            format!("on {fs} neither a trial {clone} nor a hardlink {to} worked"),
        ),
    };
    if !p.warned.is_empty() {
        let r: Vec<&str> = p.warned.iter().map(String::as_str).collect();
        why.push_str(&format!(
            "; downgraded after failures at run time: {}",
            r.join(", ")
        ));
    }
    (method, why)
}
