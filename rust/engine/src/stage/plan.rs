//! Before anything is created: load the Directories of the tree, validate each where it occurs
//! (symlink checks depend on depth), and know how many entries lie below each directory (what
//! decides whether cloning it whole pays).
//!
//! The Stager remembers what it learned (`Memo`): decoded Directories, (digest, depth, policy)
//! triples validated together with everything below them, and per-digest entry and byte counts.
//! A warm stage therefore stops at a subtree it has seen at the same depth: it neither reads nor
//! decodes it, and if the subtree is then cloned whole from the subtree cache, it never does
//! (a 1,978-entry Directory costs 0.3 to 1 ms to read and decode here, a snapshot ~3 ms).
//! Digests name content, so nothing remembered can go stale; a Directory evicted from the CAS
//! since is still staged from memory, and its files are checked as they are placed.
//!
//! A client shapes the tree, so nothing here recurses: the walk (`tree::walk`) is breadth-first
//! over distinct digests (each Directory read and validated once, at the shallowest depth it occurs, where
//! its symlinks' lexical check is strictest), sizes are counted bottom-up with memoised
//! per-digest figures and saturating arithmetic, and the tree's depth, expanded entries and
//! bytes are held to `TreeLimits` before anything is created. Symlink targets are then
//! resolved through the tree itself (`links.rs`).

use super::limits::{check_size, too_deep, TreeLimits};
use crate::cas::Cache;
use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::tree::walk::{self, BadDigest, Order};
use crate::tree::{self, Directory, SymlinkPolicy};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

pub(crate) struct Plan<'a> {
    /// Where Directories below a remembered subtree are read from, and what the Stager
    /// remembers across stages.
    cache: &'a Cache,
    memo: &'a Memo,
    /// Directories this stage loaded; the others (below a remembered subtree) come from the
    /// memo or the CAS when the builder descends into them.
    dirs: HashMap<Digest, Arc<Directory>>,
    /// Files and symlinks at or below each directory, and their bytes.
    facts: HashMap<Digest, Facts>,
}

/// What a Directory expands to. Counts saturate: a hostile tree that doubles per level must
/// not wrap them below a limit.
#[derive(Clone, Copy, Default)]
pub(crate) struct Facts {
    /// Files and symlinks at or below it (what decides whether a whole-subtree clone pays).
    pub entries: u64,
    /// Bytes of those files.
    pub bytes: u64,
    /// Directories below it (not counting itself).
    pub dirs: u64,
    /// Symlinks at or below it.
    pub links: u64,
    /// Levels of directories below it (0: no subdirectory).
    pub height: u32,
}

/// What a Stager remembers across stages (bounded: each part starts over when full).
#[derive(Default)]
pub(crate) struct Memo {
    inner: Mutex<MemoInner>,
}

#[derive(Default)]
pub(super) struct MemoInner {
    /// Validated together with everything below it, at this depth or any deeper one (a
    /// symlink's lexical check only gets easier deeper down).
    validated: HashMap<(Digest, SymlinkPolicy), usize>,
    /// Subtrees whose symlinks all resolve within the subtree itself: safe wherever they occur.
    links_contained: HashSet<(Digest, SymlinkPolicy)>,
    facts: HashMap<Digest, Facts>,
    dirs: HashMap<Digest, Arc<Directory>>,
    /// Entries (files, directories, symlinks) held in `dirs`.
    dir_entries: usize,
    /// Whether a subtree holds Mach-O code, as of a generation of the cache's record of code
    /// blobs (a later generation may know more: then it is looked at again).
    code: HashMap<Digest, (u64, bool)>,
}

/// Beyond this many validated triples or counted directories the memo starts over.
const MEMO_MAX: usize = 1 << 20;
/// Entries of decoded Directories kept in memory (~200 bytes each).
const DIR_ENTRIES_MAX: usize = 1 << 18;

fn entries_of(dir: &Directory) -> usize {
    dir.files.len() + dir.directories.len() + dir.symlinks.len()
}

impl Memo {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, MemoInner> {
        self.inner.lock().unwrap()
    }

    /// Directory `d`, from memory or the CAS (then remembered). None: not in the CAS.
    pub(super) fn directory(
        &self,
        cache: &Cache,
        d: &Digest,
        path: &str,
    ) -> Result<Option<Arc<Directory>>> {
        if let Some(dir) = self.inner.lock().unwrap().dirs.get(d) {
            return Ok(Some(dir.clone()));
        }
        let Some(dir) = tree::load_directory(cache, d, path)? else {
            return Ok(None);
        };
        let dir = Arc::new(dir);
        let mut m = self.inner.lock().unwrap();
        let n = entries_of(&dir);
        if m.dir_entries + n > DIR_ENTRIES_MAX {
            m.dirs.clear();
            m.dir_entries = 0;
        }
        if n <= DIR_ENTRIES_MAX && m.dirs.insert(*d, dir.clone()).is_none() {
            m.dir_entries += n;
        }
        Ok(Some(dir))
    }
}

