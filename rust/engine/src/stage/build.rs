//! Building a root: directories created with `*at` calls under fds this process opened,
//! files placed by the device's method with per-file fallbacks (clone -> hardlink -> copy;
//! EMLINK -> a replica inode), and, where the filesystem clones whole trees, subtrees taken
//! from the subtree cache in one call.

use super::device::{Devices, FileMethod};
use super::plan::{Memo, Plan};
use super::Modes;
use crate::cas::Cache;
use crate::digest::Digest;
use crate::error::{Error, IoContext, Result};
use crate::platform::{self, cstr, Dir, TreeClone};
use crate::stats::Counters;
use std::collections::HashSet;
use std::ffi::CStr;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

/// Clone a cached subtree whole only when placing its files one by one is expected to cost at
/// least this many times the clone, both figures measured on this device as staging goes (a
/// btrfs snapshot commits the transaction: ~3 ms quiet, 10x more with writes pending).
pub const SUBTREE_PAYOFF: f64 = 1.5;

/// A subtree enters the cache the second time it is seen: a first sighting is staged per file,
/// so a cold stage costs exactly the per-file method, and one-off trees (an action's own,
/// changing sources) never pay for a cache entry.
pub const SUBTREE_MIN_SIGHTINGS: u32 = 2;

/// Every this-many eligible hits that the estimate says do not pay, clone anyway to re-measure:
/// a clone estimate taken under load must be able to recover when the load goes away.
pub const SUBTREE_REMEASURE_EVERY: u64 = 16;

static SKIPPED_HITS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Which of the cache's inodes for a digest a hardlinked input is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Inode {
    Blob,
    Exec,
    Replica { exec: bool, n: u32 },
}

pub(crate) struct Builder<'a> {
    pub cache: &'a Cache,
    pub memo: &'a Memo,
    pub devices: &'a Devices,
    pub seen: &'a Mutex<Option<HashSet<Digest>>>,
    pub key: (u64, u64),
    pub method: FileMethod,
    pub tree_clone: Option<TreeClone>,
    pub file_us: f64,
    pub tree_clone_us: f64,
    pub modes: Modes,
    pub fail_after: Option<usize>,
    pub counters: Counters,
    /// Cache inodes hardlinked into the root, one entry per link (duplicates are removed
    /// after the stage, off its critical path), checked for writes after the action.
    pub linked: Vec<(Digest, Inode)>,
    new_sightings: Vec<Digest>,
    placed: usize,
    pub per_file_time: std::time::Duration,
    pub per_file_count: u64,
    pub tree_times: Vec<f64>,
}

