//! `clonestage stage --preserve-inodes` and `CLONESTAGE_PRESERVE_INODES` (what the launcher
//! passes to `serve`) on the XFS loop mount (`CLONESTAGE_TEST_XFS`; with
//! `CLONESTAGE_REQUIRE_FS=1` a missing mount fails): a Mach-O dylib shares the cache's inode
//! while the rest is reflinked; a minimum link age clones it instead; a bad value is refused.

mod common;

use common::loop_mount::loop_mount;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Output;

fn xfs() -> Option<PathBuf> {
    loop_mount("CLONESTAGE_TEST_XFS")
}

fn cs(cache: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_clonestage"));
    c.arg("--cache").arg(cache).args(args);
    c.env_remove("CLONESTAGE_PRESERVE_INODES")
        .env_remove("CLONESTAGE_MACHO_LINK_AGE_MS");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn dylib() -> Vec<u8> {
    let mut v = vec![7u8; 8192];
    v[..4].copy_from_slice(&0xfeed_facf_u32.to_le_bytes());
    v[12..16].copy_from_slice(&6u32.to_le_bytes()); // MH_DYLIB
    v
}

/// The counters `stage --json` printed.
fn counters(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn stage_preserve_inodes_macho_links_the_dylib_and_reflinks_the_rest() {
    let Some(base) = xfs() else { return };
    let t = tempfile::Builder::new()
        .prefix("cs-cli-")
        .tempdir_in(&base)
        .unwrap();
    let (cache, src) = (t.path().join("cache"), t.path().join("src"));
    std::fs::create_dir_all(src.join("lib")).unwrap();
    std::fs::write(src.join("lib/libA.dylib"), dylib()).unwrap();
    std::fs::write(src.join("lib/a.h"), "// a\n").unwrap();
    let o = cs(&cache, &["ingest", src.to_str().unwrap()], &[]);
    assert!(o.status.success());
    let digest = String::from_utf8(o.stdout).unwrap().trim().to_string();
    let blob_ino = || {
        let d = clonestage_engine::Digest::of_bytes(&dylib());
        let shard = &d.hex()[..2];
        std::fs::metadata(cache.join("blobs").join(shard).join(d.file_name()))
            .unwrap()
            .ino()
    };
    let stage = |name: &str, args: &[&str], env: &[(&str, &str)]| {
        let dest = t.path().join(name);
        let mut a = vec!["stage", &digest, dest.to_str().unwrap(), "--json"];
        a.extend_from_slice(args);
        let o = cs(&cache, &a, env);
        (
            counters(&o),
            std::fs::metadata(dest.join("lib/libA.dylib"))
                .unwrap()
                .ino(),
        )
    };
    let (c, ino) = stage(
        "flag",
        &["--preserve-inodes", "macho", "--macho-link-age-ms", "0"],
        &[],
    );
    assert_eq!(
        (c["code_linked"].as_u64(), c["reflink"].as_u64()),
        (Some(1), Some(1)),
        "{c}"
    );
    assert_eq!(ino, blob_ino());
    let env = [
        ("CLONESTAGE_PRESERVE_INODES", "macho"),
        ("CLONESTAGE_MACHO_LINK_AGE_MS", "0"),
    ];
    let (c, ino) = stage("env", &[], &env);
    assert_eq!(c["code_linked"].as_u64(), Some(1), "{c}");
    assert_eq!(ino, blob_ino());
    let (c, ino) = stage(
        "aged",
        &["--preserve-inodes", "macho", "--macho-link-age-ms", "5000"],
        &[],
    );
    assert_eq!(
        (c["code_linked"].as_u64(), c["code_cloned"].as_u64()),
        (Some(0), Some(1)),
        "{c}"
    );
    assert_ne!(ino, blob_ino());
    let (c, ino) = stage("none", &[], &[]);
    assert_eq!(c["hardlink"].as_u64(), Some(0), "{c}");
    assert_ne!(ino, blob_ino());
    let o = cs(
        &cache,
        &[
            "stage",
            &digest,
            t.path().join("bad").to_str().unwrap(),
            "--preserve-inodes",
            "all",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("none or macho"));
}
