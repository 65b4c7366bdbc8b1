//! The server crate's layout rules (issue 13), checked on its sources so a change that breaks
//! one fails here: no import cycle between its modules; `State` (shared by every service)
//! depends on no service; the services do not reach into each other; server-side code does not
//! borrow from the `clonestage address` client; no non-test file over `MAX_LINES` lines
//! without a reason at its top; no file named like one of the engine's or the CLI's.
//!
//! Module references are read from the source text: `crate::a::b`, `use crate::{a, b}` and
//! `super::b`, outside `#[cfg(test)]` modules. A module is a file (`a/b.rs`) or a directory
//! (`a/mod.rs`); a reference to an item of a directory module that is not one of its
//! submodules counts as one to the directory module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 400;
/// What a file over `MAX_LINES` must say in its top doc, followed by the reason.
const REASON_MARKER: &str = "Over 400 lines:";

/// The crate's sources; `CLONESTAGE_LAYOUT_CRATE=<dir>` checks another checkout's server
/// crate instead (e.g. the previous commit's, to see a rule fail there).
fn crate_dir() -> PathBuf {
    std::env::var_os("CLONESTAGE_LAYOUT_CRATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

fn src() -> PathBuf {
    crate_dir().join("src")
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `execution/run.rs` -> `execution::run`; `execution/mod.rs` -> `execution`; `lib.rs` -> "".
fn module_of(rel: &Path) -> String {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts.join("::")
}

/// The source without its `#[cfg(test)]` modules (test code may import anything).
fn non_test(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        if l.trim() == "#[cfg(test)]" {
            if let Some(next) = lines.peek() {
                if next.trim_start().starts_with("mod ") {
                    if next.trim_end().ends_with(';') {
                        lines.next();
                        continue;
                    }
                    // Skip to the closing brace at the same indentation.
                    let indent = next.len() - next.trim_start().len();
                    lines.next();
                    for l in lines.by_ref() {
                        if l.len() - l.trim_start().len() == indent && l.trim() == "}" {
                            break;
                        }
                    }
                    continue;
                }
            }
        }
        out.push_str(l);
        out.push('\n');
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Paths named after `prefix` (`crate::` or `super::`), each as its first two components.
fn referenced(text: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().last();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            // `use crate::{a::b, c}`: the first components of each entry.
            let body = &group[..group.find('}').unwrap_or(group.len())];
            for entry in body.split(',') {
                let entry = entry.trim().trim_start_matches('{');
                let mut it = entry.split("::").map(|p| ident_at(p.trim()).to_string());
                let a = it.next().unwrap_or_default();
                if !a.is_empty() {
                    out.push(vec![a].into_iter().chain(it.take(1)).collect());
                }
            }
            continue;
        }
        let a = ident_at(rest).to_string();
        let after = &rest[a.len()..];
        let b = after.strip_prefix("::").map(ident_at).unwrap_or("");
        if !a.is_empty() {
            let mut v = vec![a];
            if !b.is_empty() {
                v.push(b.to_string());
            }
            out.push(v);
        }
    }
    out
}

struct Crate {
    /// Module -> the modules its non-test code names.
    deps: BTreeMap<String, BTreeSet<String>>,
    /// Module -> (file, line count, top doc).
    files: BTreeMap<String, (PathBuf, usize, String)>,
}

fn read_crate() -> Crate {
    let root = src();
    let mut paths = Vec::new();
    rs_files(&root, &mut paths);
    let mut files = BTreeMap::new();
    for p in &paths {
        let text = std::fs::read_to_string(p).unwrap();
        let doc: String = text
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        let m = module_of(p.strip_prefix(&root).unwrap());
        files.insert(m, (p.clone(), text.lines().count(), doc));
    }
    let known: BTreeSet<String> = files.keys().cloned().collect();
    // The module a path names: the deepest known module along it.
    let resolve = |parts: &[String]| -> Option<String> {
        let mut best = None;
        for n in 1..=parts.len() {
            let m = parts[..n].join("::");
            if known.contains(&m) {
                best = Some(m);
            }
        }
        best
    };
    let mut deps = BTreeMap::new();
    for (m, (p, _, _)) in &files {
        let text = non_test(&std::fs::read_to_string(p).unwrap());
        let mut d = BTreeSet::new();
        for parts in referenced(&text, "crate::") {
            if let Some(t) = resolve(&parts) {
                d.insert(t);
            }
        }
        // `super::` from `a::b` is `a`; from the directory module `a` (a/mod.rs) it is the root.
        let is_dir = p.file_name().is_some_and(|f| f == "mod.rs");
        let mut parent: Vec<String> = m.split("::").map(String::from).collect();
        if !is_dir || !parent.is_empty() {
            parent.pop();
        }
        for parts in referenced(&text, "super::") {
            let full: Vec<String> = parent.iter().cloned().chain(parts).collect();
            if let Some(t) = resolve(&full) {
                d.insert(t);
            }
        }
        d.remove(m);
        d.remove("");
        deps.insert(m.clone(), d);
    }
    Crate { deps, files }
}

/// Every cycle's modules, each cycle once (strongly connected components of two or more).
fn cycles(deps: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(m) = todo.pop() {
            for d in deps.get(&m).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    todo.push(d.clone());
                }
            }
        }
        seen
    };
    let mut out: Vec<Vec<String>> = Vec::new();
    for m in deps.keys() {
        if out.iter().any(|c| c.contains(m)) {
            continue;
        }
        let fwd = reach(m);
        if !fwd.contains(m) {
            continue;
        }
        let comp: Vec<String> = fwd
            .iter()
            .filter(|o| reach(o).contains(m))
            .cloned()
            .collect();
        out.push(comp);
    }
    out
}

