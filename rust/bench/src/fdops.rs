//! The fd-relative syscalls the raw methods are written with (`raw.rs`) and the bench's
//! filesystem probes: open/mkdir/create relative to a directory fd, per-file clone (FICLONE on
//! Linux, clonefileat on macOS), a read/write copy loop, whether clones work in a directory,
//! and a filesystem flush between timed runs.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

pub fn cpath(p: &Path) -> io::Result<CString> {
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

pub fn open_dir_at(dir: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    cvt(unsafe { libc::openat(dir, name.as_ptr(), DIR_FLAGS) }).map(owned)
}

pub fn mkdir_at(dir: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    cvt(unsafe { libc::mkdirat(dir, name.as_ptr(), 0o755) })?;
    open_dir_at(dir, name)
}

pub fn open_src(dir: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    cvt(unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    })
    .map(owned)
}

pub fn create_at(dir: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC | libc::O_NOFOLLOW;
    cvt(unsafe { libc::openat(dir, name.as_ptr(), flags, 0o444 as libc::c_uint) }).map(owned)
}

/// Clone file `sname` of directory `src` into directory `dst` as `dname`.
#[cfg(target_os = "linux")]
pub fn clone_at_named(src: RawFd, sname: &CStr, dst: RawFd, dname: &CStr) -> io::Result<()> {
    let s = open_src(src, sname)?;
    let t = create_at(dst, dname)?;
    cvt(unsafe { libc::ioctl(t.as_raw_fd(), libc::FICLONE, s.as_raw_fd()) }).map(|_| ())
}

#[cfg(target_os = "macos")]
pub fn clone_at_named(src: RawFd, sname: &CStr, dst: RawFd, dname: &CStr) -> io::Result<()> {
    const CLONE_NOFOLLOW: u32 = 0x0001;
    cvt(unsafe { libc::clonefileat(src, sname.as_ptr(), dst, dname.as_ptr(), CLONE_NOFOLLOW) })
        .map(|_| ())
}

pub fn clone_at(src: RawFd, dst: RawFd, name: &CStr) -> io::Result<()> {
    clone_at_named(src, name, dst, name)
}

pub fn copy_fd(src: &OwnedFd, dst: &OwnedFd, buf: &mut [u8]) -> io::Result<()> {
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
