//! The record of one ready copy and the proof that a copy is untouched: every entry's identity
//! (inode, type and mode, owner, size, mtime, and for inodes private to the copy the link
//! count and ctime) and every directory's listing, taken when the copy was made and compared
//! after each action that held it.
//!
//! Why this is sound for an action running as root: anything that changes a private inode's
//! bytes, size, mode, owner, links or extended attributes moves its ctime, and ctime cannot be
//! set back (utimensat sets it to now). So a private inode whose ctime is unchanged is unchanged
//! (with one caveat: timestamps advance by clock ticks, so a copy is lent only once it is older
//! than a tick, `Record::settled`). Replacing an entry changes its inode number, or, when a freed
//! number is reused, gives it a new inode whose ctime is its creation's, never the recorded
//! one; adding, removing or renaming an entry changes a listing.
//!
//! Hardlinked files are the cache's own inodes: their ctime moves with every concurrent link,
//! so they are compared on inode, mode, owner, size and `BLOB_MTIME`, and the cache must still
//! serve that very inode under its name (a quarantine renames it away). A write through such
//! an inode that puts size and mtime back is not seen here, exactly as it is not seen for a
//! root staged without the pool (docs/permissions.md): the pool lends the same inode the cache
//! would link next, so it adds no reader of such a write that the cache did not already have.
//!
//! The copy's top directory is renamed at each take and return, which moves its ctime: its
//! ctime is recorded again right after each rename (`Record::retop`).
//!
//! That the cache still serves each hardlinked inode needs one more lookup per file; the
//! caller leaves it out while the cache's quarantine count (`Cache::quarantine_stamp`) is
//! where it was before the copy was last proven against the cache, since only a quarantine
//! takes a pinned inode out of the cache.

use crate::cas::{Cache, BLOB_MTIME};
use crate::digest::Digest;
use crate::error::{Error, IoContext, Result};
use crate::platform::Dir;
use crate::stage::plan::Source;
use std::ffi::{CString, OsString};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One entry's identity, as lstat gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Id {
    ino: u64,
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    mtime: (i64, i64),
    /// Private inodes only: link count and ctime.
    private: Option<(u64, (i64, i64))>,
}

impl Id {
    fn of(m: &std::fs::Metadata, private: bool) -> Id {
        Id {
            ino: m.ino(),
            mode: m.mode(),
            uid: m.uid(),
            gid: m.gid(),
            size: if m.is_dir() { 0 } else { m.len() },
            mtime: (m.mtime(), m.mtime_nsec()),
            private: private.then(|| (m.nlink(), (m.ctime(), m.ctime_nsec()))),
        }
    }

    /// From a `stat` (what `fstatat` gives on the verify path).
    #[allow(clippy::unnecessary_cast)] // the field types differ between Linux and macOS
    fn of_stat(st: &libc::stat, private: bool) -> Id {
        let is_dir = st.st_mode as u32 & libc::S_IFMT as u32 == libc::S_IFDIR as u32;
        Id {
            ino: st.st_ino as u64,
            mode: st.st_mode as u32,
            uid: st.st_uid as u32,
            gid: st.st_gid as u32,
            size: if is_dir { 0 } else { st.st_size as u64 },
            mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
            private: private.then_some((
                st.st_nlink as u64,
                (st.st_ctime as i64, st.st_ctime_nsec as i64),
            )),
        }
    }

    /// The first field that differs, as a short reason name.
    fn differs(&self, now: &Id) -> Option<&'static str> {
        if self.ino != now.ino {
            Some("replaced")
        } else if self.mode != now.mode {
            Some("mode")
        } else if (self.uid, self.gid) != (now.uid, now.gid) {
            Some("owner")
        } else if self.size != now.size {
            Some("size")
        } else if self.mtime != now.mtime {
            Some("mtime")
        } else if self.private.map(|p| p.0) != now.private.map(|p| p.0) {
            Some("nlink")
        } else if self.private != now.private {
            Some("ctime")
        } else {
            None
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    /// Relative to the copy's top ("" for the top).
    rel: PathBuf,
    /// Its last component, for `fstatat` relative to its directory (empty for directories,
    /// which are lstat'ed by path and opened).
    leaf: CString,
    id: Id,
    /// Directories: the sorted names they hold.
    listing: Option<Vec<OsString>>,
    /// Hardlinked files: the cache path that must still name this inode.
    cache_path: Option<PathBuf>,
    /// And the cache inode's name relative to the cache's open shard directory.
    cache_inode: Option<(Digest, bool)>,
}

/// What a ready copy was when it was made.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    entries: Vec<Entry>,
    /// The newest ctime among the entries below the top (seconds, nanoseconds).
    newest: (i64, i64),
    /// Whether this filesystem keeps sub-second timestamps (any nanosecond part seen).
    fine: bool,
}

