//! The bench crate's layout rules (issue 13), checked on its own sources so they can fail:
//! every file says what it owns (`//!`), no file over 400 lines unless its head says why
//! (a `//! Over 400 lines:` line), and no function named plain `run` except the crate's one
//! entry point in lib.rs (the workspace had three `run()`s a reader could not tell apart),
//! and no import cycle between the crate's modules (`crate::a` in b.rs and `crate::b` in
//! a.rs), so a reader following one run through the files never returns to one already left.

use std::collections::{BTreeMap, BTreeSet};
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

/// The crate modules each top-level module names (`crate::x`, `use crate::{x, y}`), by file
/// stem; lib.rs, the root that declares them all, is left out.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let stems: BTreeSet<String> = files
        .iter()
        .map(|f| f.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    let mut g = BTreeMap::new();
    for f in &files {
        let me = f.file_stem().unwrap().to_string_lossy().into_owned();
        if me == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        let mut uses = BTreeSet::new();
        for (i, _) in text.match_indices("crate::") {
            let rest = &text[i + "crate::".len()..];
            // `crate::{a, b::c}` names several; `crate::a::b` names one.
            let names: Vec<&str> = match rest.strip_prefix('{') {
                Some(r) => r[..r.find('}').unwrap_or(r.len())]
                    .split(',')
                    .map(|n| n.trim())
                    .collect(),
                None => vec![rest],
            };
            for n in names {
                let n: String = n
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if n != me && stems.contains(&n) {
                    uses.insert(n);
                }
            }
        }
        g.insert(me, uses);
    }
    g
}

/// One import cycle as "a -> b -> a", if there is one.
fn cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<String> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<String> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut c = path[i..].to_vec();
            c.push(n.to_string());
            return Some(c.join(" -> "));
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, g, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|n| visit(n, g, &mut Vec::new(), &mut done))
}

#[test]
fn no_import_cycle_between_the_bench_modules() {
    let g = imports(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(g.contains_key("raw") && g["raw"].contains("fdops"), "{g:?}");
    assert_eq!(cycle(&g), None, "{g:?}");
}

#[test]
fn the_cycle_check_finds_a_loop_through_braced_imports() {
    let t = std::env::temp_dir().join(format!("bench-cycle-{}", std::process::id()));
    std::fs::create_dir_all(&t).unwrap();
    std::fs::write(t.join("lib.rs"), "//! root\nmod a;\nmod b;\nmod c;\n").unwrap();
    std::fs::write(t.join("a.rs"), "//! a\nuse crate::b::X;\n").unwrap();
    std::fs::write(t.join("b.rs"), "//! b\nuse crate::{c, x};\n").unwrap();
    std::fs::write(t.join("c.rs"), "//! c\nfn f() { crate::a::g() }\n").unwrap();
    let g = imports(&t);
    std::fs::remove_dir_all(&t).unwrap();
    assert_eq!(cycle(&g).as_deref(), Some("a -> b -> c -> a"), "{g:?}");
    let mut acyclic = g.clone();
    acyclic.get_mut("c").unwrap().clear();
    assert_eq!(cycle(&acyclic), None);
}
