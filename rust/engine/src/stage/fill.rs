//! Filling a root: directories created with `*at` calls under fds this process opened, depth
//! first in the Directory's order (files, then symlinks, then subdirectories), each
//! subdirectory either cloned whole from the subtree cache (`subtree.rs`) or made and filled
//! here, and each file placed by `place.rs`. The builder reads the tree through `plan::Source`
//! (Directories and what they expand to, nothing else) and hands the stage one `Built`.
//! Under `--preserve-inodes macho` (`code_links`), a directory holding code is pooled
//! whatever its size, and where the root links code itself, a subtree holding code is filled
//! per file (its subdirectories without code are still cloned whole).

use super::code_links::{CodeMode, CodePolicy};
use super::device::{Devices, FileMethod};
use super::modes::Modes;
use super::place::{Inode, Placer};
use super::plan::Source;
use super::pool::{Loan, Pool, POOL_MIN_ENTRIES};
use super::subtree::{self, Subtrees, Take};
use crate::cas::Cache;
use crate::digest::Digest;
use crate::error::{IoContext, Result};
use crate::platform::{cstr, Dir, TreeClone};
use crate::stats::Counters;
use std::collections::HashSet;
use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where and how one stage builds.
pub(crate) struct Setup<'a> {
    pub cache: &'a Cache,
    pub devices: &'a Devices,
    /// Subtree digests seen in earlier stages (shared by the Stager).
    pub seen: &'a Mutex<Option<HashSet<Digest>>>,
    /// The destination's device.
    pub key: (u64, u64),
    pub method: FileMethod,
    pub tree_clone: Option<TreeClone>,
    /// Measured costs on this device: placing one file, cloning one tree (microseconds).
    pub costs: (f64, f64),
    pub modes: Modes,
    /// The stager's `--preserve-inodes` policy, and how this build places code.
    pub code: CodePolicy,
    pub code_mode: CodeMode,
    /// The pool of ready copies to take subtrees from (None: never).
    pub pool: Option<&'a Pool>,
    /// Directories (full paths under `root_path`) never taken from the pool: the chains to
    /// the declared outputs, which the stage makes writable.
    pub no_pool: HashSet<PathBuf>,
    /// The root being filled: loans record where they are relative to it.
    pub root_path: PathBuf,
    /// Testing: fail after placing this many files.
    #[cfg(feature = "fault-injection")]
    pub fail_after: Option<usize>,
}

/// What a finished build hands the stage.
pub(crate) struct Built {
    pub counters: Counters,
    /// Cache inodes hardlinked into the root, one entry per link.
    pub linked: Vec<(Digest, Inode)>,
    /// Mean cost of placing one file or symlink (microseconds), when enough were placed to
    /// say; and of one whole-tree clone, when there was one.
    pub file_us: Option<f64>,
    pub tree_us: Option<f64>,
    /// Time spent placing files and symlinks, and how many.
    pub files_time: Duration,
    pub files: u64,
    /// Copies taken from the pool, to return after the action.
    pub loans: Vec<Loan>,
}

pub(crate) struct Builder<'a> {
    tree: &'a dyn Source,
    modes: Modes,
    placer: Placer<'a>,
    subtrees: Subtrees<'a>,
    counters: Counters,
    per_file_time: Duration,
    per_file_count: u64,
    pool: Option<&'a Pool>,
    no_pool: HashSet<PathBuf>,
    root_path: PathBuf,
    loans: Vec<Loan>,
    code: CodePolicy,
}

impl<'a> Builder<'a> {
    pub(crate) fn new(tree: &'a dyn Source, s: Setup<'a>) -> Self {
        Builder {
            tree,
            modes: s.modes,
            placer: Placer {
                cache: s.cache,
                devices: s.devices,
                key: s.key,
                method: s.method,
                modes: s.modes,
                code: s.code_mode,
                linked: Vec::new(),
                #[cfg(feature = "fault-injection")]
                fail_after: s.fail_after,
                #[cfg(feature = "fault-injection")]
                placed: 0,
            },
            subtrees: Subtrees::new(s.cache, s.devices, s.seen, s.key, s.tree_clone, s.costs),
            counters: Counters::default(),
            per_file_time: Duration::ZERO,
            per_file_count: 0,
            pool: s.pool,
            no_pool: s.no_pool,
            root_path: s.root_path,
            loans: Vec::new(),
            code: s.code,
        }
    }