impl<'a> Builder<'a> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        cache: &'a Cache,
        memo: &'a Memo,
        devices: &'a Devices,
        seen: &'a Mutex<Option<HashSet<Digest>>>,
        key: (u64, u64),
        method: FileMethod,
        tree_clone: Option<TreeClone>,
        costs: (f64, f64),
        modes: Modes,
        fail_after: Option<usize>,
    ) -> Self {
        Builder {
            cache,
            memo,
            devices,
            seen,
            key,
            method,
            tree_clone,
            file_us: costs.0,
            tree_clone_us: costs.1,
            modes,
            fail_after,
            counters: Counters::default(),
            linked: Vec::new(),
            new_sightings: Vec::new(),
            placed: 0,
            per_file_time: Default::default(),
            per_file_count: 0,
            tree_times: Vec::new(),
        }
    }

    /// Fill the (empty, writable) directory `dir` at `path` with Directory `d`.
    /// Subdirectories end 0o555; the caller sets `dir`'s own mode.
    pub(crate) fn fill(
        &mut self,
        plan: &Plan,
        dir: &Dir,
        path: &Path,
        d: &Digest,
        subtrees: bool,
    ) -> Result<()> {
        let node = plan.dir(self.cache, self.memo, d, path)?;
        let t = Instant::now();
        for f in &node.files {
            let fd = Digest::from_opt_proto(f.digest.as_ref(), &f.name)?;
            self.place_file(dir, path, &f.name, &fd, f.is_executable)?;
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
            if subtrees
                && self.tree_clone.is_some()
                && self.try_subtree(plan, dir, &p, &name, &sd)?
            {
                continue;
            }
            let direct = self.modes.dirs_direct;
            let child = dir
                .mkdir_at(&name, if direct { 0o555 } else { 0o755 })
                .ctx("mkdirat", &p)?;
            self.counters.directories += 1;
            self.fill(plan, &child, &p, &sd, subtrees)?;
            if !direct {
                child.chmod(0o555).ctx("chmod", &p)?;
            }
        }
        Ok(())
    }

    fn subtree_pays(&self, files: u64) -> bool {
        files as f64 * self.file_us >= SUBTREE_PAYOFF * self.tree_clone_us
    }

    /// Stage subtree `d` as `name` by cloning its cache entry (building the entry on a repeat
    /// sighting). Ok(false): not done, stage it per file.
    fn try_subtree(
        &mut self,
        plan: &Plan,
        dir: &Dir,
        p: &Path,
        name: &CStr,
        d: &Digest,
    ) -> Result<bool> {
        let facts = plan.facts(self.cache, self.memo, d, p)?;
        let files = facts.entries;
        // Tiny directories never pay, whatever the estimates say; don't even look them up.
        if files < 16 {
            return Ok(false);
        }
        let pays = self.subtree_pays(files);
        let entry = self.cache.subtree_path(d);
        if std::fs::symlink_metadata(&entry).is_ok() {
            let remeasure = !pays
                && SKIPPED_HITS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    % SUBTREE_REMEASURE_EVERY
                    == 0;
            if !pays && !remeasure {
                return Ok(false);
            }
            self.counters.subtree_hits += 1;
        } else {
            self.counters.subtree_misses += 1;
            if !self.seen_before(d) || !pays {
                return Ok(false);
            }
            self.build_subtree(plan, d, &entry)?;
        }
        let t = Instant::now();
        match platform::clone_tree(&entry, dir, name) {
            Ok(()) => {
                self.tree_times.push(t.elapsed().as_secs_f64() * 1e6);
                match self.tree_clone {
                    Some(TreeClone::Snapshot) => self.counters.snapshot += 1,
                    _ => self.counters.clonefile += 1,
                }
                self.counters.bytes += facts.bytes;
                Ok(true)
            }
            Err(e) if platform::is_unsupported(&e) => {
                let reason = platform::reason_name(&e);
                self.counters.fallback(&format!("tree-{reason}"));
                self.devices.no_tree_clone(self.cache, self.key, &reason);
                self.tree_clone = None;
                Ok(false)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io("clone_tree", p, e)),
        }
    }

    fn seen_before(&mut self, d: &Digest) -> bool {
        let mut guard = self.seen.lock().unwrap();
        let log = self.cache.root().join("subtrees.seen");
        let set = guard.get_or_insert_with(|| {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| Digest::parse(l).ok())
                .collect()
        });
        if set.contains(d) {
            return true;
        }
        set.insert(*d);
        self.new_sightings.push(*d);
        SUBTREE_MIN_SIGHTINGS <= 1
    }

    /// Append this stage's first sightings to `subtrees.seen` in one write.
    pub(crate) fn save_sightings(&mut self) {
        if self.new_sightings.is_empty() {
            return;
        }
        use std::io::Write;
        let text: String = self
            .new_sightings
            .drain(..)
            .map(|d| format!("{d}\n"))
            .collect();
        let log = self.cache.root().join("subtrees.seen");
        let r = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(text.as_bytes()));
        if let Err(e) = r {
            tracing::warn!(path = %log.display(), error = %e, "cannot record subtree sightings");
        }
    }

    /// Materialize Directory `d` read-only in the subtree cache. Built beside its final name
    /// and renamed in without replacing: a concurrent builder's entry wins, ours is dropped.
    fn build_subtree(&mut self, plan: &Plan, d: &Digest, entry: &Path) -> Result<()> {
        let subtrees = entry.parent().expect("subtrees dir");
        let tmp_name = format!(".b-{}", self.cache.tmp_name("subtree"));
        let tmp = subtrees.join(&tmp_name);
        let parent = Dir::open(subtrees).ctx("open", subtrees)?;
        platform::new_tree_container(&parent, &cstr(&tmp_name).ctx("name", &tmp)?)
            .ctx("create tree container", &tmp)?;
        let r = (|| {
            let dir = Dir::open(&tmp).ctx("open", &tmp)?;
            // Files placed into the cache entry are counted like any other placement.
            self.fill(plan, &dir, &tmp, d, false)?;
            dir.chmod(0o555).ctx("chmod", &tmp)?;
            match platform::rename_noreplace(&tmp, entry) {
                Ok(()) => Ok(()),
                Err(e)
                    if matches!(e.raw_os_error(), Some(libc::EEXIST) | Some(libc::ENOTEMPTY)) =>
                {
                    crate::remove::remove_tree(&tmp)
                }
                Err(e) => Err(Error::io("rename", entry, e)),
            }
        })();
        if r.is_err() {
            let _ = crate::remove::remove_tree(&tmp);
        }
        r
    }

    fn place_file(
        &mut self,
        dir: &Dir,
        path: &Path,
        name: &str,
        d: &Digest,
        exec: bool,
    ) -> Result<()> {
        self.placed += 1;
        if let Some(n) = self.fail_after {
            if self.placed > n {
                return Err(Error::Injected(n));
            }
        }
        // Paths for error messages are built only on error: this is the per-file hot path.
        let p = || path.join(name);
        let name_buf = NameBuf::new(name);
        let cname = name_buf.as_cstr().map_err(|e| Error::io("name", p(), e))?;
        let mode = if exec { 0o555 } else { 0o444 };
        if d.is_empty() {
            dir.create_file(&cname, mode)
                .map_err(|e| Error::io("create", p(), e))?;
            self.fix_mode(dir, &cname, mode, path)?;
            self.counters.empty += 1;
            return Ok(());
        }
        let rel_buf = crate::cas::RelName::new(d);
        let (mut blobs, mut rel) = self.cache.locate(&rel_buf, false);
        let mut from_top = false;
        loop {
            let r = match self.method {
                FileMethod::Clone => {
                    platform::clone_file_at(blobs, rel, dir, &cname, mode).map(|_| {
                        if platform::FILE_CLONE_METHOD == "clonefile" {
                            self.counters.clonefile += 1;
                        } else {
                            self.counters.reflink += 1;
                        }
                    })
                }
                FileMethod::Hardlink => self.hardlink(dir, &cname, &rel_buf, d, exec),
                FileMethod::Copy => platform::copy_file_at(blobs, rel, dir, &cname, mode)
                    .map(|_| self.counters.copy += 1),
            };
            match r {
                Ok(()) => {
                    if self.method != FileMethod::Hardlink {
                        self.fix_mode(dir, &cname, mode, path)?;
                    }
                    self.counters.bytes += d.size;
                    return Ok(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !self.cache.contains(d) => {
                    return Err(Error::Missing {
                        digests: vec![*d],
                        path: p().display().to_string(),
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !from_top => {
                    // Present by path but not through the shard fd: go through the top dir.
                    (blobs, rel) = self.cache.locate_from_top(&rel_buf, false);
                    from_top = true;
                }
                Err(e) if self.method != FileMethod::Copy && platform::is_unsupported(&e) => {
                    let to = if self.method == FileMethod::Clone {
                        FileMethod::Hardlink
                    } else {
                        FileMethod::Copy
                    };
                    let reason = platform::reason_name(&e);
                    self.counters.fallback(&reason);
                    self.devices
                        .fallback(self.cache, self.key, self.method, to, &reason);
                    self.method = to;
                }
                Err(e) => {
                    let op = match self.method {
                        FileMethod::Clone => "clone",
                        FileMethod::Hardlink => "linkat",
                        FileMethod::Copy => "copy",
                    };
                    return Err(Error::io(op, p(), e));
                }
            }
        }
    }

    /// Hardlink the blob, or its 0o555 twin (made on first need), relative to the cache's open
    /// directories. On EMLINK, link a replica inode instead.
    fn hardlink(
        &mut self,
        dir: &Dir,
        cname: &CStr,
        rel: &crate::cas::RelName,
        d: &Digest,
        exec: bool,
    ) -> std::io::Result<()> {
        let to_io = |e: Error| match e {
            Error::Io { source, .. } => source,
            other => std::io::Error::other(other.to_string()),
        };
        let first = if exec { Inode::Exec } else { Inode::Blob };
        let (src_dir, src) = self.cache.locate(rel, exec);
        let mut r = platform::hardlink_at(src_dir, src, dir, cname);
        if exec
            && matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::NotFound)
            && self.cache.contains(d)
        {
            self.cache.make_exec_inode(d).map_err(to_io)?;
            // The twin's shard may have just been created.
            let (src_dir, src) = self.cache.locate(rel, exec);
            r = platform::hardlink_at(src_dir, src, dir, cname);
        }
        if matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::NotFound) {
            // A shard fd whose directory was removed and made again: the top dir still works.
            let (src_dir, src) = self.cache.locate_from_top(rel, exec);
            r = platform::hardlink_at(src_dir, src, dir, cname);
        }
        let mut inode = first;
        let mut replica = 0u32;
        loop {
            match r {
                Ok(()) => {
                    self.counters.hardlink += 1;
                    self.linked.push((*d, inode));
                    return Ok(());
                }
                Err(e) if e.raw_os_error() == Some(libc::EMLINK) && replica < 1024 => {
                    if replica == 0 {
                        self.counters.fallback("emlink");
                        tracing::debug!(digest = %d, "link count full; using a replica inode");
                    }
                    let src = self.cache.replica_inode(d, exec, replica).map_err(to_io)?;
                    inode = Inode::Replica { exec, n: replica };
                    replica += 1;
                    r = platform::hardlink(&src, dir, cname);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Only when the umask would have cleared bits of the mode we asked for.
    fn fix_mode(&self, dir: &Dir, name: &CStr, mode: u32, p: &Path) -> Result<()> {
        if self.modes.fix_files {
            dir.chmod_file_at(name, mode).ctx("chmod", p)?;
        }
        Ok(())
    }
}

/// A file name as a C string, on the stack when it fits NAME_MAX (255 bytes): one fewer heap
/// allocation per staged file.
#[allow(clippy::large_enum_variant)] // the big variant is the point: it lives on the stack
enum NameBuf {
    Stack([u8; 256], usize),
    Heap(String),
}

impl NameBuf {
    fn new(name: &str) -> NameBuf {
        let b = name.as_bytes();
        if b.len() < 256 {
            let mut a = [0u8; 256];
            a[..b.len()].copy_from_slice(b);
            NameBuf::Stack(a, b.len() + 1)
        } else {
            NameBuf::Heap(name.to_string())
        }
    }

    fn as_cstr(&self) -> std::io::Result<std::borrow::Cow<'_, CStr>> {
        let bad = || std::io::Error::new(std::io::ErrorKind::InvalidInput, "name contains NUL");
        match self {
            NameBuf::Stack(a, n) => CStr::from_bytes_with_nul(&a[..*n])
                .map(std::borrow::Cow::Borrowed)
                .map_err(|_| bad()),
            NameBuf::Heap(s) => cstr(s).map(std::borrow::Cow::Owned),
        }
    }
}
