//! Shared cache directories: the one deliberate hole in per-action isolation
//! (docs/permissions.md, "Shared cache directories").
//!
//! Compilers keep caches at paths no action declares: rules_swift passes
//! `-module-cache-path <bin_dir>/_swift_module_cache` to every Swift compile, Bazel's objc rules
//! `-fmodules-cache-path=<genfiles_dir>/_objc_module_cache` (docs/module-cache.md cites both).
//! Under `--spawn_strategy=local` that directory sits in the exec root and every compile reuses
//! the implicit modules the first one built; in a freshly staged root it would be empty every
//! time. So for each configured pattern (`pattern`), the stager links the matching path of a
//! root (`stage::shared_map`) to one persistent directory here, one per concrete
//! action-relative path (a pattern can match several configurations: each keeps its own, as
//! each has its own under `local`):
//!
//! ```text
//! <cache>/shared/<16 hex of sha256(rel)>-<last name>/   the directory a root links to
//! <cache>/shared/.trash-<pid>-<n>/                        a cleared one on its way out
//! ```
//!
//! What may be shared is what compilers built for sharing between concurrent processes: clang
//! and swiftc write a module to a temporary name and rename it into place, and coordinate
//! builders of one module with LLVM's `LockFileManager`. clonestage only decides who may use a
//! directory when (`gate`): any number of running actions (`Lease`), or one clearer alone.
//! A recovery clears a directory after the running actions that hold it end; eviction clears
//! only directories nobody holds, and only while no action runs (`evict_idle`, called by the
//! server's eviction). Nothing here follows a symlink: the directory is found by name in
//! `<cache>/shared/`, measured without following links (`usage`) and removed with the
//! engine's tree remover, which never follows one either.

mod gate;
pub mod pattern;
mod usage;

pub use pattern::{Pattern, DEFAULT_PATTERNS};
pub use usage::Usage;

use crate::cas::Cache;
use crate::error::{IoContext, Result};
use gate::Gate;
use sha2::{Digest as _, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

static TRASH_SEQ: AtomicU64 = AtomicU64::new(0);

/// One directory: its gate and when a root last linked it.
struct Entry {
    gate: Gate,
    last_leased: Mutex<Option<SystemTime>>,
}

/// The shared directories of one cache, for one server's patterns.
pub struct SharedDirs {
    base: PathBuf,
    patterns: Vec<Pattern>,
    /// By directory name under `base`.
    entries: Mutex<HashMap<String, Arc<Entry>>>,
}

impl std::fmt::Debug for SharedDirs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedDirs")
            .field("base", &self.base)
            .field("patterns", &self.patterns)
            .finish()
    }
}

/// What one eviction pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Evicted {
    pub dirs: u64,
    pub bytes: u64,
    /// Directories skipped because a root held them.
    pub held: u64,
}

/// The name of the directory for the concrete action-relative path `rel`.
pub fn dir_name(rel: &str) -> String {
    let h = Sha256::digest(rel.as_bytes());
    let last = rel.rsplit('/').next().unwrap_or(rel);
    // A name is at most NAME_MAX: the readable tail is cut well below it.
    let last: String = last.chars().take(64).collect();
    format!("{}-{last}", hex::encode(&h[..8]))
}

