//! The local content-addressed cache. One directory, shared safely by any number of processes:
//!
//! ```text
//! <cache>/blobs/<hh>/<sha256>-<size>     blob, mode 0o444, never modified after it is installed
//! <cache>/exec/<hh>/<sha256>-<size>      the same bytes as its own 0o555 inode (hardlinked executables)
//! <cache>/replicas/<hh>/<sha256>-<size>.<n>  extra inodes for blobs whose link count is full (EMLINK)
//! <cache>/subtrees/<sha256>-<size>/      a materialized, read-only Directory, cloned whole into roots
//! <cache>/tmp/                           files being written; installed by atomic no-replace rename
//! <cache>/pins/<pid>-<n>                 roots in use by a live process (flock'ed by the owner)
//! <cache>/quarantine/                    blobs found corrupt or written through, never served again
//! <cache>/code                           digests of the blobs that are Mach-O code (`code_record`)
//! <cache>/access.log, stats.json, devices.json, gc.lock
//! ```
//!
//! A blob is written to `tmp/`, hashed, checked against the digest it was offered under, set
//! read-only, and only then renamed into place without replacing: a crash leaves at worst a
//! stray temp file, never a wrong blob under a right name. The empty blob is never stored.
//!
//! This file is the blob store itself (layout, names, reads); beside it: `write` (putting
//! blobs), `verify`, `pins`, `inventory` (what is stored, and its removal under `gc.lock`),
//! `access_log` (when digests were last used), `sweep` (leftovers of dead processes),
//! `code_record` (Mach-O code blobs). The store is the engine's bottom layer: it knows
//! nothing of trees, stages or the pool. Which blobs eviction takes, and in what order, is
//! decided above them all, in `crate::gc`.
//!
//! Long because the store's layout, opening and reads are one concept, read in one place.

mod access_log;
pub mod code_record;
mod inventory;
mod pins;
mod quarantine_count;
mod rel_name;
mod sweep;
mod verify;
mod write;

pub use inventory::{cache_bytes, GcLock, Stored};
pub use pins::PinGuard;
pub(crate) use quarantine_count::Stamp as QuarantineStamp;
pub(crate) use rel_name::RelName;
pub use sweep::sweep_dead_tmp;
pub use verify::CorruptBlob;
pub use write::{PutFile, Upload};

use crate::digest::Digest;
use crate::error::{IoContext, Result};
use crate::platform::Dir;
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The mtime every installed cache inode carries (2001-09-09). An inode whose mtime differs
/// was written after install: that is how hardlinked inputs are checked after an action.
pub const BLOB_MTIME: i64 = 1_000_000_000;

static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

const SUBDIRS: [&str; 7] = [
    "blobs",
    "exec",
    "replicas",
    "subtrees",
    "tmp",
    "pins",
    "quarantine",
];

pub struct Cache {
    root: PathBuf,
    tmp: Dir,
    /// `blobs/` and `exec/`, open: staging links and clones relative to them.
    blobs: Dir,
    exec: Dir,
    /// Their `<hh>/` shard directories, opened on first use (shards are never removed): a
    /// staged file's link then resolves one name instead of two.
    blob_shards: Box<[std::sync::OnceLock<Dir>]>,
    exec_shards: Box<[std::sync::OnceLock<Dir>]>,
    pins: Arc<pins::PinTable>,
    /// Source devices from which cloning into the cache failed: copy from them directly.
    no_clone_from: Mutex<HashMap<u64, ()>>,
    /// The device the cache's files live on (of `tmp/`, where every blob is written first).
    dev: u64,
    /// Every inode this process quarantined, in order, by the path it was served under.
    /// A root remembers how long this was when it was staged: whatever was added since, it may
    /// hold (see `stage::tamper`). Quarantines are rare; this never shrinks.
    quarantined: Mutex<Vec<PathBuf>>,
    /// Which blobs are Mach-O code (`code_record`), learned at ingest.
    code: code_record::CodeRecord,
}

