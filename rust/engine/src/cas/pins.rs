//! Pins: what a running stage, action or any other user of the cache needs kept from
//! eviction, in every process sharing the cache. One design for all of them:
//!
//! ```text
//! let guard: PinGuard = cache.pin(&digest)?;   // kept until `guard` drops
//! ```
//!
//! - `digest` is any blob. The store only lists it; the collector above (`crate::gc`) keeps
//!   it and, for a Directory, everything it reaches (subdirectories, every file they list,
//!   a materialized `subtrees/<digest>`). Pins nest and repeat: a digest is kept while any
//!   guard for it lives.
//! - Users: the stager pins each input root for the life of its `StagedRoot` (so a running
//!   action's inputs stay); a pool of ready subtrees would hold one guard per subtree while it
//!   is in the pool; an upload queue one guard per queued blob until it is uploaded. Neither
//!   needs anything else from gc.
//! - Cost: pinning a digest no guard holds takes `gc.lock` shared (and rewrites the process's
//!   pin file unless it lists the digest already); one some guard holds costs a mutex and a
//!   counter.
//! - A guard dropped leaves its digest listed in the pin file until this process pins something
//!   new or exits: other processes' gc keeps it that much longer; this process's own gc sees the
//!   exact in-memory counts (so pinning a digest no guard holds always takes `gc.lock`).
//! - Lock order, in every process and thread: `gc.lock` first, then the table's mutex (`pin`
//!   registers that way; `gc` holds `gc.lock` exclusively while it reads the table).
//!
//! Holds: `cache.hold(&digests, until)` keeps exactly those blobs (no tree walk) from this
//! process's gc until `until`, with no guard to keep: a server's grace for the blobs of a
//! result it just answered, which the client reads after the response (`answer_grace` in the
//! server). Holds are registered like pins, under a shared `gc.lock`, but only in memory:
//! another process's gc (`clonestage gc` by hand) does not see them. `put_file_held` and
//! `put_bytes_held` hold a blob before they ask whether the cache has it, so no eviction comes
//! between a blob's install and its hold.
//!
//! How: each process owns one file `pins/<pid>-<nanos>`, flock'ed exclusively for its lifetime
//! and rewritten in place with the digests it pins. `gc` takes `gc.lock` exclusively, and reads
//! every pin file whose lock it cannot take (a live owner); a file whose lock it can take
//! belongs to a dead process and is removed. `pin` registers under a shared `gc.lock`, so a
//! digest is either pinned before gc decides, or used after gc has finished.

use crate::digest::Digest;
use crate::error::{Error, IoContext, Result};
use crate::platform::{lock, open_lock, try_lock, LockMode};
use std::collections::HashMap;
use std::fs::File;
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub(crate) struct PinTable {
    dir: PathBuf,
    inner: Mutex<Inner>,
}

struct Inner {
    counts: HashMap<Digest, usize>,
    /// Blobs held until a moment (`hold`), this process's gc only.
    holds: HashMap<Digest, std::time::Instant>,
    /// The size of `holds` at which `hold` next drops expired ones.
    next_hold_sweep: usize,
    /// What the pin file lists now (a superset of `counts`' keys).
    listed: std::collections::HashSet<Digest>,
    file: Option<(File, PathBuf)>,
}

/// Unpins its root when dropped.
pub struct PinGuard {
    table: Arc<PinTable>,
    root: Digest,
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        // The pin file is not rewritten here: a root listed a little longer is only protected
        // a little longer (until this process pins again or exits), and a stage saves a write.
        let mut inner = self.table.inner.lock().unwrap();
        if let Some(n) = inner.counts.get_mut(&self.root) {
            *n -= 1;
            if *n == 0 {
                inner.counts.remove(&self.root);
            }
        }
    }
}

impl Inner {
    fn rewrite(&mut self) -> std::io::Result<()> {
        let Some((f, _)) = self.file.as_mut() else {
            return Ok(());
        };
        let mut text = String::new();
        for d in self.counts.keys() {
            text.push_str(&format!("{d}\n"));
        }
        // Listed only once written: a failed write must not let `pin` skip the next one.
        self.listed.clear();
        f.set_len(0)?;
        f.rewind()?;
        f.write_all(text.as_bytes())?;
        self.listed = self.counts.keys().copied().collect();
        Ok(())
    }
}

impl super::Cache {
    /// Keep exactly `digests` from this process's eviction until `until` (holds, above).
    pub fn hold(&self, digests: &[Digest], until: std::time::Instant) -> Result<()> {
        self.pins.hold(&self.root().join("gc.lock"), digests, until)
    }

    /// End every hold of this process now.
    pub fn release_holds(&self) {
        self.pins.release_holds()
    }
}

impl PinTable {
    pub(crate) fn new(dir: PathBuf) -> PinTable {
        PinTable {
            dir,
            inner: Mutex::new(Inner {
                counts: HashMap::new(),
                holds: HashMap::new(),
                next_hold_sweep: 1024,
                listed: Default::default(),
                file: None,
            }),
        }
    }

