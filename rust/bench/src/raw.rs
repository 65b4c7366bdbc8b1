//! The raw per-file methods clonestage is compared with, written as tightly as a stager
//! could write them: directories made with `mkdirat`, every file placed relative to open
//! directory fds (source and destination), nothing else (no chmod, no stat, no bookkeeping).
//!
//! - `hardlink`: `linkat` per file from the source tree (what NativeLink / Buildbarn do).
//! - `hardlink_cas`, `reflink_cas`: the same from the cache's own blob files, through shard
//!   directory fds opened once before the runs (as the engine keeps them): the syscalls any
//!   stager that links from a sharded content cache must make. Against `hardlink`, the
//!   difference is the cost of the cache's layout (each file's source in a different
//!   directory, a long name); against `stage_cold`, what clonestage's own work adds.
//! - `hardlink_cas_tree`, `reflink_cas_tree`: the same again, after reading and decoding every
//!   Directory message of the tree from the cache (`tree::load_directory`, no validation, no
//!   bookkeeping): the floor of any stager that materializes a REAPI tree it has not seen
//!   from a content cache. The raw loops above get their list of files for free; a stager
//!   has to read it. Against it, `stage_cold` shows clonestage's own work alone.
//! - `reflink`: `openat` + `openat(O_CREAT|O_EXCL, 0o444)` + `ioctl(FICLONE)` per file
//!   (on macOS `clonefileat` per file).
//! - `copy`: the same opens, then `read`/`write` of every byte (deliberately not
//!   `copy_file_range`, which XFS and btrfs turn into a reflink).
//! - `symlink`: a symlink forest as Bazel's sandbox builds it: real directories, one
//!   `symlinkat` per file pointing at the absolute source path.
//! - `snapshot` (btrfs): one `BTRFS_IOC_SNAP_CREATE` of a subvolume (the engine's own subtree
//!   cache entry) under a fresh root directory (on macOS: `clonefile` of the directory).
//!
//! With `threads > 1`, directories are made first, then the files are claimed in batches of
//! 16 from a shared counter by that many scoped threads (spawned inside the timed region).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A generated tree: `dirs[0]` is the root itself; every other dir has a parent index that
/// comes before it.
pub struct Manifest {
    pub dirs: Vec<DirEnt>,
    pub files: Vec<FileEnt>,
    pub bytes: u64,
}

pub struct DirEnt {
    pub parent: usize,
    pub name: CString,
    /// Relative to the root ("" for the root).
    pub rel: PathBuf,
}

pub struct FileEnt {
    pub dir: usize,
    pub name: CString,
    /// Absolute source path (the symlink forest's target).
    pub target: CString,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raw {
    Hardlink,
    Reflink,
    Copy,
    Symlink,
    HardlinkCas,
    ReflinkCas,
    HardlinkCasTree,
    ReflinkCasTree,
}

impl Raw {
    pub fn name(self) -> &'static str {
        match self {
            Raw::Hardlink => "hardlink",
            Raw::Reflink => "reflink",
            Raw::Copy => "copy",
            Raw::Symlink => "symlink",
            Raw::HardlinkCas => "hardlink_cas",
            Raw::ReflinkCas => "reflink_cas",
            Raw::HardlinkCasTree => "hardlink_cas_tree",
            Raw::ReflinkCasTree => "reflink_cas_tree",
        }
    }

    /// Whether this method takes each file from the cache's blob files, not the source tree.
    pub fn reads_cache(self) -> bool {
        matches!(
            self,
            Raw::HardlinkCas | Raw::ReflinkCas | Raw::HardlinkCasTree | Raw::ReflinkCasTree
        )
    }

    /// Whether this method first reads the tree's Directory messages from the cache.
    pub fn reads_tree(self) -> bool {
        matches!(self, Raw::HardlinkCasTree | Raw::ReflinkCasTree)
    }
}

