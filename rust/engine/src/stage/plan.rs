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

use crate::cas::Cache;
use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::tree::{self, Directory, SymlinkPolicy};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

pub(crate) struct Plan {
    /// Directories this stage loaded; the others (below a remembered subtree) come from the
    /// memo or the CAS when the builder descends into them.
    dirs: HashMap<Digest, Arc<Directory>>,
    /// Files and symlinks at or below each directory, and their bytes.
    facts: HashMap<Digest, Facts>,
}

#[derive(Clone, Copy, Default)]
pub(crate) struct Facts {
    pub entries: u64,
    pub bytes: u64,
}

/// What a Stager remembers across stages (bounded: each part starts over when full).
#[derive(Default)]
pub(crate) struct Memo {
    inner: Mutex<MemoInner>,
}

#[derive(Default)]
struct MemoInner {
    validated: HashSet<(Digest, usize, SymlinkPolicy)>,
    facts: HashMap<Digest, Facts>,
    dirs: HashMap<Digest, Arc<Directory>>,
    /// Entries (files, directories, symlinks) held in `dirs`.
    dir_entries: usize,
}

/// Beyond this many validated triples or counted directories the memo starts over.
const MEMO_MAX: usize = 1 << 20;
/// Entries of decoded Directories kept in memory (~200 bytes each).
const DIR_ENTRIES_MAX: usize = 1 << 18;

fn entries_of(dir: &Directory) -> usize {
    dir.files.len() + dir.directories.len() + dir.symlinks.len()
}

impl Memo {
    /// Directory `d`, from memory or the CAS (then remembered). None: not in the CAS.
    fn directory(&self, cache: &Cache, d: &Digest, path: &str) -> Result<Option<Arc<Directory>>> {
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

impl Plan {
    pub(crate) fn load(
        cache: &Cache,
        root: &Digest,
        policy: SymlinkPolicy,
        memo: &Memo,
    ) -> Result<Plan> {
        let mut dirs: HashMap<Digest, Arc<Directory>> = HashMap::new();
        let mut known: HashMap<Digest, Facts> = HashMap::new();
        let mut visited: HashSet<(Digest, usize)> = HashSet::new();
        let mut missing = false;
        let mut stack = vec![(*root, String::new(), 0usize)];
        while let Some((d, path, depth)) = stack.pop() {
            if !visited.insert((d, depth)) {
                continue;
            }
            let validated = {
                let m = memo.inner.lock().unwrap();
                let validated = m.validated.contains(&(d, depth, policy));
                if let (true, Some(f)) = (validated, m.facts.get(&d)) {
                    // Validated with everything below it, at this depth: stop here.
                    known.insert(d, *f);
                    continue;
                }
                validated
            };
            let dir = match dirs.get(&d) {
                Some(dir) => dir.clone(),
                None => match memo.directory(cache, &d, &path)? {
                    Some(dir) => {
                        dirs.insert(d, dir.clone());
                        dir
                    }
                    None => {
                        missing = true;
                        continue;
                    }
                },
            };
            if !validated {
                tree::validate_directory(&dir, &path, &d, policy)?;
            }
            for sub in &dir.directories {
                let sd = Digest::from_opt_proto(sub.digest.as_ref(), &sub.name)?;
                stack.push((sd, tree::join(&path, &sub.name), depth + 1));
            }
        }
        if missing {
            return Err(Error::Missing {
                digests: tree::find_missing(cache, root)?,
                path: String::new(),
            });
        }
        let mut facts = known;
        count(root, &dirs, &mut facts)?;
        let mut m = memo.inner.lock().unwrap();
        if m.validated.len() + visited.len() > MEMO_MAX {
            m.validated.clear();
        }
        // Every pair visited was validated here, or below a pair validated earlier.
        m.validated
            .extend(visited.iter().map(|(d, depth)| (*d, *depth, policy)));
        if m.facts.len() + facts.len() > MEMO_MAX {
            m.facts.clear();
        }
        m.facts.extend(facts.iter().map(|(d, f)| (*d, *f)));
        drop(m);
        Ok(Plan { dirs, facts })
    }

    /// Directory `d` of this tree (loaded lazily below a remembered subtree).
    pub(crate) fn dir(
        &self,
        cache: &Cache,
        memo: &Memo,
        d: &Digest,
        path: &std::path::Path,
    ) -> Result<Arc<Directory>> {
        if let Some(dir) = self.dirs.get(d) {
            return Ok(dir.clone());
        }
        let path = path.display().to_string();
        memo.directory(cache, d, &path)?.ok_or(Error::Missing {
            digests: vec![*d],
            path,
        })
    }

    /// Files and symlinks at or below `d`, and their bytes: counted by `load`, else
    /// remembered, else (the memo started over meanwhile) counted again from the Directories.
    pub(crate) fn facts(
        &self,
        cache: &Cache,
        memo: &Memo,
        d: &Digest,
        path: &std::path::Path,
    ) -> Result<Facts> {
        if let Some(f) = self.facts.get(d) {
            return Ok(*f);
        }
        if let Some(f) = memo.inner.lock().unwrap().facts.get(d) {
            return Ok(*f);
        }
        let dir = self.dir(cache, memo, d, path)?;
        let mut f = own_facts(&dir);
        for sub in &dir.directories {
            let sd = Digest::from_opt_proto(sub.digest.as_ref(), &sub.name)?;
            let s = self.facts(cache, memo, &sd, &path.join(&sub.name))?;
            f.entries += s.entries;
            f.bytes += s.bytes;
        }
        memo.inner.lock().unwrap().facts.insert(*d, f);
        Ok(f)
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
            .map(|x| x.size_bytes.max(0) as u64)
            .sum(),
    }
}

fn count(
    d: &Digest,
    dirs: &HashMap<Digest, Arc<Directory>>,
    memo: &mut HashMap<Digest, Facts>,
) -> Result<Facts> {
    if let Some(f) = memo.get(d) {
        return Ok(*f);
    }
    let dir = &dirs[d];
    let mut f = own_facts(dir);
    for sub in &dir.directories {
        let sd = Digest::from_opt_proto(sub.digest.as_ref(), &sub.name)?;
        let s = count(&sd, dirs, memo)?;
        f.entries += s.entries;
        f.bytes += s.bytes;
    }
    memo.insert(*d, f);
    Ok(f)
}
