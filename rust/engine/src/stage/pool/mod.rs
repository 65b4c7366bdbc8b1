//! The pool of ready input subtrees: per hot subtree digest, a few copies already built on the
//! work dirs' filesystem (`<cache>/pool/`, beside `work/`) with the permission contract
//! applied, each with its `identity::Record`. A stage that meets a pooled digest takes a copy
//! with one no-replace rename (`take.rs`) instead of placing its files; after the action the
//! copy is proven untouched and renamed back (`recycle.rs`), or discarded (`discard.rs`).
//! Copies are built in the background (`build.rs`, driven by whoever runs the stager) for
//! digests a stage missed that the subtree cache's sightings say are hot.
//!
//! The pool lives in one process: its records are in memory, so a pool left by an earlier
//! process is stale and `Pool::new` empties it. Each copy holds a pin (`Cache::pin`), so gc
//! never evicts a blob it links; the collector (`crate::gc`) drops ready copies first.
//!
//! Never pooled: subtrees on the path of a declared output (the stage makes that chain
//! writable), subtrees smaller than `POOL_MIN_ENTRIES`, and copies holding a replica inode.

mod build;
mod discard;
mod identity;
mod recycle;
mod take;

pub use discard::Discard;

use crate::cas::{Cache, PinGuard, QuarantineStamp};
use crate::digest::Digest;
use crate::error::{IoContext, Result};
use crate::ledger::Ledger;
use crate::platform::Dir;
use crate::stage::place::Inode;
use identity::Record;
use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Subtrees with fewer files and symlinks than this are staged per file: a rename and the
/// recycle check would cost about what placing them does.
pub const POOL_MIN_ENTRIES: u64 = 16;

/// How many ready copies the pool may hold.
#[derive(Debug, Clone, Copy)]
pub struct PoolBounds {
    /// Copies of one digest, lent and ready together: about the number of actions that run
    /// at once and read it.
    pub per_digest: usize,
    /// Ready and lent copies in all.
    pub copies: usize,
    /// Inodes private to ready and lent copies (directories, symlinks, clones, copies).
    pub inodes: u64,
}

impl Default for PoolBounds {
    fn default() -> Self {
        PoolBounds {
            per_digest: 4,
            copies: 64,
            inodes: 256 * 1024,
        }
    }
}

/// One copy: ready in the pool, or lent to a root.
pub(crate) struct Copy {
    pub(crate) digest: Digest,
    pub(crate) record: Record,
    /// `Cache::quarantine_mark()` before the copy linked anything.
    pub(crate) mark: usize,
    /// `Cache::quarantine_stamp()` from before the copy was last proven against the cache
    /// (built, or its cache inodes looked up): while it is unchanged, no process quarantined
    /// anything, so the copy's cache inodes are all still served.
    pub(crate) stamp: Option<QuarantineStamp>,
    /// Its hardlinked cache inodes, for the holding root's `check_inputs`.
    pub(crate) linked: Vec<(Digest, Inode)>,
    /// Mach-O code files it holds as links (`--preserve-inodes macho`), and when they were
    /// made: it is lent only once they are old enough to run (`CodePolicy::min_link_age`).
    pub(crate) code_links: u64,
    pub(crate) built: std::time::Instant,
    pub(crate) _pin: PinGuard,
}

impl Copy {
    /// Whether it may be lent now: settled (`Record::settled`), and its code links, if any,
    /// older than `min_link_age`.
    pub(crate) fn lendable(&self, min_link_age: std::time::Duration) -> bool {
        self.record.settled() && (self.code_links == 0 || self.built.elapsed() >= min_link_age)
    }

    /// Whether no quarantine happened anywhere since the copy was last proven against the
    /// cache; `now` is `Cache::quarantine_stamp()`.
    pub(crate) fn stamp_holds(&self, now: Option<QuarantineStamp>) -> bool {
        now.is_some() && now == self.stamp
    }

    /// Whether this process quarantined, since the copy was made, a cache inode it links.
    pub(crate) fn links_a_quarantined_inode(&self, cache: &Cache) -> bool {
        let since = cache.quarantined_since(self.mark);
        !since.is_empty()
            && self
                .record
                .cache_paths()
                .any(|cp| since.iter().any(|q| q == cp))
    }
}

/// A copy a root took: where in the root (relative to it), and its record.
pub struct Loan {
    pub(crate) rel: PathBuf,
    pub(crate) copy: Copy,
}

impl Loan {
    pub fn digest(&self) -> Digest {
        self.copy.digest
    }
}

#[derive(Default)]
struct State {
    ready: HashMap<Digest, Vec<(CString, Copy)>>,
    /// Copies of each digest that exist (ready or lent).
    held: HashMap<Digest, usize>,
    copies: usize,
    inodes: u64,
    wanted: VecDeque<Digest>,
    wanted_set: HashSet<Digest>,
}

pub struct Pool {
    dir: PathBuf,
    fd: Dir,
    bounds: PoolBounds,
    state: Mutex<State>,
    seq: AtomicU64,
    /// The stager's: pool counters go where its stages' do.
    ledger: Arc<Ledger>,
    /// Whether moving a 0o555 directory to another parent needs it made writable first
    /// (its `..` entry changes): everyone but a process that may write anywhere.
    chmod_to_move: bool,
}