/// Each manifest file's blob in a cache: the shard directories, open, and per file (in
/// manifest order) its shard and leaf name.
pub struct CasSource {
    shards: Vec<OwnedFd>,
    files: Vec<(usize, CString)>,
    cache: std::sync::Arc<clonestage_engine::Cache>,
    /// Every Directory of the tree, once each (what the `*_cas_tree` methods read).
    tree: Vec<clonestage_engine::Digest>,
}

impl CasSource {
    /// Hash every source file (not timed) and find its blob in `cache`; list the Directories
    /// of the tree at `root`.
    pub fn open(
        cache: &std::sync::Arc<clonestage_engine::Cache>,
        man: &Manifest,
        root: &clonestage_engine::Digest,
    ) -> anyhow::Result<CasSource> {
        use anyhow::Context;
        // Each Directory once, by the engine's own walk; a stored Directory is its canonical
        // encoding, so encoding it again gives back its digest.
        let tree: Vec<clonestage_engine::Digest> = clonestage_engine::tree::get_tree(cache, root)?
            .iter()
            .map(|d| clonestage_engine::Digest::of_bytes(&clonestage_engine::tree::encode(d)))
            .collect();
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut shards = Vec::new();
        let mut files = Vec::with_capacity(man.files.len());
        for f in &man.files {
            let src = Path::new(std::ffi::OsStr::from_bytes(f.target.to_bytes()));
            let file =
                std::fs::File::open(src).with_context(|| format!("open {}", src.display()))?;
            let d = clonestage_engine::Digest::of_reader(file)
                .with_context(|| format!("read {}", src.display()))?;
            let blob = cache.blob_path(&d);
            anyhow::ensure!(
                blob.is_file(),
                "{} is not in the cache as {}",
                src.display(),
                blob.display()
            );
            let dir = blob.parent().expect("sharded").to_path_buf();
            let shard = match dirs.iter().position(|x| *x == dir) {
                Some(i) => i,
                None => {
                    shards.push(open_dir(&dir).with_context(|| format!("open {}", dir.display()))?);
                    dirs.push(dir);
                    dirs.len() - 1
                }
            };
            let leaf = cpath(Path::new(blob.file_name().expect("leaf")))?;
            files.push((shard, leaf));
        }
        anyhow::ensure!(
            tree.len() == man.dirs.len(),
            "the tree at {root} has {} Directories, the generated tree {} directories",
            tree.len(),
            man.dirs.len()
        );
        Ok(CasSource {
            shards,
            files,
            cache: cache.clone(),
            tree,
        })
    }
}

const BATCH: usize = 16;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))
}

fn owned(fd: libc::c_int) -> OwnedFd {
    unsafe { OwnedFd::from_raw_fd(fd) }
}

const DIR_FLAGS: libc::c_int =
    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NOFOLLOW;

pub fn open_dir(p: &Path) -> io::Result<OwnedFd> {
    let c = cpath(p)?;
    cvt(unsafe { libc::open(c.as_ptr(), DIR_FLAGS) }).map(owned)
}

fn open_dir_at(dir: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    cvt(unsafe { libc::openat(dir, name.as_ptr(), DIR_FLAGS) }).map(owned)
}

fn mkdir_at(dir: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    cvt(unsafe { libc::mkdirat(dir, name.as_ptr(), 0o755) })?;
    open_dir_at(dir, name)
}

fn open_src(dir: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    cvt(unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    })
    .map(owned)
}

fn create_at(dir: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC | libc::O_NOFOLLOW;
    cvt(unsafe { libc::openat(dir, name.as_ptr(), flags, 0o444 as libc::c_uint) }).map(owned)
}

/// Clone file `sname` of directory `src` into directory `dst` as `dname`.
#[cfg(target_os = "linux")]
fn clone_at_named(src: RawFd, sname: &CStr, dst: RawFd, dname: &CStr) -> io::Result<()> {
    let s = open_src(src, sname)?;
    let t = create_at(dst, dname)?;
    cvt(unsafe { libc::ioctl(t.as_raw_fd(), libc::FICLONE, s.as_raw_fd()) }).map(|_| ())
}

