//! Linux: FICLONE reflinks (btrfs, XFS with reflink=1, bcachefs, ...) and btrfs subvolume
//! snapshots as the whole-tree clone. Other filesystems answer EOPNOTSUPP/EXDEV/EINVAL, which
//! the stager treats as "fall back".

use super::dir::{check, cstr, open_read_at, statfs, Dir};
use super::{TreeClone, UserDirs};
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;

pub const FILE_CLONE_METHOD: &str = "reflink";

/// The XDG layout: `$XDG_CACHE_HOME` (when absolute) or `~/.cache`, `~/.local/share`. Bazel's
/// default output user root is `~/.cache/bazel/_bazel_$USER`; current Bazel puts it under
/// `$XDG_CACHE_HOME/bazel` when that is set (`GetOutputRoot` in Bazel's
/// `src/main/cpp/blaze_util_linux.cc`), 4.2.3 ignores the variable (checked here).
pub const USER_DIRS: UserDirs = UserDirs {
    cache_under_home: ".cache",
    cache_honours_xdg: true,
    data_under_home: ".local/share",
    bazel_root_parent_under_home: Some(".cache/bazel"),
};

/// `sun_path` holds 108 bytes with the NUL (`<sys/un.h>`, `struct sockaddr_un`).
pub const MAX_UNIX_SOCKET_PATH: usize = 107;
/// How old a hardlink must be before anything may run through it. Linux checks no code
/// signature at exec, so a link made a moment ago runs like any other path.
pub const MIN_EXEC_LINK_AGE: std::time::Duration = std::time::Duration::ZERO;

// <linux/btrfs.h>: _IOW(0x94, nr, struct btrfs_ioctl_vol_args) with sizeof == 4096.
const BTRFS_IOC_SNAP_CREATE: libc::c_ulong = 0x5000_9401;
const BTRFS_IOC_SUBVOL_CREATE: libc::c_ulong = 0x5000_940e;
const BTRFS_IOC_SNAP_DESTROY: libc::c_ulong = 0x5000_940f;
const BTRFS_SUPER_MAGIC: i64 = 0x9123_683e;
/// Inode number of every btrfs subvolume root (BTRFS_FIRST_FREE_OBJECTID).
const BTRFS_SUBVOL_INO: u64 = 256;

#[repr(C)]
struct BtrfsVolArgs {
    fd: i64,
    name: [u8; 4088],
}