impl<'a> Plan<'a> {
    pub(crate) fn load(
        cache: &'a Cache,
        memo: &'a Memo,
        root: &Digest,
        policy: SymlinkPolicy,
        limits: &TreeLimits,
    ) -> Result<Plan<'a>> {
        let mut dirs: HashMap<Digest, Arc<Directory>> = HashMap::new();
        let mut known: HashMap<Digest, Facts> = HashMap::new();
        // Each digest once, at the shallowest depth it occurs (breadth-first finds that first).
        let mut visited: HashMap<Digest, usize> = HashMap::new();
        let mut missing: Option<Digest> = None;
        walk::walk(
            root,
            Order::BreadthFirst,
            BadDigest::Fail,
            &mut HashSet::new(),
            |at| {
                let (d, depth) = (at.digest, at.depth);
                visited.insert(d, depth);
                if depth > limits.max_depth as usize {
                    return Err(too_deep(at.path, &d, limits));
                }
                let validated = {
                    let m = memo.lock();
                    let validated = m.validated.get(&(d, policy)).is_some_and(|&v| v <= depth);
                    if let (true, Some(f)) = (validated, m.facts.get(&d)) {
                        // Validated with everything below it, at this depth or above: stop here.
                        if depth as u64 + f.height as u64 > limits.max_depth as u64 {
                            return Err(too_deep(at.path, &d, limits));
                        }
                        known.insert(d, *f);
                        return Ok(None);
                    }
                    validated
                };
                let dir = match memo.directory(cache, &d, at.path)? {
                    Some(dir) => dir,
                    None => {
                        missing.get_or_insert(d);
                        return Ok(None);
                    }
                };
                dirs.insert(d, dir.clone());
                if !validated {
                    tree::validate_directory(&dir, at.path, &d, policy)?;
                }
                Ok(Some(dir))
            },
        )?;
        if let Some(first) = missing {
            let mut digests = tree::find_missing(cache, root)?;
            if digests.is_empty() {
                // Uploaded again since the walk missed it (Bazel re-sends what another action's
                // answer named missing): still name the one this walk could not read.
                digests.push(first);
            }
            return Err(Error::Missing {
                digests,
                path: String::new(),
            });
        }
        let mut facts = known;
        let total = count(
            root,
            &mut |d| {
                dirs.get(d).cloned().ok_or(Error::Missing {
                    digests: vec![*d],
                    path: String::new(),
                })
            },
            &mut facts,
        )?;
        check_size(
            root,
            total.entries.saturating_add(total.dirs),
            total.bytes,
            limits,
        )?;
        let mut m = memo.lock();
        if m.validated.len() + visited.len() > MEMO_MAX {
            m.validated.clear();
        }
        // Every digest visited was validated here, or below one validated earlier.
        for (d, depth) in &visited {
            let at = m.validated.entry((*d, policy)).or_insert(*depth);
            *at = (*at).min(*depth);
        }
        if m.facts.len() + facts.len() > MEMO_MAX {
            m.facts.clear();
        }
        m.facts.extend(facts.iter().map(|(d, f)| (*d, *f)));
        drop(m);
        Ok(Plan {
            cache,
            memo,
            dirs,
            facts,
        })
    }

    /// Directory `d` of this tree (loaded lazily below a remembered subtree).
    pub(crate) fn dir(&self, d: &Digest, path: &Path) -> Result<Arc<Directory>> {
        if let Some(dir) = self.dirs.get(d) {
            return Ok(dir.clone());
        }
        let path = path.display().to_string();
        self.memo
            .directory(self.cache, d, &path)?
            .ok_or(Error::Missing {
                digests: vec![*d],
                path,
            })
    }

    /// What `d` expands to: counted by `load`, else remembered, else (the memo started over
    /// meanwhile) counted again from the Directories.
    pub(crate) fn facts(&self, d: &Digest, path: &Path) -> Result<Facts> {
        if let Some(f) = self.facts.get(d) {
            return Ok(*f);
        }
        if let Some(f) = self.memo.lock().facts.get(d) {
            return Ok(*f);
        }
        let mut counted = HashMap::new();
        let f = count(d, &mut |x| self.dir(x, path), &mut counted)?;
        self.memo.lock().facts.extend(counted);
        Ok(f)
    }

    /// Whether every symlink of subtree `d` was found, in an earlier check, to resolve within
    /// the subtree itself (then it is safe wherever it occurs).
    pub(crate) fn links_contained(&self, d: &Digest, policy: SymlinkPolicy) -> bool {
        self.memo.lock().links_contained.contains(&(*d, policy))
    }

    /// Remember that every symlink of subtree `d` resolves within it.
    pub(crate) fn note_links_contained(&self, d: &Digest, policy: SymlinkPolicy) {
        self.memo.lock().links_contained.insert((*d, policy));
    }

    /// Whether subtree `d` holds a file the cache records as Mach-O code, at any depth: looked
    /// up in memory per file (no read), each distinct Directory once, without recursion, and
    /// remembered until the record learns another code blob.
    pub(crate) fn holds_code(&self, d: &Digest, path: &Path) -> Result<bool> {
        let gen = self.cache.code_generation();
        let known =
            |m: &MemoInner, x: &Digest| m.code.get(x).filter(|(g, _)| *g == gen).map(|v| v.1);
        if let Some(v) = known(&self.memo.lock(), d) {
            return Ok(v);
        }
        let mut stack = vec![*d];
        let mut seen = HashSet::new();
        let mut found = false;
        while let Some(x) = stack.pop() {
            if !seen.insert(x) {
                continue;
            }
            match known(&self.memo.lock(), &x) {
                Some(true) => {
                    found = true;
                    break;
                }
                Some(false) => continue,
                None => {}
            }
            let dir = self.dir(&x, path)?;
            for f in &dir.files {
                if Digest::from_opt_proto(f.digest.as_ref(), &f.name)
                    .is_ok_and(|fd| self.cache.is_code(&fd))
                {
                    found = true;
                }
            }
            if found {
                break;
            }
            for sub in &dir.directories {
                stack.push(Digest::from_opt_proto(sub.digest.as_ref(), &sub.name)?);
            }
        }
        let mut m = self.memo.lock();
        if m.code.len() >= MEMO_MAX {
            m.code.clear();
        }
        m.code.insert(*d, (gen, found));
        Ok(found)
    }
}