impl SharedDirs {
    /// `<cache>/shared/` for these patterns; trash an earlier process left is removed.
    pub fn open(cache: &Cache, patterns: Vec<Pattern>) -> Result<SharedDirs> {
        let base = cache.root().join("shared");
        match std::fs::create_dir(&base) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(crate::Error::io("mkdir", &base, e))
            }
            _ => {}
        }
        if let Ok(rd) = std::fs::read_dir(&base) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().starts_with(".trash-") {
                    let _ = crate::remove::remove_tree(&e.path());
                }
            }
        }
        Ok(SharedDirs {
            base,
            patterns,
            entries: Mutex::new(HashMap::new()),
        })
    }

    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }

    pub fn base(&self) -> &Path {
        &self.base
    }

    /// The persistent directory for action-relative path `rel`.
    pub fn path_for(&self, rel: &str) -> PathBuf {
        self.base.join(dir_name(rel))
    }

    fn entry(&self, name: &str) -> Arc<Entry> {
        self.entries
            .lock()
            .unwrap()
            .entry(name.to_string())
            .or_insert_with(|| {
                Arc::new(Entry {
                    gate: Gate::default(),
                    last_leased: Mutex::new(None),
                })
            })
            .clone()
    }

    /// Hold the directories of these action-relative paths for one root, making each that is
    /// missing (a symlink or file an action put at its name is removed first, never
    /// followed). Waits while one of them is being cleared. Returned in the order given.
    pub fn lease(&self, rels: &[String]) -> Result<Lease> {
        let mut names: Vec<(String, &String)> = rels.iter().map(|r| (dir_name(r), r)).collect();
        // One order for every lease: a lease waiting on a clear holds only earlier gates.
        names.sort();
        names.dedup_by(|a, b| a.0 == b.0);
        let mut lease = Lease {
            held: Vec::with_capacity(names.len()),
            dirs: Vec::with_capacity(names.len()),
        };
        for (name, rel) in &names {
            let e = self.entry(name);
            e.gate.enter();
            lease.held.push(e.clone());
            *e.last_leased.lock().unwrap() = Some(SystemTime::now());
            let path = self.base.join(name);
            self.ensure_dir(&path)?;
            lease.dirs.push(((*rel).clone(), path));
        }
        lease
            .dirs
            .sort_by_key(|(r, _)| rels.iter().position(|x| x == r));
        Ok(lease)
    }

    fn ensure_dir(&self, path: &Path) -> Result<()> {
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => return Ok(()),
            Ok(_) => std::fs::remove_file(path).ctx("unlink", path)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(crate::Error::io("lstat", path, e)),
        }
        match std::fs::create_dir(path) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                Err(crate::Error::io("mkdir", path, e))
            }
            _ => Ok(()),
        }
    }

    /// Empty the directory of `rel` (a recovery): waits until no root holds it, holds new
    /// roots back meanwhile, and leaves an empty directory. Returns the bytes it held.
    pub fn clear(&self, rel: &str) -> Result<u64> {
        let name = dir_name(rel);
        let e = self.entry(&name);
        e.gate.close_wait();
        let r = self.clear_closed(&name);
        e.gate.open();
        r
    }

    /// With the gate closed: move the directory aside, make an empty one, remove the old one.
    fn clear_closed(&self, name: &str) -> Result<u64> {
        let path = self.base.join(name);
        let bytes = usage::measure(&path).bytes;
        let trash = self.base.join(format!(
            ".trash-{}-{}",
            std::process::id(),
            TRASH_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        match std::fs::rename(&path, &trash) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(crate::Error::io("rename", &path, e)),
        }
        let made = self.ensure_dir(&path);
        crate::remove::remove_tree(&trash)?;
        made.map(|_| bytes)
    }

    /// Every directory under `<cache>/shared/` (those of other patterns or earlier servers
    /// too), with its usage.
    pub fn usage(&self) -> Vec<(String, Usage)> {
        let Ok(rd) = std::fs::read_dir(&self.base) else {
            return Vec::new();
        };
        rd.flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let u = match e.file_type() {
                    Ok(t) if t.is_dir() => usage::measure(&e.path()),
                    _ => Usage {
                        complete: true,
                        ..Default::default()
                    },
                };
                (name, u)
            })
            .collect()
    }

    /// Bytes held by all shared directories.
    pub fn bytes(&self) -> u64 {
        self.usage().iter().map(|(_, u)| u.bytes).sum()
    }

    /// Clear directories nobody holds until `want` bytes are freed: unmeasurable ones first,
    /// then the least recently leased (unknown since this process started: oldest). The
    /// caller makes sure no action runs; a root that takes a lease meanwhile keeps its
    /// directory (`try_close`), so no running action ever loses its cache.
    pub fn evict_idle(&self, want: u64) -> Evicted {
        let mut out = Evicted::default();
        let mut dirs: Vec<(bool, Option<SystemTime>, String, Usage)> = self
            .usage()
            .into_iter()
            .filter(|(_, u)| u.bytes > 0 || u.files > 0 || !u.complete)
            .map(|(name, u)| {
                let last = *self.entry(&name).last_leased.lock().unwrap();
                (u.complete, last, name, u)
            })
            .collect();
        dirs.sort_by(|a, b| (a.0, a.1, &a.2).cmp(&(b.0, b.1, &b.2)));
        for (_, _, name, u) in dirs {
            if out.bytes >= want {
                break;
            }
            let e = self.entry(&name);
            if !e.gate.try_close() {
                out.held += 1;
                continue;
            }
            let r = self.clear_closed(&name);
            e.gate.open();
            match r {
                Ok(b) => {
                    out.dirs += 1;
                    out.bytes += b.max(u.bytes);
                }
                Err(err) => {
                    tracing::warn!(dir = %self.base.join(&name).display(), error = %err, "cannot clear shared dir")
                }
            }
        }
        out
    }
}

/// The shared directories one root holds, with the path each is linked at. Dropping it lets a
/// clear or eviction have them.
pub struct Lease {
    held: Vec<Arc<Entry>>,
    /// (action-relative path, the directory it links to)
    dirs: Vec<(String, PathBuf)>,
}

impl Lease {
    pub fn dirs(&self) -> &[(String, PathBuf)] {
        &self.dirs
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        for e in self.held.drain(..) {
            e.gate.leave();
        }
    }
}

#[cfg(test)]
mod tests;
