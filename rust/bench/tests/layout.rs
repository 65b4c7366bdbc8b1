//! The bench crate's layout rules (issue 13), checked on its own sources so they can fail:
//! every file says what it owns (`//!`), no file over 400 lines unless its head says why
//! (a `//! Over 400 lines:` line), and no function named plain `run` except the crate's one
//! entry point in lib.rs (the workspace had three `run()`s a reader could not tell apart).

use std::path::{Path, PathBuf};

const MAX_LINES: usize = 400;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The problems of the crate's `src/` under the rules above, one line each.
fn problems(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    sources(src, &mut files);
    files.sort();
    assert!(!files.is_empty(), "no sources under {}", src.display());
    let mut out = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let rel = f.strip_prefix(src).unwrap().display().to_string();
        if !text.starts_with("//!") {
            out.push(format!(
                "{rel}: does not start with a //! doc saying what it owns"
            ));
        }
        let lines = text.lines().count();
        let reason = text
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .any(|l| l.contains("Over 400 lines:"));
        if lines > MAX_LINES && !reason {
            out.push(format!(
                "{rel}: {lines} lines (at most {MAX_LINES} without a reason)"
            ));
        }
        for (i, l) in text.lines().enumerate() {
            let t = l.trim_start();
            let named_run = ["fn run(", "fn run<"]
                .iter()
                .any(|p| t.starts_with(p) || t.contains(&format!(" {p}")));
            if named_run && rel != "lib.rs" {
                out.push(format!("{rel}:{}: a function named plain run()", i + 1));
            }
        }
    }
    out
}

#[test]
fn every_bench_source_has_a_doc_stays_short_and_only_the_entry_point_is_run() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let p = problems(&src);
    assert!(p.is_empty(), "layout problems:\n{}", p.join("\n"));
}

#[test]
fn the_layout_check_flags_a_long_file_an_undocumented_file_and_a_second_run() {
    let t = std::env::temp_dir().join(format!("bench-layout-{}", std::process::id()));
    std::fs::create_dir_all(&t).unwrap();
    std::fs::write(t.join("lib.rs"), "//! entry\npub fn run() {}\n").unwrap();
    std::fs::write(
        t.join("long.rs"),
        format!("//! long\n{}", "//\n".repeat(MAX_LINES)),
    )
    .unwrap();
    std::fs::write(t.join("bare.rs"), "fn f() {}\n").unwrap();
    std::fs::write(t.join("raw.rs"), "//! raw\npub fn run(x: u8) {}\n").unwrap();
    let p = problems(&t);
    std::fs::remove_dir_all(&t).unwrap();
    assert_eq!(p.len(), 3, "{p:#?}");
    assert!(p[0].starts_with("bare.rs: does not start"), "{p:#?}");
    assert!(p[1].starts_with("long.rs: 401 lines"), "{p:#?}");
    assert!(
        p[2].starts_with("raw.rs:2: a function named plain run()"),
        "{p:#?}"
    );
}
