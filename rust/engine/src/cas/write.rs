//! Putting blobs into the cache: bytes, local files (cloned where the filesystem allows,
//! else copied; or moved, for outputs already on the cache's filesystem), streamed uploads,
//! and the extra inodes hardlink staging needs (0o555 executables, EMLINK replicas). Every
//! way in hashes the bytes once; a `macho::Sniffer` looks at them in the same pass, and a
//! blob that is Mach-O code is recorded (`code_record`) whether it was installed now or was
//! already there.

use super::Cache;
use crate::digest::Digest;
use crate::error::{Error, IoContext, Result};
use crate::platform::{self, cstr};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// How `put_file` takes a local file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutFile {
    /// Leave the source alone: clone it into the cache (no bytes copied) or copy it.
    CloneOrCopy,
    /// The source is ours to consume (an action's output on the cache's filesystem): rename it
    /// in. A file with other hard links (e.g. an input linked to an output) is cloned instead,
    /// so no inode outside the cache changes mode.
    Move,
}

/// A blob being streamed in (ByteStream.Write); `Cache::commit_upload` verifies and installs it.
pub struct Upload {
    pub file: File,
    path: PathBuf,
    pub written: u64,
}

impl Upload {
    pub fn write_chunk(&mut self, data: &[u8]) -> Result<()> {
        self.file.write_all(data).ctx("write", &self.path)?;
        self.written += data.len() as u64;
        Ok(())
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        // Committed uploads were renamed away; this only removes abandoned ones.
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Cache {
    /// Store `data`; if `expected` is given the bytes must hash to it.
    pub fn put_bytes(&self, data: &[u8], expected: Option<&Digest>) -> Result<Digest> {
        self.put_bytes_held(data, expected, None)
    }

    /// `put_bytes`, and with `hold` the blob is held from this process's eviction until then
    /// (`hold_first`).
    pub fn put_bytes_held(
        &self,
        data: &[u8],
        expected: Option<&Digest>,
        hold: Option<Instant>,
    ) -> Result<Digest> {
        let d = Digest::of_bytes(data);
        check_expected(&d, expected, "uploaded bytes")?;
        if d.is_empty() {
            return Ok(d);
        }
        self.hold_first(&d, hold)?;
        let code = crate::macho::is_code(data);
        if self.contains(&d) {
            self.learned(&d, code);
            return Ok(d);
        }
        let name = self.tmp_name("put");
        let path = self.root().join("tmp").join(&name);
        let mut f = self
            .tmp_dir()
            .create_file(&cstr(&name).ctx("name", &path)?, 0o444)
            .ctx("create", &path)?;
        let r = f.write_all(data).ctx("write", &path);
        drop(f);
        r.and_then(|_| self.install(&path, &d, &self.blob_path(&d)))
            .inspect_err(|_| {
                let _ = std::fs::remove_file(&path);
            })?;
        self.learned(&d, code);
        Ok(d)
    }

    /// A blob `d` entered (or was offered again): record it if its bytes were Mach-O code.
    fn learned(&self, d: &Digest, code: bool) {
        if code {
            self.note_code(d);
        }
    }

    /// Start a streamed upload into `tmp/`.
    pub fn new_upload(&self) -> Result<Upload> {
        let name = self.tmp_name("upload");
        let path = self.root().join("tmp").join(&name);
        let file = self
            .tmp_dir()
            .create_file(&cstr(&name).ctx("name", &path)?, 0o644)
            .ctx("create", &path)?;
        Ok(Upload {
            file,
            path,
            written: 0,
        })
    }

    /// Verify an upload hashes to `expected` and install it.
    pub fn commit_upload(&self, up: Upload, expected: &Digest) -> Result<()> {
        let (d, code) = hash_and_sniff(&up.path)?;
        check_expected(&d, Some(expected), "uploaded stream")?;
        if d.is_empty() {
            return Ok(());
        }
        if !self.contains(&d) {
            set_mode(&up.path, 0o444)?;
            self.install(&up.path, &d, &self.blob_path(&d))?;
        }
        self.learned(&d, code);
        Ok(())
    }

    /// Put a local regular file into the cache and return its digest.
    pub fn put_file(&self, src: &Path, how: PutFile, expected: Option<&Digest>) -> Result<Digest> {
        self.put_file_held(src, how, expected, None)
    }

    /// `put_file`, and with `hold` the blob is held from this process's eviction until then
    /// (`hold_first`).
    pub fn put_file_held(
        &self,
        src: &Path,
        how: PutFile,
        expected: Option<&Digest>,
        hold: Option<Instant>,
    ) -> Result<Digest> {
        let meta = std::fs::symlink_metadata(src).ctx("lstat", src)?;
        if !meta.is_file() {
            return Err(Error::InvalidArgument(format!(
                "{} is not a regular file",
                src.display()
            )));
        }
        if meta.len() == 0 {
            check_expected(&Digest::EMPTY, expected, &src.display().to_string())?;
            if how == PutFile::Move {
                let _ = std::fs::remove_file(src);
            }
            return Ok(Digest::EMPTY);
        }
        if how == PutFile::Move && meta.nlink() == 1 {
            let (d, code) = hash_and_sniff(src)?;
            check_expected(&d, expected, &src.display().to_string())?;
            self.hold_first(&d, hold)?;
            if self.contains(&d) {
                std::fs::remove_file(src).ctx("unlink", src)?;
            } else {
                set_mode(src, 0o444)?;
                self.install(src, &d, &self.blob_path(&d))?;
            }
            self.learned(&d, code);
            return Ok(d);
        }
        let tmp = self.clone_or_copy_to_tmp(src, meta.dev(), 0o444, "ingest")?;
        let r = hash_and_sniff(&tmp).and_then(|(d, code)| {
            check_expected(&d, expected, &src.display().to_string())?;
            self.hold_first(&d, hold)?;
            if !self.contains(&d) {
                self.install(&tmp, &d, &self.blob_path(&d))?;
            }
            self.learned(&d, code);
            Ok(d)
        });
        let _ = std::fs::remove_file(&tmp);
        if how == PutFile::Move {
            let _ = std::fs::remove_file(src);
        }
        r
    }

    /// Hold `d` until `hold` before asking whether the cache has it. Held after the put
    /// instead, an eviction in between could take a blob the caller is about to name in an
    /// answer (a just-run action's outputs: one Execute in 119 under `--max-size 1
    /// --evict-every 1` answered UNAVAILABLE so). The hold is registered under a shared `gc.lock` (`Cache::hold`): an
    /// eviction that ran before it may have taken an older copy, which `contains` then misses
    /// and the put installs again; one after it keeps the blob.
    fn hold_first(&self, d: &Digest, hold: Option<Instant>) -> Result<()> {
        match hold {
            Some(until) => self.hold(std::slice::from_ref(d), until),
            None => Ok(()),
        }
    }

    /// The blob's 0o555 twin for hardlinking executables: made once per blob, then kept, so no
    /// inode ever changes mode and Bazel's "every input is executable" costs one copy per blob.
    pub(crate) fn make_exec_inode(&self, d: &Digest) -> Result<()> {
        let p = self.exec_path(d);
        if std::fs::symlink_metadata(&p).is_ok() {
            return Ok(());
        }
        self.make_twin(d, 0o555, &p)
    }

    /// Replica inode number `n` of a blob whose link count is exhausted (EMLINK).
    pub(crate) fn replica_inode(&self, d: &Digest, exec: bool, n: u32) -> Result<PathBuf> {
        let p = self.replica_path(d, exec, n);
        if std::fs::symlink_metadata(&p).is_ok() {
            return Ok(p);
        }
        self.make_twin(d, if exec { 0o555 } else { 0o444 }, &p)?;
        Ok(p)
    }

    fn make_twin(&self, d: &Digest, mode: u32, dst: &Path) -> Result<()> {
        let src = self.blob_path(d);
        let dev = std::fs::metadata(&src).ctx("stat", &src)?.dev();
        let tmp = self.clone_or_copy_to_tmp(&src, dev, mode, "twin")?;
        let r = hash_file(&tmp).and_then(|got| {
            check_expected(&got, Some(d), &src.display().to_string())?;
            self.install(&tmp, d, dst)
        });
        let _ = std::fs::remove_file(&tmp);
        r
    }

    /// Clone `src` into a new temp file with `mode` (falls back to a copy, remembered per device).
    fn clone_or_copy_to_tmp(&self, src: &Path, dev: u64, mode: u32, tag: &str) -> Result<PathBuf> {
        let name = self.tmp_name(tag);
        let path = self.root().join("tmp").join(&name);
        let cname = cstr(&name).ctx("name", &path)?;
        let try_clone = !self.no_clone_from.lock().unwrap().contains_key(&dev);
        if try_clone {
            match platform::clone_file(src, self.tmp_dir(), &cname, mode) {
                Ok(()) => return Ok(path),
                Err(e) if platform::is_unsupported(&e) => {
                    tracing::debug!(src = %src.display(), reason = %platform::reason_name(&e), "cache ingest falls back to copy");
                    self.no_clone_from.lock().unwrap().insert(dev, ());
                }
                Err(e) => return Err(Error::io("clone", src, e)),
            }
        }
        platform::copy_file(src, self.tmp_dir(), &cname, mode).ctx("copy", src)?;
        Ok(path)
    }

    /// Rename a verified temp file to its final name without replacing anything. If another
    /// process installed the same digest first, ours is simply dropped.
    pub(crate) fn install(&self, tmp: &Path, d: &Digest, dst: &Path) -> Result<()> {
        set_blob_mtime(tmp)?;
        let mut tried_mkdir = false;
        loop {
            match platform::rename_noreplace(tmp, dst) {
                Ok(()) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                    let _ = std::fs::remove_file(tmp);
                    return Ok(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !tried_mkdir => {
                    tried_mkdir = true;
                    let parent = dst.parent().expect("cache paths have parents");
                    match std::fs::create_dir(parent) {
                        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                            return Err(Error::io("mkdir", parent, e))
                        }
                        _ => {}
                    }
                }
                Err(e) => {
                    return Err(Error::io("rename", dst, e))
                        .inspect_err(|_| tracing::error!(digest = %d, "install failed"))
                }
            }
        }
    }
}

pub(crate) fn hash_file(p: &Path) -> Result<Digest> {
    let f = File::open(p).ctx("open", p)?;
    Digest::of_reader(f).ctx("read", p)
}

/// The file's digest, and whether it is Mach-O code (`macho`), from one read.
pub(crate) fn hash_and_sniff(p: &Path) -> Result<(Digest, bool)> {
    let f = File::open(p).ctx("open", p)?;
    let mut sniffer = crate::macho::Sniffer::new();
    let d = Digest::of_reader(crate::macho::Sniffing {
        inner: f,
        sniffer: &mut sniffer,
    })
    .ctx("read", p)?;
    Ok((d, sniffer.is_code()))
}

fn set_blob_mtime(p: &Path) -> Result<()> {
    let t = libc::timespec {
        tv_sec: super::BLOB_MTIME as libc::time_t,
        tv_nsec: 0,
    };
    let times = [t, t];
    let c = cstr(p).ctx("name", p)?;
    if unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    } != 0
    {
        return Err(Error::io("utimensat", p, std::io::Error::last_os_error()));
    }
    Ok(())
}

fn set_mode(p: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).ctx("chmod", p)
}

fn check_expected(got: &Digest, expected: Option<&Digest>, what: &str) -> Result<()> {
    match expected {
        Some(e) if e != got => Err(Error::DigestMismatch {
            what: what.to_string(),
            expected: *e,
            actual: *got,
        }),
        _ => Ok(()),
    }
}