fn top(m: &str) -> &str {
    m.split("::").next().unwrap()
}

#[test]
fn no_import_cycle_between_modules() {
    let c = read_crate();
    let found = cycles(&c.deps);
    assert!(
        found.is_empty(),
        "modules that import each other (directly or around a loop): {found:?}"
    );
    // The same with each directory taken as one module (`state` -> `execution::prespawn` and
    // `execution::run` -> `state` is a loop between `state` and `execution`).
    let mut tops: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, d) in &c.deps {
        let e = tops.entry(top(m).to_string()).or_default();
        e.extend(d.iter().map(|t| top(t).to_string()).filter(|t| t != top(m)));
    }
    let found = cycles(&tops);
    assert!(
        found.is_empty(),
        "top-level modules that import each other: {found:?}"
    );
}

#[test]
fn state_depends_on_no_service_and_services_not_on_each_other() {
    const SERVICES: &[&str] = &[
        "capabilities",
        "cas_service",
        "bytestream",
        "action_cache_service",
        "execution",
    ];
    let c = read_crate();
    let mut bad = Vec::new();
    for (m, d) in &c.deps {
        for t in d {
            let (from, to) = (top(m), top(t));
            if from == to {
                continue;
            }
            let shared_uses_service = from == "state" && SERVICES.contains(&to);
            // `capabilities` is what the server advertises: the others may read those limits.
            let service_reaches_service =
                SERVICES.contains(&from) && SERVICES.contains(&to) && to != "capabilities";
            // `address` and `stop` are the CLI's client side; the server does not borrow them.
            let server_borrows_client =
                !["address", "stop"].contains(&from) && ["address", "stop"].contains(&to);
            if shared_uses_service || service_reaches_service || server_borrows_client {
                bad.push(format!("{m} -> {t}"));
            }
        }
    }
    assert!(bad.is_empty(), "reach-ins: {bad:?}");
    assert!(
        c.files.contains_key("action_cache_service"),
        "the ActionCache service is in action_cache_service.rs"
    );
}

#[test]
fn no_long_file_without_a_reason() {
    let c = read_crate();
    let long: Vec<String> = c
        .files
        .values()
        .filter(|(p, n, doc)| {
            !p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("tests")
                && *n > MAX_LINES
                && !doc.contains(REASON_MARKER)
        })
        .map(|(p, n, _)| format!("{} ({n} lines)", p.display()))
        .collect();
    assert!(
        long.is_empty(),
        "over {MAX_LINES} lines without `{REASON_MARKER} <why>` in the top doc: {long:?}"
    );
}

#[test]
fn no_file_named_like_one_of_the_engine_or_the_cli() {
    // Names every crate has by convention, and the platform pairs.
    const GENERIC: &[&str] = &[
        "mod.rs", "lib.rs", "main.rs", "tests.rs", "linux.rs", "macos.rs",
    ];
    // The server's address.rs is the `clonestage address` logic the CLI's address command calls.
    const SAME_THING: &[&str] = &["address.rs"];
    let ws = crate_dir().parent().unwrap().to_path_buf();
    let mut others = BTreeMap::new();
    for krate in ["engine", "cli"] {
        let mut v = Vec::new();
        rs_files(&ws.join(krate).join("src"), &mut v);
        for p in v {
            others.insert(p.file_name().unwrap().to_string_lossy().into_owned(), p);
        }
    }
    let mut mine = Vec::new();
    rs_files(&src(), &mut mine);
    let clash: Vec<String> = mine
        .iter()
        .filter_map(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            let o = others.get(&n)?;
            (!GENERIC.contains(&n.as_str()) && !SAME_THING.contains(&n.as_str()))
                .then(|| format!("{} and {}", p.display(), o.display()))
        })
        .collect();
    assert!(
        clash.is_empty(),
        "same file name, different things: {clash:?}"
    );
}

#[test]
fn the_checks_see_a_cycle_and_a_test_module() {
    // The rules above must be able to fail: a two-module loop is a cycle, a chain is not.
    let mut deps = BTreeMap::new();
    deps.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    deps.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    deps.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(cycles(&deps), vec![vec!["a".to_string(), "b".to_string()]]);
    let text = "use crate::{x::y, z};\nfn f() { crate::w::v(); }\n#[cfg(test)]\nmod tests {\n    use crate::t;\n}\n";
    let refs = referenced(&non_test(text), "crate::");
    assert_eq!(
        refs,
        vec![
            vec!["x".to_string(), "y".to_string()],
            vec!["z".to_string()],
            vec!["w".to_string(), "v".to_string()]
        ]
    );
}

#[test]
fn no_function_named_just_run() {
    // Three `run()`s (the action, the wrapper, the janitor's loop) made a reader guess which.
    let mut paths = Vec::new();
    rs_files(&src(), &mut paths);
    let named_run: Vec<String> = paths
        .iter()
        .filter(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            text.contains("fn run(") || text.contains("fn run<")
        })
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        named_run.is_empty(),
        "a function named `run` in: {named_run:?}"
    );
}