fn vol_args(fd: i64, name: &CStr) -> io::Result<Box<BtrfsVolArgs>> {
    let bytes = name.to_bytes();
    if bytes.len() >= 4088 {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    let mut a = Box::new(BtrfsVolArgs {
        fd,
        name: [0; 4088],
    });
    a.name[..bytes.len()].copy_from_slice(bytes);
    Ok(a)
}

fn ioctl(fd: &impl AsRawFd, req: libc::c_ulong, arg: *const libc::c_void) -> io::Result<()> {
    loop {
        if unsafe { libc::ioctl(fd.as_raw_fd(), req as _, arg) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reflink `src` into a new file `name` in `dst` with `mode`. The new inode is private
/// (copy-on-write), so its mode can differ from the cache's copy.
pub fn clone_file(src: &Path, dst: &Dir, name: &CStr, mode: u32) -> io::Result<()> {
    clone_file_at(libc::AT_FDCWD, &cstr(src)?, dst, name, mode)
}

/// `clone_file` with the source relative to `src_dir`.
pub fn clone_file_at(
    src_dir: RawFd,
    src: &CStr,
    dst: &Dir,
    name: &CStr,
    mode: u32,
) -> io::Result<()> {
    let from = open_read_at(src_dir, src)?;
    let to = dst.create_file(name, mode)?;
    let r = ioctl(
        &to,
        libc::FICLONE,
        from.as_raw_fd() as usize as *const libc::c_void,
    );
    if r.is_err() {
        drop(to);
        let _ = dst.unlink_at(name, false);
    }
    r
}

#[allow(clippy::unnecessary_cast)] // f_type's width differs between architectures
fn is_btrfs(path: &Path) -> bool {
    statfs(path).is_ok_and(|sf| sf.f_type as i64 == BTRFS_SUPER_MAGIC)
}

pub fn tree_clone_kind(dir: &Path) -> Option<TreeClone> {
    is_btrfs(dir).then_some(TreeClone::Snapshot)
}

/// The filesystem `path` is on, by statfs(2)'s f_type (<linux/magic.h>); an unknown magic is
/// shown in hex.
pub fn filesystem_name(path: &Path) -> std::io::Result<String> {
    let sf = statfs(path)?;
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between architectures
    let magic = sf.f_type as i64 & 0xffff_ffff;
    Ok(match magic {
        BTRFS_SUPER_MAGIC => "btrfs",
        0x5846_5342 => "xfs",
        0xef53 => "ext4", // ext2/3/4 share the magic; ext4 is what anyone runs today
        0x0102_1994 => "tmpfs",
        0x794c_7630 => "overlayfs",
        0x2fc1_2fc1 => "zfs",
        0xf2f5_2010 => "f2fs",
        0x6573_5546 => "fuse",
        0x6969 => "nfs",
        0xff53_4d42 | 0xfe53_4d42 => "cifs/smb",
        0x0102_1997 => "9p",
        0xca45_1a4e => "bcachefs",
        other => return Ok(format!("unknown (statfs f_type {other:#x})")),
    }
    .to_string())
}

/// A btrfs subvolume, so that `clone_tree` can snapshot it.
pub fn new_tree_container(parent: &Dir, name: &CStr) -> io::Result<()> {
    let args = vol_args(0, name)?;
    ioctl(
        parent,
        BTRFS_IOC_SUBVOL_CREATE,
        &*args as *const _ as *const libc::c_void,
    )
}

/// Writable snapshot of subvolume `src` as `name` in `dst_parent` (one call, O(1) in files;
/// it commits the filesystem transaction, which is why its cost grows under write load).
pub fn clone_tree(src: &Path, dst_parent: &Dir, name: &CStr) -> io::Result<()> {
    let src_dir = Dir::open(src)?;
    if src_dir.stat()?.st_ino != BTRFS_SUBVOL_INO {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let args = vol_args(src_dir.as_raw_fd() as i64, name)?;
    ioctl(
        dst_parent,
        BTRFS_IOC_SNAP_CREATE,
        &*args as *const _ as *const libc::c_void,
    )
}

/// Delete the subvolume `name` in `parent` in one call, relative to `parent`'s fd (so at any
/// depth). `ino` is the entry's inode number as lstat or fstat gave it (not readdir's d_ino,
/// which for a subvolume entry is not 256): only a subvolume
/// root's (256) is looked at further. Ok(false) when `name` is not a btrfs subvolume root (the
/// caller then removes it entry by entry).
#[allow(clippy::unnecessary_cast)] // f_type's width differs between architectures
pub fn remove_tree_container_at(parent: &Dir, name: &CStr, ino: u64) -> io::Result<bool> {
    if ino != BTRFS_SUBVOL_INO {
        return Ok(false);
    }
    let Ok(d) = parent.open_at(name) else {
        return Ok(false);
    };
    let mut sf: libc::statfs = unsafe { std::mem::zeroed() };
    check(unsafe { libc::fstatfs(d.as_raw_fd(), &mut sf) })?;
    if d.stat()?.st_ino != BTRFS_SUBVOL_INO || sf.f_type as i64 != BTRFS_SUPER_MAGIC {
        return Ok(false);
    }
    drop(d);
    let args = vol_args(0, name)?;
    ioctl(
        parent,
        BTRFS_IOC_SNAP_DESTROY,
        &*args as *const _ as *const libc::c_void,
    )?;
    Ok(true)
}

/// `renameat2(RENAME_NOREPLACE)`: relative to open directories, so the stager's final rename
/// walks no path (`AT_FDCWD` for path forms). The system call itself (Linux 3.15+), not glibc's
/// wrapper, which glibc has only from 2.28: the release binaries run on glibc 2.17+
/// (tools/release.sh), and linking them against 2.17 fails on the wrapper.
pub fn rename_noreplace_at(
    from_dir: RawFd,
    from: &CStr,
    to_dir: RawFd,
    to: &CStr,
) -> io::Result<()> {
    let flags = libc::RENAME_NOREPLACE;
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            from_dir,
            from.as_ptr(),
            to_dir,
            to.as_ptr(),
            flags,
        )
    };
    check(rc as libc::c_int)?;
    Ok(())
}
