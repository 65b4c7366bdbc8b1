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
//!
//! The syscalls themselves are in `fdops.rs`; the cache side of the `*_cas` methods in
//! `cas_source.rs`; the generated tree (`Manifest`) in `shapes.rs`.

use crate::cas_source::CasSource;
use crate::fdops::{
    clone_at, clone_at_named, copy_fd, cpath, create_at, cvt, mkdir_at, open_dir, open_dir_at,
    open_src,
};
use crate::shapes::{FileEnt, Manifest};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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

const BATCH: usize = 16;

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
pub fn time_tree(
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
