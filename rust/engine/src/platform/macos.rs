//! macOS: `clonefile(2)` clones a file or a whole directory tree on APFS in one call.
//! Type-checked and linted in CI for aarch64-apple-darwin; not run there (no macOS host).

use super::dir::{check, cstr, statfs, Dir};
use super::{TreeClone, UserDirs};
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;

pub const FILE_CLONE_METHOD: &str = "clonefile";

/// Apple's layout: `~/Library/Caches` (XDG_CACHE_HOME is not a macOS convention and was never
/// read here), `~/Library/Application Support`. Bazel's default output user root is
/// `/private/var/tmp/_bazel_$USER` (`GetOutputRoot` in Bazel's
/// `src/main/cpp/blaze_util_darwin.cc`), not under HOME.
pub const USER_DIRS: UserDirs = UserDirs {
    cache_under_home: "Library/Caches",
    cache_honours_xdg: false,
    data_under_home: "Library/Application Support",
    bazel_root_parent_under_home: None,
};

/// `sun_path` holds 104 bytes with the NUL on macOS (`<sys/un.h>`, `struct sockaddr_un`).
pub const MAX_UNIX_SOCKET_PATH: usize = 103;
/// How old a hardlink must be before anything may run through it. macOS intermittently
/// SIGKILLs the exec of a path that link(2) made moments before: 5 kills in 3,840 execs of
/// fresh links, none in 1,680 of the original path (jdx/mr-boxington PR 134), a window that
/// "closes about half a second after the link appears" (its crates/mbx/src/session/shims.rs,
/// `install_shim`, at 018f698); cargo stopped hardlinking on macOS for it (rust-lang/cargo
/// issues 7821 and 10060). Four times that window; `clonestage doctor` measures the kills of
/// fresh and aged links on the user's Mac (`--macho-link-age-ms` overrides it).
pub const MIN_EXEC_LINK_AGE: std::time::Duration = std::time::Duration::from_secs(2);

/// <sys/clonefile.h> (the libc crate declares `clonefileat`, not its flags).
const CLONE_NOFOLLOW: u32 = 0x0001;

/// Clone `src` as `name` in `dst`, then set `mode` on the clone (a private inode: safe).
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
    check(unsafe {
        libc::clonefileat(
            src_dir,
            src.as_ptr(),
            dst.as_raw_fd(),
            name.as_ptr(),
            CLONE_NOFOLLOW,
        )
    })?;
    let st = dst.stat_at(name)?;
    if (st.st_mode as u32 & 0o7777) != mode {
        if let Err(e) = dst.chmod_file_at(name, mode) {
            let _ = dst.unlink_at(name, false);
            return Err(e);
        }
    }
    Ok(())
}

fn is_apfs(dir: &Path) -> bool {
    filesystem_name(dir).is_ok_and(|n| n == "apfs")
}

pub fn tree_clone_kind(dir: &Path) -> Option<TreeClone> {
    is_apfs(dir).then_some(TreeClone::Clonefile)
}

/// The filesystem `path` is on, as statfs(2)'s f_fstypename names it ("apfs", "hfs", ...).
pub fn filesystem_name(path: &Path) -> std::io::Result<String> {
    let sf = statfs(path)?;
    let name: Vec<u8> = sf
        .f_fstypename
        .iter()
        .take_while(|&&b| b != 0)
        .map(|&b| b as u8)
        .collect();
    Ok(String::from_utf8_lossy(&name).into_owned())
}

/// On APFS any directory can be cloned whole: a plain directory will do.
pub fn new_tree_container(parent: &Dir, name: &CStr) -> io::Result<()> {
    parent.mkdir_at(name, 0o755).map(|_| ())
}

/// Clone the directory tree `src` as `name` in `dst_parent` in one call.
pub fn clone_tree(src: &Path, dst_parent: &Dir, name: &CStr) -> io::Result<()> {
    let s = cstr(src)?;
    check(unsafe {
        libc::clonefileat(
            libc::AT_FDCWD,
            s.as_ptr(),
            dst_parent.as_raw_fd(),
            name.as_ptr(),
            CLONE_NOFOLLOW,
        )
    })?;
    Ok(())
}

/// APFS has no one-call tree delete; the caller removes entries one by one.
pub fn remove_tree_container_at(_parent: &Dir, _name: &CStr, _ino: u64) -> io::Result<bool> {
    Ok(false)
}

/// `renameatx_np(RENAME_EXCL)`: relative to open directories (`AT_FDCWD` for path forms).
pub fn rename_noreplace_at(
    from_dir: RawFd,
    from: &CStr,
    to_dir: RawFd,
    to: &CStr,
) -> io::Result<()> {
    let flags = libc::RENAME_EXCL;
    check(unsafe { libc::renameatx_np(from_dir, from.as_ptr(), to_dir, to.as_ptr(), flags) })?;
    Ok(())
}