/// What the builder (`fill.rs`) may ask of the plan, and nothing else: the tree it loaded and
/// checked before anything was created.
pub(crate) trait Source {
    /// Directory `d`, found at `path` (for messages).
    fn dir(&self, d: &Digest, path: &Path) -> Result<Arc<Directory>>;
    /// What Directory `d` expands to.
    fn facts(&self, d: &Digest, path: &Path) -> Result<Facts>;
    /// Whether subtree `d` holds Mach-O code (`--preserve-inodes macho`).
    fn holds_code(&self, d: &Digest, path: &Path) -> Result<bool>;
}

impl Source for Plan<'_> {
    fn dir(&self, d: &Digest, path: &Path) -> Result<Arc<Directory>> {
        Plan::dir(self, d, path)
    }

    fn facts(&self, d: &Digest, path: &Path) -> Result<Facts> {
        Plan::facts(self, d, path)
    }

    fn holds_code(&self, d: &Digest, path: &Path) -> Result<bool> {
        Plan::holds_code(self, d, path)
    }
}

/// Files and symlinks directly in `dir`, and their bytes.
fn own_facts(dir: &Directory) -> Facts {
    Facts {
        entries: (dir.files.len() + dir.symlinks.len()) as u64,
        bytes: dir
            .files
            .iter()
            .filter_map(|x| x.digest.as_ref())
            .fold(0u64, |a, x| a.saturating_add(x.size_bytes.max(0) as u64)),
        dirs: dir.directories.len() as u64,
        links: dir.symlinks.len() as u64,
        height: 0,
    }
}

/// What `root` expands to, bottom-up without recursion: each distinct digest counted once
/// (into `memo`, which may already hold some), however often it is listed.
fn count(
    root: &Digest,
    dir_of: &mut dyn FnMut(&Digest) -> Result<Arc<Directory>>,
    memo: &mut HashMap<Digest, Facts>,
) -> Result<Facts> {
    // (digest, its Directory, children pushed yet)
    let mut stack: Vec<(Digest, Arc<Directory>, bool)> = Vec::new();
    if let Some(f) = memo.get(root) {
        return Ok(*f);
    }
    stack.push((*root, dir_of(root)?, false));
    while let Some((d, dir, expanded)) = stack.pop() {
        if memo.contains_key(&d) {
            continue;
        }
        if !expanded {
            stack.push((d, dir.clone(), true));
            for sub in &dir.directories {
                let sd = Digest::from_opt_proto(sub.digest.as_ref(), &sub.name)?;
                if !memo.contains_key(&sd) {
                    let sub_dir = dir_of(&sd)?;
                    stack.push((sd, sub_dir, false));
                }
            }
            continue;
        }
        let mut f = own_facts(&dir);
        for sub in &dir.directories {
            let sd = Digest::from_opt_proto(sub.digest.as_ref(), &sub.name)?;
            let s = memo[&sd];
            f.entries = f.entries.saturating_add(s.entries);
            f.bytes = f.bytes.saturating_add(s.bytes);
            f.dirs = f.dirs.saturating_add(s.dirs);
            f.links = f.links.saturating_add(s.links);
            f.height = f.height.max(s.height.saturating_add(1));
        }
        memo.insert(d, f);
    }
    Ok(memo[root])
}