#[cfg(target_os = "macos")]
fn clone_at_named(src: RawFd, sname: &CStr, dst: RawFd, dname: &CStr) -> io::Result<()> {
    const CLONE_NOFOLLOW: u32 = 0x0001;
    cvt(unsafe { libc::clonefileat(src, sname.as_ptr(), dst, dname.as_ptr(), CLONE_NOFOLLOW) })
        .map(|_| ())
}

fn clone_at(src: RawFd, dst: RawFd, name: &CStr) -> io::Result<()> {
    clone_at_named(src, name, dst, name)
}

fn copy_fd(src: &OwnedFd, dst: &OwnedFd, buf: &mut [u8]) -> io::Result<()> {
    loop {
        let n = unsafe { libc::read(src.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Ok(());
        }
        let mut off = 0usize;
        while off < n as usize {
            let w = unsafe {
                libc::write(
                    dst.as_raw_fd(),
                    buf[off..].as_ptr().cast(),
                    n as usize - off,
                )
            };
            if w < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            off += w as usize;
        }
    }
}

fn place(
    m: Raw,
    (i, f): (usize, &FileEnt),
    src: &[OwnedFd],
    cas: Option<&CasSource>,
    dst: &[OwnedFd],
    buf: &mut Vec<u8>,
) -> io::Result<()> {
    let d = dst[f.dir].as_raw_fd();
    match m {
        Raw::HardlinkCas | Raw::ReflinkCas | Raw::HardlinkCasTree | Raw::ReflinkCasTree => {
            let Some(cas) = cas else {
                return Err(io::Error::other("no cache to take blobs from"));
            };
            let (shard, leaf) = &cas.files[i];
            let s = cas.shards[*shard].as_raw_fd();
            if matches!(m, Raw::HardlinkCas | Raw::HardlinkCasTree) {
                cvt(unsafe { libc::linkat(s, leaf.as_ptr(), d, f.name.as_ptr(), 0) })?;
            } else {
                clone_at_named(s, leaf, d, &f.name)?;
            }
        }
        Raw::Hardlink => {
            cvt(unsafe {
                libc::linkat(
                    src[f.dir].as_raw_fd(),
                    f.name.as_ptr(),
                    d,
                    f.name.as_ptr(),
                    0,
                )
            })?;
        }
        Raw::Symlink => {
            cvt(unsafe { libc::symlinkat(f.target.as_ptr(), d, f.name.as_ptr()) })?;
        }
        Raw::Reflink => clone_at(src[f.dir].as_raw_fd(), d, &f.name)?,
        Raw::Copy => {
            if buf.is_empty() {
                buf.resize(1 << 20, 0);
            }
            let s = open_src(src[f.dir].as_raw_fd(), &f.name)?;
            let t = create_at(d, &f.name)?;
            copy_fd(&s, &t, buf)?;
        }
    }
    Ok(())
}

/// Build `dst` (must not exist) from the tree at `src_root` by method `m`; returns the time
/// it took, from the first mkdir to the last file.
pub fn run(
    m: Raw,
    man: &Manifest,
    src_root: &Path,
    cas: Option<&CasSource>,
    dst: &Path,
    threads: usize,
) -> io::Result<Duration> {
    let t = Instant::now();
    if m.reads_tree() {
        let Some(cas) = cas else {
            return Err(io::Error::other("no cache to read the tree from"));
        };
        for d in &cas.tree {
            let dir = clonestage_engine::tree::load_directory(&cas.cache, d, "")
                .map_err(|e| io::Error::other(e.to_string()))?
                .ok_or_else(|| io::Error::other(format!("Directory {d} not in the cache")))?;
            std::hint::black_box(dir);
        }
    }
    let dc = cpath(dst)?;
    cvt(unsafe { libc::mkdir(dc.as_ptr(), 0o755) })?;
    let mut dfds = Vec::with_capacity(man.dirs.len());
    dfds.push(open_dir(dst)?);
    for d in &man.dirs[1..] {
        let fd = mkdir_at(dfds[d.parent].as_raw_fd(), &d.name)?;
        dfds.push(fd);
    }
    let mut sfds = Vec::new();
    if m != Raw::Symlink && !m.reads_cache() {
        sfds.push(open_dir(src_root)?);
        for d in &man.dirs[1..] {
            let fd = open_dir_at(sfds[d.parent].as_raw_fd(), &d.name)?;
            sfds.push(fd);
        }
    }
    if threads <= 1 {
        let mut buf = Vec::new();
        for f in man.files.iter().enumerate() {
            place(m, f, &sfds, cas, &dfds, &mut buf)?;
        }
    } else {
        let next = AtomicUsize::new(0);
        let n = man.files.len();
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| -> io::Result<()> {
                        let mut buf = Vec::new();
                        loop {
                            let start = next.fetch_add(BATCH, Ordering::Relaxed);
                            if start >= n {
                                return Ok(());
                            }
                            for i in start..(start + BATCH).min(n) {
                                place(m, (i, &man.files[i]), &sfds, cas, &dfds, &mut buf)?;
                            }
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .try_for_each(|h| h.join().expect("bench worker panicked"))
        })?;
    }
    drop(dfds);
    drop(sfds);
    Ok(t.elapsed())
}

/// One btrfs snapshot of subvolume `src` as `dst/<name>`, with `dst` made fresh first.
pub fn snapshot(src: &Path, dst: &Path, name: &str) -> anyhow::Result<Duration> {
    use clonestage_engine::platform::{self, cstr, Dir};
    let t = Instant::now();
    std::fs::create_dir(dst)?;
    let d = Dir::open(dst)?;
    platform::clone_tree(src, &d, &cstr(name)?)?;
    Ok(t.elapsed())
}

/// Whether per-file clones work within `dir`.
pub fn probe_reflink(dir: &Path) -> bool {
    let (a, b) = (dir.join(".probe-reflink-a"), dir.join(".probe-reflink-b"));
    let ok = (|| -> io::Result<()> {
        std::fs::write(&a, b"clonestage bench reflink probe")?;
        std::fs::create_dir(&b)?;
        let (s, d) = (open_dir(dir)?, open_dir(&b)?);
        clone_at(
            s.as_raw_fd(),
            d.as_raw_fd(),
            &cpath(Path::new(".probe-reflink-a"))?,
        )
    })()
    .is_ok();
    let _ = std::fs::remove_file(&a);
    let _ = clonestage_engine::remove::remove_tree(&b);
    ok
}

/// The filesystem type of `p`.
#[cfg(target_os = "macos")]
pub fn fs_type(p: &Path) -> String {
    let Ok(c) = cpath(p) else {
        return "unknown".into();
    };
    let mut sf: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut sf) } != 0 {
        return "unknown".into();
    }
    let name: Vec<u8> = sf
        .f_fstypename
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&name).into_owned()
}

/// The filesystem type of `p` by statfs magic.
#[cfg(target_os = "linux")]
pub fn fs_type(p: &Path) -> String {
    let Ok(c) = cpath(p) else {
        return "unknown".into();
    };
    let mut sf: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut sf) } != 0 {
        return "unknown".into();
    }
    match sf.f_type as i64 {
        0xEF53 => "ext4".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683E => "btrfs".into(),
        0x0102_1994 => "tmpfs".into(),
        0x794C_7630 => "overlay".into(),
        0xCA45_1A4E => "bcachefs".into(),
        0x6969 => "nfs".into(),
        0x0100_2000 => "zfs".into(),
        t => format!("0x{t:x}"),
    }
}

/// Flush the filesystem holding `p`, so the next timed run starts from a quiet filesystem.
#[cfg(target_os = "linux")]
pub fn syncfs(p: &Path) -> io::Result<()> {
    let fd = open_dir(p)?;
    cvt(unsafe { libc::syncfs(fd.as_raw_fd()) }).map(|_| ())
}

/// macOS has no syncfs: sync everything.
#[cfg(not(target_os = "linux"))]
pub fn syncfs(_p: &Path) -> io::Result<()> {
    unsafe { libc::sync() };
    Ok(())
}
