//! Layout rules of issue 13 for the stager and the tree code, read from the sources: no import
//! cycle between sibling modules (`use super::x` / `super::x::` in a non-test part), a `//!`
//! doc atop every file, and no non-test file over 400 lines without a reason written at its
//! top (a `//!` line starting "Over 400 lines:").

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const LIMIT: usize = 400;

/// Non-test sources of `src/<dir>`: module name -> text before its first `#[cfg(test)]`.
fn sources(dir: &str) -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir);
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(&root).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        if p.extension() != Some(std::ffi::OsStr::new("rs")) || name.starts_with("tests") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or("").to_string();
        out.insert(name, code);
    }
    out
}

/// Sibling modules each module names through `super::`.
fn edges(mods: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut g = BTreeMap::new();
    for (m, code) in mods {
        let mut to = BTreeSet::new();
        for (i, _) in code.match_indices("super::") {
            let rest = &code[i + "super::".len()..];
            // `use super::{a::X, b}` names several.
            let names: Vec<&str> = if let Some(list) = rest.strip_prefix('{') {
                let list = &list[..list.find('}').unwrap_or(list.len())];
                list.split(',').map(str::trim).collect()
            } else {
                vec![rest]
            };
            for n in names {
                let id: String = n
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if id != *m && mods.contains_key(&id) && id != "mod" {
                    to.insert(id);
                }
            }
        }
        g.insert(m.clone(), to);
    }
    g
}

/// A cycle in `g`, as the modules on it, if there is one.
fn find_cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut c = path[i..].to_vec();
            c.push(n.to_string());
            return Some(c);
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
    for n in g.keys() {
        if let Some(c) = visit(n, g, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn the_cycle_finder_finds_one() {
    let mut mods = BTreeMap::new();
    mods.insert("a".to_string(), "use super::b::X;".to_string());
    mods.insert("b".to_string(), "use super::{c::Y, d};".to_string());
    mods.insert("c".to_string(), "impl super::a::T for Y {}".to_string());
    mods.insert("d".to_string(), String::new());
    let c = find_cycle(&edges(&mods)).expect("a -> b -> c -> a");
    assert_eq!(c, ["a", "b", "c", "a"]);
    mods.insert("c".to_string(), String::new());
    assert_eq!(find_cycle(&edges(&mods)), None);
}

#[test]
fn no_import_cycle_between_the_stagers_or_the_trees_modules() {
    for dir in ["stage", "tree"] {
        let g = edges(&sources(dir));
        assert_eq!(find_cycle(&g), None, "src/{dir}: {g:?}");
    }
}

#[test]
fn every_file_says_what_it_owns_and_none_is_over_the_limit_without_a_reason() {
    for dir in ["stage", "tree"] {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir);
        for e in std::fs::read_dir(&root).unwrap() {
            let p = e.unwrap().path();
            let text = std::fs::read_to_string(&p).unwrap();
            assert!(text.starts_with("//! "), "{}: no //! doc", p.display());
            let name = p.file_name().unwrap().to_string_lossy();
            let lines = text.lines().count();
            let reason = text
                .lines()
                .take_while(|l| l.starts_with("//!"))
                .any(|l| l.contains("Over 400 lines:"));
            assert!(
                name.starts_with("tests") || lines <= LIMIT || reason,
                "{}: {lines} lines, over {LIMIT} without a reason at its top",
                p.display()
            );
        }
    }
}