impl Cache {
    /// Open (creating if needed) the cache at `root`.
    ///
    /// The cache holds every source file and output that went through it: its top directory
    /// is made `0o700`, and an existing one owned by this user with wider modes is tightened
    /// (logged once, when it happens), so other local users see nothing under it.
    pub fn open(root: &Path) -> Result<Cache> {
        if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).ctx("mkdir", parent)?;
        }
        {
            use std::os::unix::fs::DirBuilderExt;
            match std::fs::DirBuilder::new().mode(0o700).create(root) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                    return Err(crate::Error::io("mkdir", root, e))
                }
                _ => {}
            }
        }
        let root = root.canonicalize().ctx("realpath", root)?;
        restrict_to_owner(&root)?;
        for sub in SUBDIRS {
            let p = root.join(sub);
            match std::fs::create_dir(&p) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                    return Err(crate::Error::io("mkdir", &p, e))
                }
                _ => {}
            }
        }
        let open = |sub: &str| {
            let p = root.join(sub);
            Dir::open(&p).ctx("open", &p)
        };
        quarantine_count::ensure(&root);
        let (tmp, blobs, exec) = (open("tmp")?, open("blobs")?, open("exec")?);
        #[allow(clippy::unnecessary_cast)] // dev_t is i32 on macOS
        let dev = tmp.stat().ctx("fstat", root.join("tmp"))?.st_dev as u64;
        let shards = || (0..256).map(|_| std::sync::OnceLock::new()).collect();
        Ok(Cache {
            code: code_record::CodeRecord::new(&root),
            dev,
            blob_shards: shards(),
            exec_shards: shards(),
            blobs,
            exec,
            pins: Arc::new(pins::PinTable::new(root.join("pins"))),
            root,
            tmp,
            no_clone_from: Mutex::new(HashMap::new()),
            quarantined: Mutex::new(Vec::new()),
        })
    }

    /// How many inodes this process has quarantined so far: a mark for `quarantined_since`.
    pub(crate) fn quarantine_mark(&self) -> usize {
        self.quarantined.lock().unwrap().len()
    }

    /// The cache paths of the inodes this process quarantined after `mark` was taken.
    pub(crate) fn quarantined_since(&self, mark: usize) -> Vec<PathBuf> {
        let q = self.quarantined.lock().unwrap();
        q.get(mark..).map(|s| s.to_vec()).unwrap_or_default()
    }

    /// The stamp of the quarantine count every process bumps (`quarantine_count`): equal
    /// stamps, no inode was quarantined in between by anyone. None: unknown.
    pub(crate) fn quarantine_stamp(&self) -> Option<quarantine_count::Stamp> {
        quarantine_count::stamp(&self.root)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The device the cache's files live on.
    pub(crate) fn dev(&self) -> u64 {
        self.dev
    }

    fn sharded(&self, dir: &str, d: &Digest, suffix: &str) -> PathBuf {
        let hex = d.hex();
        self.root
            .join(dir)
            .join(&hex[..2])
            .join(format!("{hex}-{}{suffix}", d.size))
    }

    /// Where blob `d` lives (whether or not it is present). Not meaningful for the empty blob.
    pub fn blob_path(&self, d: &Digest) -> PathBuf {
        self.sharded("blobs", d, "")
    }

    /// `blobs/` (`exec/` if `exec`) and `rel` from there: the fallback when a shard fd fails
    /// (its directory was removed and made again behind this process's back).
    pub(crate) fn locate_from_top<'r>(
        &self,
        rel: &'r RelName,
        exec: bool,
    ) -> (RawFd, &'r std::ffi::CStr) {
        let top = if exec { &self.exec } else { &self.blobs };
        (top.as_raw_fd(), rel.as_cstr())
    }

    /// The directory fd and name to reach `rel` in `blobs/` (`exec/` if `exec`): its open
    /// shard directory and leaf name, else (the shard does not exist yet) the top directory
    /// and the whole relative name.
    pub(crate) fn locate<'r>(&self, rel: &'r RelName, exec: bool) -> (RawFd, &'r std::ffi::CStr) {
        let (top, shards) = if exec {
            (&self.exec, &self.exec_shards)
        } else {
            (&self.blobs, &self.blob_shards)
        };
        let slot = &shards[rel.shard as usize];
        if let Some(d) = slot.get() {
            return (d.as_raw_fd(), rel.leaf());
        }
        let hh = &rel.as_cstr().to_bytes()[..2];
        let name = std::ffi::CString::new(hh).expect("hex digits");
        match top.open_at(&name) {
            Ok(d) => (slot.get_or_init(|| d).as_raw_fd(), rel.leaf()),
            Err(_) => (top.as_raw_fd(), rel.as_cstr()),
        }
    }

    /// lstat of the cache's installed inode for `d` (its `exec/` one if `exec`), through the
    /// open shard directory: one short lookup, no path built (two when it is not there).
    pub(crate) fn stat_installed(&self, d: &Digest, exec: bool) -> std::io::Result<libc::stat> {
        let rel = RelName::new(d);
        let (fd, name) = self.locate(&rel, exec);
        match crate::platform::stat_at(fd, name) {
            // A shard fd whose directory was removed and made again: the top dir still works.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let (fd, name) = self.locate_from_top(&rel, exec);
                crate::platform::stat_at(fd, name)
            }
            r => r,
        }
    }

    pub(crate) fn exec_path(&self, d: &Digest) -> PathBuf {
        self.sharded("exec", d, "")
    }

    pub(crate) fn replica_path(&self, d: &Digest, exec: bool, n: u32) -> PathBuf {
        self.sharded(
            "replicas",
            d,
            &format!(".{}{n}", if exec { "x" } else { "r" }),
        )
    }

    pub(crate) fn subtree_path(&self, d: &Digest) -> PathBuf {
        self.root.join("subtrees").join(d.file_name())
    }

    /// A fresh name in `tmp/` (pid first, so sweeps can tell dead writers' leftovers). The
    /// sequence is process-wide: several `Cache` values on one directory never collide.
    pub(crate) fn tmp_name(&self, tag: &str) -> String {
        let n = TMP_SEQ.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}-{tag}", std::process::id())
    }

    pub(crate) fn tmp_dir(&self) -> &Dir {
        &self.tmp
    }

    /// True if the blob is present with the right size (the empty blob is always present).
    pub fn contains(&self, d: &Digest) -> bool {
        if d.is_empty() {
            return true;
        }
        // Through the open shard directory: FindMissingBlobs asks this for every input of an
        // action (~1,600 for a SwiftCompile), so one short lookup each, no path built.
        #[allow(clippy::unnecessary_cast)] // off_t's width differs between OSes
        self.stat_installed(d, false).is_ok_and(|st| {
            st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_size as u64 == d.size
        })
    }

    /// Digests of `ds` that are not present (the empty blob never is missing).
    pub fn find_missing<'a>(&self, ds: impl IntoIterator<Item = &'a Digest>) -> Vec<Digest> {
        ds.into_iter()
            .filter(|d| !self.contains(d))
            .copied()
            .collect()
    }

    /// Open a blob for reading.
    pub fn open_blob(&self, d: &Digest) -> Result<Option<File>> {
        if d.is_empty() {
            let p = Path::new("/dev/null");
            return File::open(p).ctx("open", p).map(Some);
        }
        let p = self.blob_path(d);
        match File::open(&p) {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(crate::Error::io("open", p, e)),
        }
    }

    /// Read a whole blob into memory (for Directory messages and small batch reads).
    pub fn read(&self, d: &Digest) -> Result<Option<Vec<u8>>> {
        if d.is_empty() {
            return Ok(Some(Vec::new()));
        }
        // Relative to the open shard dir, and one read of size + 1 bytes (a longer file shows
        // up as one byte too many): 3 syscalls instead of std::fs::read's 5 and a path walk.
        // Staging reads every Directory of a cold tree this way.
        let rel = RelName::new(d);
        let read = || -> std::io::Result<Vec<u8>> {
            use std::io::Read;
            // Through the kept shard fd (no walk through blobs/); from the top again when
            // that shard was removed and made again behind this process's back.
            let (dir, name) = self.locate(&rel, false);
            let mut f = match crate::platform::open_read_at(dir, name) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let (dir, name) = self.locate_from_top(&rel, false);
                    crate::platform::open_read_at(dir, name)?
                }
                r => r?,
            };
            let want = usize::try_from(d.size).unwrap_or(usize::MAX - 1);
            if want < 1 << 20 {
                // One read of size + 1 bytes: a local regular file returns fewer only at its
                // end, so exactly `size` bytes means the end (no second read to see EOF; a
                // cold stage reads every Directory of its tree this way).
                let mut v = vec![0u8; want + 1];
                let mut n = 0;
                loop {
                    match f.read(&mut v[n..]) {
                        Ok(0) => break,
                        Ok(k) => n += k,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(e),
                    }
                    if n >= want {
                        break;
                    }
                }
                v.truncate(n);
                return Ok(v);
            }
            let mut v = Vec::with_capacity(want.saturating_add(1).min(1 << 30));
            (&mut f)
                .take(d.size.saturating_add(1))
                .read_to_end(&mut v)?;
            Ok(v)
        };
        match read() {
            Ok(v) if v.len() as u64 == d.size => Ok(Some(v)),
            Ok(v) => Err(crate::Error::DigestMismatch {
                what: format!("cached blob {}", self.blob_path(d).display()),
                expected: *d,
                actual: Digest::of_bytes(&v),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(crate::Error::io("read", self.blob_path(d), e)),
        }
    }

    /// Keep `root` from eviction until the guard drops; the collector (`crate::gc`) keeps
    /// everything it reaches too. Visible to gc in every process sharing this cache.
    pub fn pin(&self, root: &Digest) -> Result<PinGuard> {
        pins::PinTable::pin(&self.pins, &self.root.join("gc.lock"), *root)
    }

    /// Call `f(digest, entry)` for every inode stored under `sub` (`blobs`, `exec`, `replicas`):
    /// the sharded layout `<sub>/<hh>/<hex>-<size>[.<suffix>]`. Names that are not a digest
    /// (temporary or foreign files) are skipped.
    pub(crate) fn for_each_inode(
        &self,
        sub: &str,
        f: &mut dyn FnMut(Digest, &std::fs::DirEntry),
    ) -> Result<()> {
        let top = self.root.join(sub);
        for shard in std::fs::read_dir(&top).ctx("readdir", &top)?.flatten() {
            let Ok(rd) = std::fs::read_dir(shard.path()) else {
                continue;
            };
            for e in rd.flatten() {
                let name = e.file_name();
                let name = name.to_string_lossy();
                if let Some(d) = Digest::from_file_name(name.split('.').next().unwrap_or("")) {
                    f(d, &e);
                }
            }
        }
        Ok(())
    }
}

/// Make the cache's top directory `0o700` (the umask may have widened a fresh one; an old
/// cache was made `0o755`). A cache owned by another user is left alone, with a warning.
fn restrict_to_owner(root: &Path) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let m = std::fs::metadata(root).ctx("stat", root)?;
    let mode = m.mode() & 0o7777;
    if mode & 0o077 == 0 {
        return Ok(());
    }
    if m.uid() != unsafe { libc::geteuid() } {
        tracing::warn!(cache = %root.display(), mode = format!("{mode:o}"), owner = m.uid(), "the cache belongs to another user and other users can reach it; leaving its mode alone");
        return Ok(());
    }
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700)).ctx("chmod", root)?;
    tracing::info!(cache = %root.display(), was = format!("{mode:o}"), "cache directory was open to other users; made it 0700");
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests;
