//! macOS: the mount points from `getfsstat(MNT_NOWAIT)` (`f_mntonname`, the directory each
//! filesystem is mounted on: xnu `bsd/sys/mount.h:185`), and `unmount(MNT_FORCE |
//! MNT_NOFOLLOW)`. XNU has no lazy detach; a forced unmount is the nearest: `dounmount`
//! forces the mount's own submounts off first (xnu-11417.121.6 `bsd/vfs/vfs_syscalls.c:
//! 2896-2926`) and closes its open files (`FORCECLOSE` to `vflush`, 2967-2969); only root or
//! the user who mounted it may (`safedounmount`, 2815-2824); `MNT_NOFOLLOW` keeps a symlink in
//! the last component from redirecting it (2740; `mount.h:337`). Read, not run: nothing here
//! runs macOS; CI only compiles this file for aarch64-apple-darwin.

use std::ffi::CStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub const DETACH_CALL: &str = "unmount(MNT_FORCE)";

/// xnu `bsd/sys/mount.h:337`; the libc crate does not define it.
const MNT_NOFOLLOW: libc::c_int = 0x0800_0000;

pub fn mount_points() -> io::Result<Vec<PathBuf>> {
    // SAFETY: a null buffer asks for the count only.
    let n = unsafe { libc::getfsstat(std::ptr::null_mut(), 0, libc::MNT_NOWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // Room for a few mounted meanwhile; getfsstat fills at most what fits.
    let cap = n as usize + 8;
    let mut buf: Vec<libc::statfs> = Vec::with_capacity(cap);
    let bytes = (cap * std::mem::size_of::<libc::statfs>()) as libc::c_int;
    // SAFETY: `buf` has room for `cap` entries, `bytes` long.
    let got = unsafe { libc::getfsstat(buf.as_mut_ptr(), bytes, libc::MNT_NOWAIT) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: getfsstat initialised the first `got` entries.
    unsafe { buf.set_len(got as usize) };
    Ok(buf
        .iter()
        .map(|s| {
            // SAFETY: f_mntonname is NUL-terminated within its MAXPATHLEN bytes.
            let name = unsafe { CStr::from_ptr(s.f_mntonname.as_ptr()) };
            PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes()))
        })
        .collect())
}

pub fn detach(path: &Path) -> io::Result<()> {
    let p = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: `p` is a valid NUL-terminated path.
    if unsafe { libc::unmount(p.as_ptr(), libc::MNT_FORCE | MNT_NOFOLLOW) } == 0 {
        return Ok(());
    }
    Err(io::Error::last_os_error())
}