impl Pool {
    /// The pool at `<cache>/pool/`, emptied first (whatever is there is an earlier process's
    /// and has no record).
    pub(crate) fn new(
        cache: &Cache,
        ledger: Arc<Ledger>,
        bounds: PoolBounds,
        chmod_to_move: bool,
    ) -> Result<Pool> {
        let dir = cache.root().join("pool");
        let stale = empty_locked(cache, &dir, || false)?.unwrap_or(0);
        if stale > 0 {
            tracing::info!(path = %dir.display(), copies = stale, "emptied a stale pool of ready subtrees");
        }
        match std::fs::create_dir(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(crate::Error::io("mkdir", &dir, e))
            }
            _ => {}
        }
        let fd = Dir::open(&dir).ctx("open", &dir)?;
        Ok(Pool {
            dir,
            fd,
            bounds,
            state: Mutex::new(State::default()),
            seq: AtomicU64::new(0),
            ledger,
            chmod_to_move,
        })
    }

    pub fn bounds(&self) -> PoolBounds {
        self.bounds
    }

    /// Ready copies now.
    pub fn ready(&self) -> usize {
        self.state
            .lock()
            .unwrap()
            .ready
            .values()
            .map(Vec::len)
            .sum()
    }

    /// Ready copies of `d` now.
    pub fn ready_of(&self, d: &Digest) -> usize {
        self.state.lock().unwrap().ready.get(d).map_or(0, Vec::len)
    }

    /// Copies that exist now (ready or lent).
    pub fn copies(&self) -> usize {
        self.state.lock().unwrap().copies
    }

    /// Digests waiting for a copy to be built.
    pub fn wanted(&self) -> usize {
        self.state.lock().unwrap().wanted.len()
    }

    /// A stage missed `d`, which is hot: build a copy when there is room.
    pub(crate) fn want(&self, d: &Digest) {
        let mut s = self.state.lock().unwrap();
        let held = s.held.get(d).copied().unwrap_or(0);
        if held < self.bounds.per_digest && s.wanted_set.insert(*d) {
            s.wanted.push_back(*d);
        }
    }

    fn next_name(&self, d: &Digest) -> String {
        format!(
            "{}.{}",
            d.file_name(),
            self.seq.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Room for one more copy of `d` costing `inodes`?
    fn room(&self, s: &State, d: &Digest, inodes: u64) -> bool {
        s.held.get(d).copied().unwrap_or(0) < self.bounds.per_digest
            && s.copies < self.bounds.copies
            && s.inodes + inodes <= self.bounds.inodes
    }

    /// The digest that has waited longest for a copy.
    fn next_wanted(&self) -> Option<Digest> {
        let mut s = self.state.lock().unwrap();
        let d = s.wanted.pop_front()?;
        s.wanted_set.remove(&d);
        Some(d)
    }

    /// Count a copy of `d` about to be built (at most `inodes` of its own); false: no room.
    fn reserve(&self, d: &Digest, inodes: u64) -> bool {
        let mut s = self.state.lock().unwrap();
        if !self.room(&s, d, inodes) {
            return false;
        }
        *s.held.entry(*d).or_insert(0) += 1;
        s.copies += 1;
        s.inodes += inodes;
        true
    }

    /// A reserved copy was not built.
    fn unreserve(&self, d: &Digest, inodes: u64) {
        let mut s = self.state.lock().unwrap();
        if let Some(n) = s.held.get_mut(d) {
            *n -= 1;
            if *n == 0 {
                s.held.remove(d);
            }
        }
        s.copies -= 1;
        s.inodes -= inodes;
    }

    /// A reserved copy was built: ready, counted at its own inodes instead of the estimate.
    fn add_ready(&self, name: CString, copy: Copy, estimate: u64) {
        let mut s = self.state.lock().unwrap();
        s.inodes = s.inodes - estimate + copy.record.inodes();
        s.ready.entry(copy.digest).or_default().push((name, copy));
    }

    /// Remove every ready copy (gc, shutdown); lent ones are discarded when they come back.
    pub fn drain(&self) -> usize {
        let ready: Vec<(CString, Copy)> = {
            let mut s = self.state.lock().unwrap();
            let all: Vec<_> = s.ready.drain().flat_map(|(_, v)| v).collect();
            for (_, c) in &all {
                forget(&mut s, c);
            }
            all
        };
        let n = ready.len();
        for (name, _) in ready {
            discard::remove_named(&self.dir, &name);
        }
        n
    }
}

/// Take a copy's count off the pool's totals (it leaves the pool for good).
fn forget(s: &mut State, c: &Copy) {
    if let Some(n) = s.held.get_mut(&c.digest) {
        *n -= 1;
        if *n == 0 {
            s.held.remove(&c.digest);
        }
    }
    s.copies -= 1;
    s.inodes -= c.record.inodes();
}

/// Empty `<cache>/pool/` for `clonestage gc`, unless `server_running()` (asked while holding
/// `gc.lock`, which a starting server's `Pool::new` takes too, so a server cannot start
/// building copies between the question and the removal): Ok(None) when a server holds the
/// cache (its own eviction drains its pool), else how many copies were removed.
pub fn empty_stale(cache: &Cache, server_running: impl Fn() -> bool) -> Result<Option<usize>> {
    empty_locked(cache, &cache.root().join("pool"), server_running)
}

fn empty_locked(
    cache: &Cache,
    dir: &Path,
    server_running: impl Fn() -> bool,
) -> Result<Option<usize>> {
    let _gc = cache.lock_gc()?;
    if server_running() {
        return Ok(None);
    }
    Ok(Some(empty(dir)))
}

/// Remove everything under the pool directory `dir`; how many entries.
pub(crate) fn empty(dir: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut n = 0;
    for e in rd.flatten() {
        match crate::remove::remove_tree(&e.path()) {
            Ok(()) => n += 1,
            Err(err) => {
                tracing::warn!(path = %e.path().display(), error = %err, "cannot remove a pooled copy")
            }
        }
    }
    n
}

#[cfg(test)]
mod tests;
