//! Fuzz target: the stager on generated trees. The input is read as a small program that
//! builds a tree of up to three levels (names from a pool that includes hostile ones; files;
//! symlinks whose targets are made of `..`, `.`, and the tree's own names), stores it in a
//! cache and stages it under the strict symlink policy. A stage must never panic, and in a
//! staged root no symlink may lead out of the root when it is resolved through the root's own
//! symlinks (hop limit 40), the way the kernel resolves it when an action writes through it:
//! the promise of issue 10, finding 4. A failed stage must leave nothing at the destination.
#![no_main]

use clonestage_engine::tree::{put_directory, Directory, DirectoryNode, FileNode, SymlinkNode};
use clonestage_engine::{Cache, Digest, StageRequest, Stager};
use libfuzzer_sys::fuzz_target;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

struct Env {
    stager: Stager,
    cache: Arc<Cache>,
    dest_parent: PathBuf,
    seq: std::sync::atomic::AtomicU64,
}

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let base = std::env::temp_dir().join(format!("clonestage-fuzz-{}", std::process::id()));
        let _ = std::fs::create_dir_all(base.join("dest"));
        let cache = Arc::new(Cache::open(&base.join("cache")).expect("open the fuzz cache"));
        Env {
            stager: Stager::new(cache.clone()),
            cache,
            dest_parent: base.join("dest"),
            seq: Default::default(),
        }
    })
}

const NAMES: &[&str] = &[
    "a", "b", "sub", "up", "x", "d", "..", ".", "", "a/b", "n\0", "é",
];
const SEGS: &[&str] = &["..", "..", ".", "a", "b", "sub", "up", "x", "d", "", "/"];

struct Input<'a>(&'a [u8]);
impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
}

fn gen_dir(inp: &mut Input, depth: usize, cache: &Cache) -> Option<Digest> {
    let mut dir = Directory::default();
    let n = inp.byte()? % 5;
    for _ in 0..n {
        let kind = inp.byte()? % 3;
        let name = NAMES[inp.byte()? as usize % NAMES.len()].to_string();
        match kind {
            0 if depth < 3 => {
                let d = gen_dir(inp, depth + 1, cache)?;
                dir.directories.push(DirectoryNode {
                    name,
                    digest: Some(d.to_proto()),
                });
            }
            1 => {
                let len = inp.byte()? % 6;
                let target: Vec<&str> = (0..=len)
                    .map(|_| SEGS[inp.byte().unwrap_or(0) as usize % SEGS.len()])
                    .collect();
                dir.symlinks.push(SymlinkNode {
                    name,
                    target: target.join("/"),
                    ..Default::default()
                });
            }
            _ => {
                let content = [inp.byte()?];
                let d = cache.put_bytes(&content, None).ok()?;
                dir.files.push(FileNode {
                    name,
                    digest: Some(d.to_proto()),
                    is_executable: content[0] & 1 != 0,
                    ..Default::default()
                });
            }
        }
    }
    // Sorted as REAPI requires, most of the time: unsorted input must be refused, not crash.
    if inp.byte().unwrap_or(0) % 8 != 0 {
        dir.files.sort_by(|a, b| a.name.cmp(&b.name));
        dir.directories.sort_by(|a, b| a.name.cmp(&b.name));
        dir.symlinks.sort_by(|a, b| a.name.cmp(&b.name));
    }
    put_directory(cache, &dir).ok()
}

/// Resolve `rel` (components below `root`) as the kernel would, following symlinks found in
/// the staged root; Err(reason) when the path leaves the root.
fn resolve(root: &Path, rel: &[String], hops: &mut u32) -> Result<Vec<String>, String> {
    let mut at: Vec<String> = Vec::new();
    let mut todo: Vec<String> = rel.iter().rev().cloned().collect();
    while let Some(c) = todo.pop() {
        match c.as_str() {
            "" | "." => {}
            ".." => {
                if at.pop().is_none() {
                    return Err("climbs above the root".into());
                }
            }
            _ => {
                at.push(c);
                let p = at.iter().fold(root.to_path_buf(), |p, c| p.join(c));
                if let Ok(t) = std::fs::read_link(&p) {
                    *hops += 1;
                    if *hops > 40 {
                        return Ok(at); // the kernel gives ELOOP: nothing is written
                    }
                    let t = t.to_string_lossy().to_string();
                    if t.starts_with('/') {
                        return Err(format!("absolute target {t}"));
                    }
                    at.pop();
                    todo.extend(t.split('/').rev().map(String::from));
                }
            }
        }
    }
    Ok(at)
}

fn walk(root: &Path, dir: &Path, rel: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        rel.push(name);
        let ft = e.file_type().unwrap();
        if ft.is_symlink() {
            let mut hops = 0;
            if let Err(why) = resolve(root, rel, &mut hops) {
                panic!(
                    "staged symlink {} -> {:?} leads out of the root: {why}",
                    rel.join("/"),
                    std::fs::read_link(e.path()).unwrap()
                );
            }
        } else if ft.is_dir() {
            walk(root, &e.path(), rel);
        }
        rel.pop();
    }
}

fuzz_target!(|data: &[u8]| {
    let env = env();
    let mut inp = Input(data);
    let Some(root) = gen_dir(&mut inp, 0, &env.cache) else {
        return;
    };
    let n = env.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if n % 1024 == 1023 {
        // The ledger keeps every staged root until flushed: bound it (bookkeeping is not
        // what this target exercises).
        env.stager.ledger().flush();
    }
    let dest = env.dest_parent.join(format!("r{n}"));
    let req = StageRequest {
        root,
        dest: dest.clone(),
        ..Default::default()
    };
    match env.stager.stage(&req) {
        Ok(staged) => {
            walk(&dest, &dest, &mut Vec::new());
            drop(staged);
            clonestage_engine::remove::remove_tree(&dest).expect("remove the staged root");
        }
        Err(_) => assert!(!dest.exists(), "a failed stage left {}", dest.display()),
    }
});