fn listing(p: &Path) -> std::io::Result<Vec<OsString>> {
    let mut v: Vec<OsString> = std::fs::read_dir(p)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<std::io::Result<_>>()?;
    v.sort_unstable();
    Ok(v)
}

impl Record {
    /// Record the copy of Directory `d` at `top`, walking the tree as `src` describes it (so a
    /// file that is a hardlink is tied to the cache inode for its digest).
    pub(crate) fn take(cache: &Cache, src: &dyn Source, d: &Digest, top: &Path) -> Result<Record> {
        let mut r = Record {
            entries: Vec::new(),
            newest: (0, 0),
            fine: false,
        };
        let mut todo: Vec<(PathBuf, Digest)> = vec![(PathBuf::new(), *d)];
        while let Some((rel, dd)) = todo.pop() {
            let here = top.join(&rel);
            let node: Arc<_> = src.dir(&dd, &here)?;
            let m = std::fs::symlink_metadata(&here).ctx("lstat", &here)?;
            r.push(
                rel.clone(),
                Id::of(&m, true),
                Some(listing(&here).ctx("readdir", &here)?),
                None,
            );
            for f in &node.files {
                let p = here.join(&f.name);
                let m = std::fs::symlink_metadata(&p).ctx("lstat", &p)?;
                let fd = Digest::from_opt_proto(f.digest.as_ref(), &f.name)?;
                let inode = (m.nlink() > 1).then_some((fd, f.is_executable));
                let cache_path = if m.nlink() > 1 {
                    let cp = if f.is_executable {
                        cache.exec_path(&fd)
                    } else {
                        cache.blob_path(&fd)
                    };
                    let cm = std::fs::symlink_metadata(&cp).ctx("lstat", &cp)?;
                    if cm.ino() != m.ino() || m.mtime() != BLOB_MTIME {
                        // A replica inode (EMLINK) or something unexpected: not pooled.
                        return Err(Error::InvalidArgument(format!(
                            "{}: a hardlink that is not the cache's inode for {fd}",
                            p.display()
                        )));
                    }
                    Some(cp)
                } else {
                    None
                };
                let private = cache_path.is_none();
                r.push(rel.join(&f.name), Id::of(&m, private), None, cache_path);
                r.entries.last_mut().expect("pushed").cache_inode = inode;
            }
            for s in &node.symlinks {
                let p = here.join(&s.name);
                let m = std::fs::symlink_metadata(&p).ctx("lstat", &p)?;
                r.push(rel.join(&s.name), Id::of(&m, true), None, None);
            }
            for sub in &node.directories {
                let sd = Digest::from_opt_proto(sub.digest.as_ref(), &sub.name)?;
                todo.push((rel.join(&sub.name), sd));
            }
        }
        Ok(r)
    }

    fn push(&mut self, rel: PathBuf, id: Id, listing: Option<Vec<OsString>>, cp: Option<PathBuf>) {
        if let Some((_, c)) = id.private {
            self.fine |= c.1 != 0 || id.mtime.1 != 0;
            if !rel.as_os_str().is_empty() && c > self.newest {
                self.newest = c;
            }
        }
        let leaf = if listing.is_some() {
            CString::default()
        } else {
            use std::os::unix::ffi::OsStrExt;
            let name = rel.file_name().unwrap_or_default().as_bytes();
            CString::new(name).unwrap_or_default()
        };
        self.entries.push(Entry {
            rel,
            leaf,
            id,
            listing,
            cache_path: cp,
            cache_inode: None,
        });
    }