    pub(crate) fn pin(this: &Arc<PinTable>, gc_lock: &Path, root: Digest) -> Result<PinGuard> {
        let guard = PinGuard {
            table: this.clone(),
            root,
        };
        {
            let mut inner = this.inner.lock().unwrap();
            if let Some(n) = inner.counts.get_mut(&root) {
                // Pinned already: every gc keeps it (this process's reads `counts`, others
                // our pin file), so no lock and no write.
                *n += 1;
                return Ok(guard);
            }
        }
        // Register under a shared gc.lock, taken before `inner` as gc takes its exclusive one
        // before reading `inner` (`all_pinned`): the other order deadlocks a stage against
        // this process's own eviction. The lock is this call's own open file (flock belongs
        // to the open file), released when it closes.
        let gc = open_lock(gc_lock).ctx("open", gc_lock)?;
        lock(&gc, LockMode::Shared).ctx("flock", gc_lock)?;
        let mut inner = this.inner.lock().unwrap();
        *inner.counts.entry(root).or_insert(0) += 1;
        let r = if inner.listed.contains(&root) {
            Ok(()) // still in the pin file from an earlier pin, or listed by another thread
        } else {
            Self::register(this, &mut inner)
        };
        drop(inner); // before `guard` can drop (on error), which takes the lock again
        drop(gc);
        r.map(|()| guard)
    }

    /// Write this process's pin file (creating it on first use) with what `inner` counts.
    fn register(this: &Arc<PinTable>, inner: &mut Inner) -> Result<()> {
        if inner.file.is_none() {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let p = this.dir.join(format!("{}-{nanos}", std::process::id()));
            let f = open_lock(&p).ctx("open", &p)?;
            // A fresh name: nobody else holds it, so refused means the lock itself failed.
            if !try_lock(&f, LockMode::Exclusive).ctx("flock", &p)? {
                return Err(Error::io(
                    "flock",
                    &p,
                    std::io::Error::from_raw_os_error(libc::EWOULDBLOCK),
                ));
            }
            inner.file = Some((f, p));
        }
        let path = inner.file.as_ref().map(|f| f.1.clone()).unwrap_or_default();
        inner.rewrite().map_err(|e| Error::io("write", path, e))
    }

    /// Keep `digests` (the blobs themselves, nothing they reach) from this process's gc until
    /// `until` (a later hold of the same digest extends it). Under a shared `gc.lock`, like
    /// `pin`: a gc that has not started yet sees the hold; one already running finished first,
    /// so a blob present after this returns stays until `until`.
    pub(crate) fn hold(
        &self,
        gc_lock: &Path,
        digests: &[Digest],
        until: std::time::Instant,
    ) -> Result<()> {
        let gc = open_lock(gc_lock).ctx("open", gc_lock)?;
        lock(&gc, LockMode::Shared).ctx("flock", gc_lock)?;
        let mut inner = self.inner.lock().unwrap();
        // Expired holds are dropped when the table has doubled since the last sweep: a put
        // holds one blob at a time (`Cache::put_file_held`), so sweeping on every call would
        // cost a walk of the table per blob of an output tree.
        if inner.holds.len() >= inner.next_hold_sweep {
            let now = std::time::Instant::now();
            inner.holds.retain(|_, t| *t > now);
            inner.next_hold_sweep = (2 * inner.holds.len()).max(1024);
        }
        for d in digests {
            let t = inner.holds.entry(*d).or_insert(until);
            *t = (*t).max(until);
        }
        drop(inner);
        drop(gc);
        Ok(())
    }

    /// Drop every hold now.
    pub(crate) fn release_holds(&self) {
        self.inner.lock().unwrap().holds.clear();
    }

    /// Blobs held now (`hold`). Call with gc.lock held exclusively.
    pub(crate) fn held(&self) -> Vec<Digest> {
        let mut inner = self.inner.lock().unwrap();
        let now = std::time::Instant::now();
        inner.holds.retain(|_, t| *t > now);
        inner.holds.keys().copied().collect()
    }

    /// Roots pinned by this process and by every other live process. Call with gc.lock held
    /// exclusively. Removes pin files of dead processes.
    pub(crate) fn all_pinned(&self) -> Result<Vec<Digest>> {
        let inner = self.inner.lock().unwrap();
        let mut out: Vec<Digest> = inner.counts.keys().copied().collect();
        let own = inner.file.as_ref().map(|f| f.1.clone());
        drop(inner);
        let rd = std::fs::read_dir(&self.dir).ctx("readdir", &self.dir)?;
        for e in rd.flatten() {
            let p = e.path();
            if Some(&p) == own.as_ref() {
                continue;
            }
            let Ok(f) = File::open(&p) else { continue };
            if try_lock(&f, LockMode::Shared).unwrap_or(false) {
                // Nobody holds it: the owner is gone.
                let _ = std::fs::remove_file(&p);
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            out.extend(text.lines().filter_map(|l| Digest::parse(l).ok()));
        }
        Ok(out)
    }
}
