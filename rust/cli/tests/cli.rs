//! End-to-end tests of the `clonestage` binary: the interface scripts, CI and later layers use.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

fn cs(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_clonestage"))
        .arg("--cache")
        .arg(cache)
        .args(args)
        .env_remove("CLONESTAGE_FAULT_FAIL_AFTER")
        .output()
        .unwrap()
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone())
        .unwrap()
        .trim()
        .to_string()
}

fn sample(src: &Path) {
    std::fs::create_dir_all(src.join("sdk/inc")).unwrap();
    std::fs::create_dir_all(src.join("pkg")).unwrap();
    for i in 0..50 {
        std::fs::write(src.join(format!("sdk/inc/h{i}.h")), format!("// {i}\n")).unwrap();
    }
    std::fs::write(src.join("pkg/main.swift"), "print(1)\n").unwrap();
}

#[test]
fn ingest_an_empty_directory_gives_the_empty_digest() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir(t.path().join("empty")).unwrap();
    let out = ok(&cs(
        &t.path().join("c"),
        &["ingest", t.path().join("empty").to_str().unwrap()],
    ));
    assert_eq!(
        out,
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855/0"
    );
}

#[test]
fn ingest_stage_stats_round_trip() {
    let t = tempfile::tempdir().unwrap();
    let c = t.path().join("c");
    sample(&t.path().join("src"));
    let d = ok(&cs(&c, &["ingest", t.path().join("src").to_str().unwrap()]));
    let dest = t.path().join("root");
    ok(&cs(
        &c,
        &[
            "stage",
            &d,
            dest.to_str().unwrap(),
            "--output",
            "pkg/out/main.o",
        ],
    ));
    assert_eq!(
        std::fs::read(dest.join("pkg/main.swift")).unwrap(),
        b"print(1)\n"
    );
    assert_eq!(
        std::fs::metadata(dest.join("pkg/out"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o755
    );
    let stats: serde_json::Value =
        serde_json::from_str(&ok(&cs(&c, &["stats", "--json"]))).unwrap();
    for k in [
        "clonefile",
        "reflink",
        "snapshot",
        "hardlink",
        "copy",
        "subtree_hits",
        "subtree_misses",
        "fallbacks",
    ] {
        assert!(stats[k].is_u64(), "stats lacks integer {k}: {stats}");
    }
    let placed: u64 = ["clonefile", "reflink", "hardlink", "copy"]
        .iter()
        .map(|k| stats[k].as_u64().unwrap())
        .sum();
    assert_eq!(placed, 51);
    assert_eq!(stats["stages"], 1);
    // The staged root is in the access log eviction reads (written at the command's exit).
    let log = std::fs::read_to_string(c.join("access.log")).unwrap();
    assert!(log.trim_end().ends_with(&d), "{log}");
}

#[test]
fn stage_refuses_an_existing_destination_with_a_clear_error() {
    let t = tempfile::tempdir().unwrap();
    let c = t.path().join("c");
    sample(&t.path().join("src"));
    let d = ok(&cs(&c, &["ingest", t.path().join("src").to_str().unwrap()]));
    std::fs::create_dir(t.path().join("taken")).unwrap();
    let o = cs(&c, &["stage", &d, t.path().join("taken").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("already exists"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // A digest that is not a digest, and a tree that is not in the cache.
    let o = cs(
        &c,
        &["stage", "nothex/12", t.path().join("x").to_str().unwrap()],
    );
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("digest"));
    let absent = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/10";
    let o = cs(&c, &["stage", absent, t.path().join("x").to_str().unwrap()]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("missing"));
    assert!(!t.path().join("x").exists());
    // A failed stage's count is written at exit (the stager's ledger), the digest that did
    // not parse never reached the stager.
    let stats: serde_json::Value =
        serde_json::from_str(&ok(&cs(&c, &["stats", "--json"]))).unwrap();
    assert_eq!(
        (&stats["stage_failures"], &stats["stages"]),
        (&2.into(), &0.into()),
        "{stats}"
    );
    assert!(!c.join("access.log").exists(), "nothing was staged");
}

// Needs the test hook (cargo feature `fault-injection`; tests/run.sh runs it with the hook).
#[cfg(feature = "fault-injection")]
#[test]
fn a_failed_stage_leaves_nothing_behind() {
    let t = tempfile::tempdir().unwrap();
    let c = t.path().join("c");
    sample(&t.path().join("src"));
    let d = ok(&cs(&c, &["ingest", t.path().join("src").to_str().unwrap()]));
    let out = t.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let o = stage_with_fault(&c, &d, &out.join("root"), "20");
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("injected fault after 20 files"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        std::fs::read_dir(&out).unwrap().count(),
        0,
        "a failed stage left files behind"
    );
    ok(&cs(&c, &["verify"]));
}

/// `clonestage stage` with `CLONESTAGE_FAULT_FAIL_AFTER` set.
fn stage_with_fault(cache: &Path, digest: &str, dest: &Path, after: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_clonestage"))
        .args([
            "--cache",
            cache.to_str().unwrap(),
            "stage",
            digest,
            dest.to_str().unwrap(),
        ])
        .env("CLONESTAGE_FAULT_FAIL_AFTER", after)
        .output()
        .unwrap()
}

/// The binary users install is a default build: the test hook must not be in it, so the
/// variable that would trigger it changes nothing.
#[cfg(not(feature = "fault-injection"))]
#[test]
fn a_default_build_ignores_the_fault_hook() {
    let t = tempfile::tempdir().unwrap();
    let c = t.path().join("c");
    sample(&t.path().join("src"));
    let d = ok(&cs(&c, &["ingest", t.path().join("src").to_str().unwrap()]));
    let root = t.path().join("root");
    let o = stage_with_fault(&c, &d, &root, "1");
    ok(&o);
    assert_eq!(
        std::fs::read_dir(root.join("sdk/inc")).unwrap().count(),
        50,
        "the stage did not complete"
    );
}

/// The hook's message is in the binary exactly when it was built with the feature (the
/// binary under test is target/*/clonestage, which tests/run.sh later uses: a dev-dependency
/// that turned the feature on would put the hook there, and fail this test).
#[test]
fn the_binary_carries_the_fault_hook_only_with_the_feature() {
    let bin = std::fs::read(env!("CARGO_BIN_EXE_clonestage")).unwrap();
    let needle = b"injected fault after";
    let found = bin.windows(needle.len()).any(|w| w == needle);
    assert_eq!(
        found,
        cfg!(feature = "fault-injection"),
        "the fault hook's message in {}: {found}",
        env!("CARGO_BIN_EXE_clonestage")
    );
}

#[test]
fn two_processes_ingesting_the_same_blob_at_once_agree_and_leave_a_sound_cache() {
    let t = tempfile::tempdir().unwrap();
    let c = t.path().join("c");
    let big = t.path().join("big.bin");
    let data: Vec<u8> = (0..32u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    std::fs::write(&big, &data).unwrap();
    for _ in 0..4 {
        let spawn = || {
            Command::new(env!("CARGO_BIN_EXE_clonestage"))
                .args([
                    "--cache",
                    c.to_str().unwrap(),
                    "ingest",
                    big.to_str().unwrap(),
                ])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (spawn(), spawn());
        let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
        assert_eq!(ok(&a), ok(&b));
        let out = ok(&a);
        assert!(out.ends_with(&format!("/{}", data.len())), "{out}");
        let v = ok(&cs(&c, &["verify"]));
        assert!(v.contains(", 0 corrupt"), "{v}");
        assert_eq!(
            std::fs::read_dir(c.join("tmp")).unwrap().count(),
            0,
            "temp files left"
        );
        std::fs::remove_dir_all(c.join("blobs")).unwrap();
    }
}

#[test]
fn verify_exits_1_naming_a_corrupt_blob() {
    let t = tempfile::tempdir().unwrap();
    let c = t.path().join("c");
    std::fs::write(t.path().join("f"), b"payload").unwrap();
    let d = ok(&cs(&c, &["ingest", t.path().join("f").to_str().unwrap()]));
    let hex = d.split('/').next().unwrap();
    let blob = c.join("blobs").join(&hex[..2]).join(format!("{hex}-7"));
    std::fs::set_permissions(&blob, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&blob, b"paYload").unwrap();
    let o = cs(&c, &["verify"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&d),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn gc_accepts_sizes_and_reports() {
    let t = tempfile::tempdir().unwrap();
    let c = t.path().join("c");
    std::fs::write(t.path().join("f"), vec![1u8; 4096]).unwrap();
    ok(&cs(&c, &["ingest", t.path().join("f").to_str().unwrap()]));
    let out = ok(&cs(&c, &["gc", "--max-size", "1K"]));
    assert!(out.contains("evicted 1 blobs"), "{out}");
    assert!(!cs(&c, &["gc", "--max-size", "lots"]).status.success());
}

#[test]
fn a_report_piped_into_a_closed_reader_ends_by_sigpipe_not_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    let t = tempfile::tempdir().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader); // `clonestage stats | head -0`: nobody reads
    let o = Command::new(env!("CARGO_BIN_EXE_clonestage"))
        .arg("--cache")
        .arg(t.path().join("c"))
        .arg("stats")
        .stdout(writer)
        .output()
        .unwrap();
    assert_eq!(
        o.status.signal(),
        Some(libc::SIGPIPE),
        "{:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn bench_json_has_every_method_and_the_ratios_against_the_raw_baselines_and_the_floor() {
    let t = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_clonestage"))
        .args([
            "bench",
            "--shape",
            "small_flat",
            "--runs",
            "2",
            "--min-runs",
            "2",
        ])
        .args(["--copy-runs", "1", "--loaded", "never", "--json", "--dir"])
        .arg(t.path())
        .output()
        .unwrap();
    let out = ok(&o);
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let row = |m: &str| {
        rows.iter()
            .find(|r| r["method"] == m)
            .unwrap_or_else(|| panic!("no {m} row in {out}"))
    };
    for m in [
        "hardlink",
        "hardlink_cas",
        "hardlink_cas_tree",
        "copy",
        "symlink",
    ] {
        assert_eq!(row(m)["files"], 64, "{m}");
        assert!(row(m)["median_ms"].as_f64().unwrap() > 0.0, "{m}");
    }
    for m in ["stage_cold", "stage_warm"] {
        let r = row(m);
        assert_eq!(r["runs"], 2, "{m}");
        let raw = r["vs_raw"].as_str().unwrap();
        assert_eq!(r["vs_raw_cas"], format!("{raw}_cas"), "{m}");
        assert!(r["vs_raw_cas_paired"].as_f64().unwrap() > 0.0, "{m}");
        assert_eq!(r["vs_floor"], format!("{raw}_cas_tree"), "{m}");
        assert!(r["vs_floor_paired"].as_f64().unwrap() > 0.0, "{m}");
        assert!(r["counters"][raw].as_u64().unwrap() > 0, "{m}: {r}");
    }
    // The bench removes its work directory.
    assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 0);
}

#[test]
fn stage_refuses_a_symlink_chain_that_leaves_the_destination_through_the_trees_own_links() {
    let t = tempfile::tempdir().unwrap();
    let c = t.path().join("c");
    let src = t.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::os::unix::fs::symlink("..", src.join("sub/up")).unwrap();
    // No `..` count leaves the root, but through sub/up it lands beside the destination.
    std::os::unix::fs::symlink("sub/up/sub/up/../../../MARK", src.join("x")).unwrap();
    let d = ok(&cs(&c, &["ingest", src.to_str().unwrap()]));
    let out = t.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let o = cs(&c, &["stage", &d, out.join("root").to_str().unwrap()]);
    assert!(!o.status.success(), "staged a link that leaves the root");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("leaves the root"), "{err}");
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0, "left files");
}
