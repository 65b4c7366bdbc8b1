//! Placing one file of a root: by the device's method (clone, hardlink, copy) with per-file
//! fallbacks (clone -> hardlink -> copy when the filesystem refuses one, remembered for the
//! device), the 0o555 exec twin made on first need, EMLINK answered with a replica inode, and
//! the mode fixed only when the umask would have cleared bits; Mach-O code hardlinked first
//! under `--preserve-inodes macho` (`code_links`). This is the per-file hot path.

use super::code_links::CodeMode;
use super::device::{Devices, FileMethod};
use super::modes::Modes;
use crate::cas::Cache;
use crate::digest::Digest;
use crate::error::{Error, IoContext, Result};
use crate::platform::{self, cstr, Dir};
use crate::stats::Counters;
use std::ffi::CStr;
use std::path::Path;

/// Which of the cache's inodes for a digest a hardlinked input is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Inode {
    Blob,
    Exec,
    Replica { exec: bool, n: u32 },
}

/// Places files for one stage; the method it starts with is the device's, and drops to the
/// next one for the rest of the stage when the filesystem refuses it.
pub(super) struct Placer<'a> {
    pub(super) cache: &'a Cache,
    pub(super) devices: &'a Devices,
    /// The destination's device (`Devices::key`).
    pub(super) key: (u64, u64),
    pub(super) method: FileMethod,
    pub(super) modes: Modes,
    /// What to do with inputs that are Mach-O code (`code_links`).
    pub(super) code: CodeMode,
    /// Cache inodes hardlinked into the root, one entry per link (duplicates are removed
    /// after the stage, off its critical path), checked for writes after the action.
    pub(super) linked: Vec<(Digest, Inode)>,
    /// Testing: fail after placing this many files.
    #[cfg(feature = "fault-injection")]
    pub(super) fail_after: Option<usize>,
    #[cfg(feature = "fault-injection")]
    pub(super) placed: usize,
}

impl Placer<'_> {
    /// Place the file `name` (digest `d`) in `dir` at `path`, by this stage's method, falling
    /// back per file (clone -> hardlink -> copy) where the device refuses one.
    pub(super) fn place_file(
        &mut self,
        c: &mut Counters,
        dir: &Dir,
        path: &Path,
        name: &str,
        d: &Digest,
        exec: bool,
    ) -> Result<()> {
        #[cfg(feature = "fault-injection")]
        {
            self.placed += 1;
            if let Some(n) = self.fail_after {
                if self.placed > n {
                    return Err(Error::Injected(n));
                }
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
            c.empty += 1;
            return Ok(());
        }
        let rel_buf = crate::cas::RelName::new(d);
        if self.code != CodeMode::Off
            && self.method != FileMethod::Hardlink
            && self.cache.is_code(d)
        {
            if self.code == CodeMode::CloneAndCount {
                c.code_cloned += 1;
            } else {
                match self.hardlink(c, dir, &cname, &rel_buf, d, exec) {
                    Ok(()) => {
                        c.code_linked += 1;
                        c.bytes += d.size;
                        return Ok(());
                    }
                    // Placed by the device's method below, which also names a missing blob;
                    // the device itself is not downgraded (clones still work there).
                    Err(e) => c.fallback(&format!("code-{}", platform::reason_name(&e))),
                }
            }
        }
        let (mut blobs, mut rel) = self.cache.locate(&rel_buf, false);
        let mut from_top = false;
        loop {
            let r = match self.method {
                FileMethod::Clone => {
                    platform::clone_file_at(blobs, rel, dir, &cname, mode).map(|_| {
                        if platform::FILE_CLONE_METHOD == "clonefile" {
                            c.clonefile += 1;
                        } else {
                            c.reflink += 1;
                        }
                    })
                }
                FileMethod::Hardlink => self.hardlink(c, dir, &cname, &rel_buf, d, exec),
                FileMethod::Copy => {
                    platform::copy_file_at(blobs, rel, dir, &cname, mode).map(|_| c.copy += 1)
                }
            };
            match r {
                Ok(()) => {
                    if self.method != FileMethod::Hardlink {
                        self.fix_mode(dir, &cname, mode, path)?;
                    }
                    c.bytes += d.size;
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
                    c.fallback(&reason);
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
        c: &mut Counters,
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
                    c.hardlink += 1;
                    self.linked.push((*d, inode));
                    return Ok(());
                }
                Err(e) if e.raw_os_error() == Some(libc::EMLINK) && replica < 1024 => {
                    if replica == 0 {
                        c.fallback("emlink");
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
    pub(super) fn fix_mode(&self, dir: &Dir, name: &CStr, mode: u32, p: &Path) -> Result<()> {
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
