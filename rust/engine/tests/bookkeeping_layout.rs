//! One writer each, read from the workspace's sources (cargo only: they need the sibling
//! crates' files): one flock helper (in the platform layer) and one writer of stats.json /
//! access.log / the cost estimates (the ledger). Cycles, file lengths and docs are
//! tests/layout/check.py's.

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("readdir {}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The production sources of the engine, server and CLI: `#[cfg(test)]` modules and files
/// named `tests*.rs` are left out (a test may write the files directly to set a scene).
fn production_sources() -> Vec<(String, String)> {
    let mut files = Vec::new();
    for c in ["engine", "server", "cli"] {
        rust_files(&workspace().join(c).join("src"), &mut files);
    }
    files.sort();
    files
        .into_iter()
        .filter(|p| {
            !p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("tests")
        })
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            // Cut at the first test module: they sit at the end of a file, by house style.
            let body = match text.find("#[cfg(test)]\nmod tests") {
                Some(i) => text[..i].to_string(),
                None => text,
            };
            let rel = p
                .strip_prefix(workspace())
                .unwrap()
                .to_string_lossy()
                .replace("/../", "/");
            (rel, body)
        })
        .collect()
}

fn files_containing(needle: &str) -> Vec<String> {
    production_sources()
        .into_iter()
        .filter(|(_, body)| body.contains(needle))
        .map(|(p, _)| p)
        .collect()
}

#[test]
fn flock_with_eintr_is_written_once_in_the_platform_layer() {
    assert_eq!(
        files_containing("libc::flock("),
        vec!["engine/src/platform/lock.rs".to_string()]
    );
}

#[test]
fn only_the_ledger_writes_stats_json_access_log_and_estimates() {
    for needle in [
        "stats::record(",
        "stats::update(",
        ".note_access(",
        ".persist_estimates(",
    ] {
        let writers: Vec<String> = files_containing(needle)
            .into_iter()
            .filter(|p| p != "engine/src/ledger.rs")
            .collect();
        assert!(
            writers.is_empty(),
            "{needle} is called outside the ledger, in {writers:?}"
        );
    }
}
