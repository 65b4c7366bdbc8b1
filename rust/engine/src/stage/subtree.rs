//! The subtree cache, where the filesystem clones whole trees (btrfs snapshots, APFS
//! clonefile of a directory): whether a subtree is taken from it (its size against the two
//! costs measured on this device), its sightings (`subtrees.seen`: an entry is built on the
//! second sighting), building an entry beside its final name, and cloning one into a root.
//!
//! What goes into an entry is filled by the caller (`fill.rs`), passed in as a closure: this
//! file never walks a tree.

use super::device::Devices;
use super::plan::Facts;
use crate::cas::Cache;
use crate::digest::Digest;
use crate::error::{Error, IoContext, Result};
use crate::platform::{self, cstr, Dir, TreeClone};
use crate::stats::Counters;
use std::collections::HashSet;
use std::ffi::CStr;
use std::path::{Path, PathBuf};
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

/// What to do with one subtree.
pub(super) enum Take {
    /// Stage it per file.
    PerFile,
    /// Clone this cache entry.
    Clone(PathBuf),
    /// Build this cache entry (a repeat sighting), then clone it.
    Build(PathBuf),
}

/// The subtree cache as one stage sees it.
pub(super) struct Subtrees<'a> {
    pub(super) cache: &'a Cache,
    pub(super) devices: &'a Devices,
    /// Digests seen in earlier stages (`subtrees.seen`, read on first use), shared by the Stager.
    pub(super) seen: &'a Mutex<Option<HashSet<Digest>>>,
    /// The destination's device (`Devices::key`).
    pub(super) key: (u64, u64),
    /// How this device clones a tree; None: it does not (or stopped for this stage).
    pub(super) tree_clone: Option<TreeClone>,
    /// Measured costs on this device: placing one file, cloning one tree (microseconds).
    pub(super) file_us: f64,
    pub(super) tree_clone_us: f64,
    /// First sightings of this stage, appended to `subtrees.seen` by `save_sightings`.
    new_sightings: Vec<Digest>,
    /// How long each whole-tree clone of this stage took (microseconds).
    pub(super) tree_times: Vec<f64>,
}

impl<'a> Subtrees<'a> {
    pub(super) fn new(
        cache: &'a Cache,
        devices: &'a Devices,
        seen: &'a Mutex<Option<HashSet<Digest>>>,
        key: (u64, u64),
        tree_clone: Option<TreeClone>,
        (file_us, tree_clone_us): (f64, f64),
    ) -> Self {
        Subtrees {
            cache,
            devices,
            seen,
            key,
            tree_clone,
            file_us,
            tree_clone_us,
            new_sightings: Vec::new(),
            tree_times: Vec::new(),
        }
    }

    /// Whether this device clones whole trees (still, this stage).
    pub(super) fn enabled(&self) -> bool {
        self.tree_clone.is_some()
    }

    fn pays(&self, files: u64) -> bool {
        files as f64 * self.file_us >= SUBTREE_PAYOFF * self.tree_clone_us
    }

    /// Decide for subtree `d`, which expands to `facts` (counting the hit or miss).
    pub(super) fn decide(&mut self, c: &mut Counters, d: &Digest, facts: &Facts) -> Take {
        let files = facts.entries;
        // Tiny directories never pay, whatever the estimates say; don't even look them up.
        if files < 16 {
            return Take::PerFile;
        }
        let pays = self.pays(files);
        let entry = self.cache.subtree_path(d);
        if std::fs::symlink_metadata(&entry).is_ok() {
            let remeasure = !pays
                && SKIPPED_HITS
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    .is_multiple_of(SUBTREE_REMEASURE_EVERY);
            if !pays && !remeasure {
                return Take::PerFile;
            }
            c.subtree_hits += 1;
            Take::Clone(entry)
        } else {
            c.subtree_misses += 1;
            if !self.seen_before(d) || !pays {
                return Take::PerFile;
            }
            Take::Build(entry)
        }
    }

    /// Clone the cache entry `entry` into `dir` as `name` (`p` for messages). Ok(false): the
    /// entry vanished, or the device refused (then no more tree clones this stage): stage it
    /// per file.
    pub(super) fn clone_entry(
        &mut self,
        c: &mut Counters,
        entry: &Path,
        dir: &Dir,
        name: &CStr,
        p: &Path,
        facts: &Facts,
    ) -> Result<bool> {
        let t = Instant::now();
        match platform::clone_tree(entry, dir, name) {
            Ok(()) => {
                self.tree_times.push(t.elapsed().as_secs_f64() * 1e6);
                match self.tree_clone {
                    Some(TreeClone::Snapshot) => c.snapshot += 1,
                    _ => c.clonefile += 1,
                }
                c.bytes += facts.bytes;
                Ok(true)
            }
            Err(e) if platform::is_unsupported(&e) => {
                let reason = platform::reason_name(&e);
                c.fallback(&format!("tree-{reason}"));
                self.devices.no_tree_clone(self.cache, self.key, &reason);
                self.tree_clone = None;
                Ok(false)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io("clone_tree", p, e)),
        }
    }

    /// Whether `d` was seen in an earlier stage (recording this stage's sighting; asking again
    /// in the same stage gives the same answer).
    pub(super) fn seen_before(&mut self, d: &Digest) -> bool {
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
            return !self.new_sightings.contains(d);
        }
        set.insert(*d);
        self.new_sightings.push(*d);
        SUBTREE_MIN_SIGHTINGS <= 1
    }

    /// Append this stage's first sightings to `subtrees.seen` in one write.
    pub(super) fn save_sightings(&mut self) {
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
}

/// Materialize a cache entry read-only at `entry`, `fill` filling the (empty, writable)
/// directory it is built in. Built beside its final name and renamed in without replacing: a
/// concurrent builder's entry wins, ours is dropped.
pub(super) fn build_entry(
    cache: &Cache,
    entry: &Path,
    fill: impl FnOnce(&Dir, &Path) -> Result<()>,
) -> Result<()> {
    let subtrees = entry.parent().expect("subtrees dir");
    let tmp_name = format!(".b-{}", cache.tmp_name("subtree"));
    let tmp = subtrees.join(&tmp_name);
    let parent = Dir::open(subtrees).ctx("open", subtrees)?;
    platform::new_tree_container(&parent, &cstr(&tmp_name).ctx("name", &tmp)?)
        .ctx("create tree container", &tmp)?;
    let r = (|| {
        let dir = Dir::open(&tmp).ctx("open", &tmp)?;
        fill(&dir, &tmp)?;
        dir.chmod(0o555).ctx("chmod", &tmp)?;
        match platform::rename_noreplace(&tmp, entry) {
            Ok(()) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EEXIST) | Some(libc::ENOTEMPTY)) => {
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
