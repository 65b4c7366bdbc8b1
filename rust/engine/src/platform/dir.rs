//! Directory file descriptors and the POSIX calls made relative to them. Staging creates
//! every entry with `*at` calls on an fd it opened itself with O_NOFOLLOW, so a name from a
//! client can never send a write through a symlink outside the root.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub(super) fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Retry a call while it fails with EINTR.
pub(super) fn retry<F: FnMut() -> libc::c_int>(mut f: F) -> io::Result<libc::c_int> {
    loop {
        match check(f()) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

pub fn cstr(p: impl AsRef<std::ffi::OsStr>) -> io::Result<CString> {
    CString::new(p.as_ref().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

/// statfs(2) of `path`, the error naming it (the struct's fields differ per OS; each OS file
/// reads its own).
pub fn statfs(path: &std::path::Path) -> io::Result<libc::statfs> {
    let c = cstr(path)?;
    let mut sf: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut sf) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("statfs {}: {e}", path.display()),
        ));
    }
    Ok(sf)
}

/// An open directory, used as the anchor for `*at` calls.
pub struct Dir {
    fd: OwnedFd,
}

impl AsRawFd for Dir {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

const DIR_FLAGS: libc::c_int =
    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NOFOLLOW;

impl Dir {
    /// Open an existing directory by path (the last component must not be a symlink).
    pub fn open(path: &Path) -> io::Result<Dir> {
        let c = cstr(path)?;
        let fd = retry(|| unsafe { libc::open(c.as_ptr(), DIR_FLAGS) })?;
        Ok(Dir {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Open a child directory without following a symlink.
    pub fn open_at(&self, name: &CStr) -> io::Result<Dir> {
        let fd = retry(|| unsafe { libc::openat(self.as_raw_fd(), name.as_ptr(), DIR_FLAGS) })?;
        Ok(Dir {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Create a child directory (fails if anything exists there) and open it.
    pub fn mkdir_at(&self, name: &CStr, mode: u32) -> io::Result<Dir> {
        retry(|| unsafe { libc::mkdirat(self.as_raw_fd(), name.as_ptr(), mode as libc::mode_t) })?;
        self.open_at(name)
    }

    /// Create a new file exclusively (never follows or replaces anything) for writing.
    pub fn create_file(&self, name: &CStr, mode: u32) -> io::Result<File> {
        let flags =
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        let fd = retry(|| unsafe {
            libc::openat(self.as_raw_fd(), name.as_ptr(), flags, mode as libc::c_uint)
        })?;
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    pub fn symlink_at(&self, target: &CStr, name: &CStr) -> io::Result<()> {
        retry(|| unsafe { libc::symlinkat(target.as_ptr(), self.as_raw_fd(), name.as_ptr()) })?;
        Ok(())
    }

    pub fn chmod(&self, mode: u32) -> io::Result<()> {
        retry(|| unsafe { libc::fchmod(self.as_raw_fd(), mode as libc::mode_t) })?;
        Ok(())
    }

    /// Change a child's mode without following a symlink at `name`.
    pub fn chmod_at(&self, name: &CStr, mode: u32) -> io::Result<()> {
        let child = self.open_at(name)?;
        child.chmod(mode)
    }

    /// chmod a child that this process just created as a regular file.
    pub fn chmod_file_at(&self, name: &CStr, mode: u32) -> io::Result<()> {
        retry(|| unsafe {
            libc::fchmodat(self.as_raw_fd(), name.as_ptr(), mode as libc::mode_t, 0)
        })?;
        Ok(())
    }

    /// lstat of a child.
    pub fn stat_at(&self, name: &CStr) -> io::Result<libc::stat> {
        stat_at(self.as_raw_fd(), name)
    }

    pub fn stat(&self) -> io::Result<libc::stat> {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        retry(|| unsafe { libc::fstat(self.as_raw_fd(), &mut st) })?;
        Ok(st)
    }

    pub fn unlink_at(&self, name: &CStr, is_dir: bool) -> io::Result<()> {
        let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
        retry(|| unsafe { libc::unlinkat(self.as_raw_fd(), name.as_ptr(), flags) })?;
        Ok(())
    }
}

/// Open `name` relative to `dirfd` (or `libc::AT_FDCWD`) read-only.
/// lstat of `name` in the directory `dirfd`.
pub fn stat_at(dirfd: RawFd, name: &CStr) -> io::Result<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: the caller's open directory fd, a NUL-terminated name, an out-pointer.
    retry(|| unsafe { libc::fstatat(dirfd, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok(st)
}

pub fn open_read_at(dirfd: RawFd, name: &CStr) -> io::Result<File> {
    let fd =
        retry(|| unsafe { libc::openat(dirfd, name.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) })?;
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Hardlink `src` (relative to `src_dir`, or a path with `libc::AT_FDCWD`) to `name` in `dst`.
/// Staging links relative to an fd of the cache's blob directory, so each link resolves two
/// short components instead of the whole cache path.
pub fn hardlink_at(src_dir: RawFd, src: &CStr, dst: &Dir, name: &CStr) -> io::Result<()> {
    retry(|| unsafe { libc::linkat(src_dir, src.as_ptr(), dst.as_raw_fd(), name.as_ptr(), 0) })?;
    Ok(())
}

/// Hardlink `src` (a cache path) to `name` in `dst`.
pub fn hardlink(src: &Path, dst: &Dir, name: &CStr) -> io::Result<()> {
    hardlink_at(libc::AT_FDCWD, &cstr(src)?, dst, name)
}

/// Copy `src` into a new file `name` in `dst` with `mode`; removes the partial file on error.
/// Returns the bytes copied. std's copy uses copy_file_range/sendfile where it can.
pub fn copy_file(src: &Path, dst: &Dir, name: &CStr, mode: u32) -> io::Result<u64> {
    copy_file_at(libc::AT_FDCWD, &cstr(src)?, dst, name, mode)
}

/// `copy_file` with the source relative to `src_dir`.
pub fn copy_file_at(
    src_dir: RawFd,
    src: &CStr,
    dst: &Dir,
    name: &CStr,
    mode: u32,
) -> io::Result<u64> {
    let mut from = open_read_at(src_dir, src)?;
    let mut to = dst.create_file(name, 0o600)?;
    let r = io::copy(&mut from, &mut to).and_then(|n| {
        retry(|| unsafe { libc::fchmod(to.as_raw_fd(), mode as libc::mode_t) })?;
        Ok(n)
    });
    if r.is_err() {
        let _ = dst.unlink_at(name, false);
    }
    r
}

/// The process umask. Read once (the read briefly swaps it, so call it before threads start
/// creating files); staging only pays an extra fchmod per file when it would clear mode bits.
pub fn current_umask() -> u32 {
    unsafe {
        let old = libc::umask(0o022);
        libc::umask(old);
        old as u32
    }
}