    /// Fill the (empty, writable) directory `dir` at `path` with Directory `d`.
    /// Subdirectories end 0o555; the caller sets `dir`'s own mode.
    pub(crate) fn fill(
        &mut self,
        dir: &Dir,
        path: &Path,
        d: &Digest,
        subtrees: bool,
    ) -> Result<()> {
        let node = self.tree.dir(d, path)?;
        let t = Instant::now();
        for f in &node.files {
            let fd = Digest::from_opt_proto(f.digest.as_ref(), &f.name)?;
            self.placer
                .place_file(&mut self.counters, dir, path, &f.name, &fd, f.is_executable)?;
        }
        for s in &node.symlinks {
            let p = path.join(&s.name);
            let name = cstr(&s.name).ctx("name", &p)?;
            let target = cstr(&s.target).ctx("symlink target", &p)?;
            dir.symlink_at(&target, &name).ctx("symlinkat", &p)?;
            self.counters.symlinks += 1;
        }
        self.per_file_time += t.elapsed();
        self.per_file_count += (node.files.len() + node.symlinks.len()) as u64;
        for sub in &node.directories {
            let sd = Digest::from_opt_proto(sub.digest.as_ref(), &sub.name)?;
            let p = path.join(&sub.name);
            let name = cstr(&sub.name).ctx("name", &p)?;
            if subtrees && self.pool.is_some() && self.try_pool(dir, &p, &name, &sd)? {
                continue;
            }
            if subtrees && self.subtrees.enabled() && self.try_subtree(dir, &p, &name, &sd)? {
                continue;
            }
            let direct = self.modes.dirs_direct;
            let child = dir
                .mkdir_at(&name, if direct { 0o555 } else { 0o755 })
                .ctx("mkdirat", &p)?;
            self.counters.directories += 1;
            self.fill(&child, &p, &sd, subtrees)?;
            if !direct {
                child.chmod(0o555).ctx("chmod", &p)?;
            }
        }
        Ok(())
    }

    /// Stage subtree `d` as `name` by cloning its cache entry (building the entry on a repeat
    /// sighting). Ok(false): not done, stage it per file.
    fn try_subtree(&mut self, dir: &Dir, p: &Path, name: &CStr, d: &Digest) -> Result<bool> {
        if self.placer.code == CodeMode::Link && self.tree.holds_code(d, p)? {
            // A clone's code could not be linked back (EXDEV into a btrfs snapshot): per file.
            return Ok(false);
        }
        let facts = self.tree.facts(d, p)?;
        let entry = match self.subtrees.decide(&mut self.counters, d, &facts) {
            Take::PerFile => return Ok(false),
            Take::Clone(entry) => entry,
            Take::Build(entry) => {
                // Files placed into the cache entry are counted like any other placement. Its
                // code is not linked: the entry is cloned whole, which makes new inodes anyway.
                let cache = self.subtrees.cache;
                let code = std::mem::replace(&mut self.placer.code, CodeMode::Off);
                let r =
                    subtree::build_entry(cache, &entry, |dir, tmp| self.fill(dir, tmp, d, false));
                self.placer.code = code;
                r?;
                entry
            }
        };
        self.subtrees
            .clone_entry(&mut self.counters, &entry, dir, name, p, &facts)
    }

    /// Take subtree `d` as `name` from the pool (a hit), or count a miss and, when the
    /// subtree cache's sightings say `d` is hot, ask the pool for a copy. Ok(false): not taken.
    fn try_pool(&mut self, dir: &Dir, p: &Path, name: &CStr, d: &Digest) -> Result<bool> {
        let Some(pool) = self.pool else {
            return Ok(false);
        };
        let facts = self.tree.facts(d, p)?;
        if self.no_pool.contains(p) {
            return Ok(false);
        }
        // Small directories are not worth a copy, unless they hold code that only a copy made
        // ahead can offer as a link old enough to run.
        if facts.entries < POOL_MIN_ENTRIES
            && !(self.code.preserves() && self.tree.holds_code(d, p)?)
        {
            return Ok(false);
        }
        let min_age = self.code.min_link_age;
        if let Some(copy) = pool.take(self.subtrees.cache, d, dir, name, p, min_age) {
            self.counters.pool_hits += 1;
            self.counters.bytes += facts.bytes;
            self.counters.code_linked += copy.code_links;
            self.placer.linked.extend(copy.linked.iter().copied());
            let rel = p.strip_prefix(&self.root_path).unwrap_or(p).to_path_buf();
            self.loans.push(Loan { rel, copy });
            return Ok(true);
        }
        self.counters.pool_misses += 1;
        if self.subtrees.seen_before(d) {
            pool.want(d);
        }
        Ok(false)
    }

    /// The stage failed: the copies it took go with the root being removed.
    pub(crate) fn abandon_loans(&mut self) {
        if let Some(pool) = self.pool {
            for l in self.loans.drain(..) {
                pool.abandon(l);
            }
        }
    }

    /// The build succeeded: record this stage's subtree sightings and hand over the result.
    pub(crate) fn finish(mut self) -> Built {
        self.subtrees.save_sightings();
        let times = &self.subtrees.tree_times;
        Built {
            counters: self.counters,
            linked: self.placer.linked,
            file_us: (self.per_file_count > 16)
                .then(|| self.per_file_time.as_secs_f64() * 1e6 / self.per_file_count as f64),
            tree_us: (!times.is_empty()).then(|| times.iter().sum::<f64>() / times.len() as f64),
            files_time: self.per_file_time,
            files: self.per_file_count,
            loans: self.loans,
        }
    }
}