    /// Record the top directory again, after a rename moved its ctime.
    pub(crate) fn retop(&mut self, top: &Path) -> Result<()> {
        let m = std::fs::symlink_metadata(top).ctx("lstat", top)?;
        let e = &mut self.entries[0];
        if e.id.ino != m.ino() {
            return Err(Error::io(
                "lstat",
                top,
                std::io::Error::other("the copy's top directory was replaced"),
            ));
        }
        e.id = Id::of(&m, true);
        Ok(())
    }

    /// Whether the copy is older than a clock tick, so that a change made after it was lent
    /// cannot carry a ctime equal to the recorded one (timestamps come from a coarse clock:
    /// one tick, up to 10 ms, on Linux; whole seconds on filesystems without nanoseconds).
    pub(crate) fn settled(&self) -> bool {
        let Ok(now) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) else {
            return false;
        };
        let newest = self.newest.0 as f64 + self.newest.1 as f64 * 1e-9;
        let margin = if self.fine { 0.05 } else { 2.0 };
        now.as_secs_f64() > newest + margin
    }

    /// Private inodes, the top included: what the copy costs in inodes.
    pub(crate) fn inodes(&self) -> u64 {
        self.entries
            .iter()
            .filter(|e| e.cache_path.is_none())
            .count() as u64
    }

    /// The cache paths of the hardlinked inodes this copy holds.
    pub(crate) fn cache_paths(&self) -> impl Iterator<Item = &Path> {
        self.entries.iter().filter_map(|e| e.cache_path.as_deref())
    }

    /// Prove the copy at `top` is what was recorded. Err: the reason it is not (a short name
    /// for counters) and the path where it differs. Directories are lstat'ed by path (their
    /// parents' entries were proven first, so no component is a symlink) and opened; the
    /// entries in them are `fstatat`'ed relative to that fd. With `cache_inodes`, each
    /// hardlinked file's cache inode is looked up too (relative to the cache's open shard
    /// directory); the caller may leave that out when no quarantine happened anywhere since
    /// the copy was last proven against the cache (`Cache::quarantine_stamp`), because nothing
    /// else renames a pinned cache inode away.
    pub(crate) fn verify(
        &self,
        cache: &Cache,
        top: &Path,
        cache_inodes: bool,
    ) -> std::result::Result<(), (&'static str, PathBuf)> {
        let mut dir: Option<Dir> = None;
        for e in &self.entries {
            let now = if let Some(l) = &e.listing {
                let p = top.join(&e.rel);
                let m = std::fs::symlink_metadata(&p).map_err(|_| ("missing", p.clone()))?;
                let now = Id::of(&m, true);
                if let Some(why) = e.id.differs(&now) {
                    return Err((why, p));
                }
                match listing(&p) {
                    Ok(now) if &now == l => {}
                    _ => return Err(("listing", p)),
                }
                dir = Some(Dir::open(&p).map_err(|_| ("missing", p.clone()))?);
                continue;
            } else {
                let d = dir.as_ref().expect("a directory comes before its entries");
                match d.stat_at(&e.leaf) {
                    Ok(st) => Id::of_stat(&st, e.cache_inode.is_none()),
                    Err(_) => return Err(("missing", top.join(&e.rel))),
                }
            };
            if let Some(why) = e.id.differs(&now) {
                return Err((why, top.join(&e.rel)));
            }
            if cache_inodes && !e.served_by(cache) {
                return Err(("quarantined", top.join(&e.rel)));
            }
        }
        Ok(())
    }

    /// Whether the cache still serves every hardlinked inode of the copy under its name.
    pub(crate) fn cache_inodes_intact(&self, cache: &Cache) -> bool {
        self.entries.iter().all(|e| e.served_by(cache))
    }
}

impl Entry {
    /// Still the cache's inode (true for entries that are not hardlinks): a quarantine renames
    /// it away (`stage::tamper`).
    fn served_by(&self, cache: &Cache) -> bool {
        let Some((d, exec)) = &self.cache_inode else {
            return true;
        };
        #[allow(clippy::unnecessary_cast)] // ino_t's width differs between OSes
        cache
            .stat_installed(d, *exec)
            .is_ok_and(|st| st.st_ino as u64 == self.id.ino)
    }
}
