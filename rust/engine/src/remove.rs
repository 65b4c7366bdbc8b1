//! Removing staged roots, work dirs and cache trees of any depth: read-only directories (0o555)
//! are made writable when an unlink in them is refused, symlinks are removed, never followed,
//! and btrfs subvolumes are deleted in one call (relative to their parent's fd, at any depth).
//! This is the one tree remover: the stager's, the cache's and the server's work dirs use it.
//!
//! Nothing recurses and no path is walked below the top: a tree a client shaped (or a killed
//! server left) can be thousands of levels deep, longer than PATH_MAX. The walk keeps one
//! directory fd open at a time (plus its listing), goes down with `openat(O_NOFOLLOW)`, and
//! back up with `openat("..")`, checking the device and inode it lands on against the ones it
//! recorded on the way down: if anything moved the tree meanwhile it stops with an error
//! rather than unlink names in some other directory.

use crate::error::{Error, IoContext, Result};
use crate::platform::{self, Dir};
use std::ffi::{CStr, CString};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Remove `path` and everything below it. A missing path is not an error.
pub fn remove_tree(path: &Path) -> Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("lstat", path, e)),
    };
    if !meta.is_dir() {
        return std::fs::remove_file(path).ctx("unlink", path);
    }
    if remove_container(path, &meta) {
        return Ok(());
    }
    let top = match Dir::open(path) {
        Ok(d) => d,
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            make_writable_by_path(path)?;
            Dir::open(path).ctx("open", path)?
        }
        Err(e) => return Err(Error::io("open", path, e)),
    };
    empty(top, path)?;
    match std::fs::remove_dir(path) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            // The parent is read-only (a staged input directory holding this one).
            if let Some(parent) = path.parent() {
                make_writable_by_path(parent)?;
            }
            std::fs::remove_dir(path).ctx("rmdir", path)
        }
        r => r.ctx("rmdir", path),
    }
}

/// `path` as a whole when the OS deletes such a tree in one call (a btrfs subvolume: a cloned
/// subtree); false when it is not one or the call failed (then it goes entry by entry).
fn remove_container(path: &Path, meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return false;
    };
    let (Ok(parent), Ok(name)) = (Dir::open(parent), platform::cstr(name)) else {
        return false;
    };
    platform::remove_tree_container_at(&parent, &name, meta.ino()).unwrap_or(false)
}

fn make_writable_by_path(p: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).ctx("chmod", p)
}

/// One directory on the way down: its name in its parent, identity, and entries still to go.
struct Level {
    name: CString,
    id: (u64, u64),
    todo: Vec<(CString, bool)>,
    /// Made writable already (after an unlink in it was refused).
    writable: bool,
}

#[allow(clippy::unnecessary_cast)] // st_dev is i32 on macOS
fn id_of(d: &Dir, p: &Path) -> Result<(u64, u64)> {
    let st = d.stat().ctx("fstat", p)?;
    Ok((st.st_dev as u64, st.st_ino as u64))
}

/// Remove everything inside the directory `top` (at `path`, for messages and subvolumes).
fn empty(top: Dir, path: &Path) -> Result<()> {
    let mut cur = top;
    // The path of `cur`, kept for error messages only (it may exceed PATH_MAX).
    let mut here: PathBuf = path.to_path_buf();
    let mut levels = vec![Level {
        name: CString::default(),
        id: id_of(&cur, path)?,
        todo: list(&cur).ctx("readdir", path)?,
        writable: false,
    }];
    loop {
        let level = levels.last_mut().expect("the top level stays");
        let Some((name, is_dir)) = level.todo.pop() else {
            if levels.len() == 1 {
                return Ok(());
            }
            // `cur` is empty: go up, check it is still the parent we came from, remove it.
            let done = levels.pop().expect("more than one level");
            let up = cur.open_at(c"..").ctx("open ..", &here)?;
            let parent = levels.last_mut().expect("a parent level");
            if id_of(&up, &here)? != parent.id {
                return Err(Error::io(
                    "open ..",
                    &here,
                    std::io::Error::other("the tree moved while it was being removed"),
                ));
            }
            cur = up;
            here.pop();
            unlink(&cur, &done.name, true, &mut parent.writable, &here)?;
            continue;
        };
        if !is_dir {
            // The per-file path: no allocation unless it fails.
            unlink(&cur, &name, false, &mut level.writable, &here)?;
            continue;
        }
        let p = here.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
        let child = match cur.open_at(&name) {
            Ok(c) => c,
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
                // An unreadable directory (0o000 or 0o111) of our own: make it ours to read.
                let r = unsafe { libc::fchmodat(cur.as_raw_fd(), name.as_ptr(), 0o755, 0) };
                if r != 0 {
                    return Err(Error::io("chmod", &p, std::io::Error::last_os_error()));
                }
                cur.open_at(&name).ctx("open", &p)?
            }
            Err(e) => return Err(Error::io("open", &p, e)),
        };
        let id = id_of(&child, &p)?;
        // A btrfs subvolume (a cloned subtree) goes in one call, relative to `cur`. By the
        // inode fstat gives: readdir's d_ino of a subvolume entry is not its root's 256.
        if platform::remove_tree_container_at(&cur, &name, id.1).unwrap_or(false) {
            continue;
        }
        let todo = list(&child).ctx("readdir", &p)?;
        levels.push(Level {
            name,
            id,
            todo,
            writable: false,
        });
        cur = child;
        here = p;
    }
}

/// Unlink `name` in `dir` (at `dir_path`); if refused, make `dir` writable once and retry.
fn unlink(
    dir: &Dir,
    name: &CStr,
    is_dir: bool,
    writable: &mut bool,
    dir_path: &Path,
) -> Result<()> {
    let op = if is_dir { "rmdir" } else { "unlink" };
    let p = || dir_path.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
    match dir.unlink_at(name, is_dir) {
        Ok(()) => Ok(()),
        Err(e)
            if !*writable && matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)) =>
        {
            dir.chmod(0o755).ctx("chmod", dir_path)?;
            *writable = true;
            dir.unlink_at(name, is_dir)
                .map_err(|e| Error::io(op, p(), e))
        }
        Err(e) => Err(Error::io(op, p(), e)),
    }
}

/// The entries of `dir` (not `.`/`..`): name, and whether a directory (never a symlink to
/// one). A listing cut short by an error shows up as ENOTEMPTY when the directory is removed.
fn list(dir: &Dir) -> std::io::Result<Vec<(CString, bool)>> {
    let fd = unsafe { libc::dup(dir.as_raw_fd()) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let stream = unsafe { libc::fdopendir(fd) };
    if stream.is_null() {
        let e = std::io::Error::last_os_error();
        unsafe { libc::close(fd) };
        return Err(e);
    }
    struct Closer(*mut libc::DIR);
    impl Drop for Closer {
        fn drop(&mut self) {
            unsafe { libc::closedir(self.0) };
        }
    }
    let _closer = Closer(stream);
    // A dup shares the file offset: start from the beginning whatever read it before.
    unsafe { libc::rewinddir(stream) };
    let mut out = Vec::new();
    loop {
        let ent = unsafe { libc::readdir(stream) };
        if ent.is_null() {
            return Ok(out);
        }
        let ent = unsafe { &*ent };
        let name = unsafe { CStr::from_ptr(ent.d_name.as_ptr()) };
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let is_dir = match ent.d_type {
            libc::DT_DIR => true,
            libc::DT_UNKNOWN => dir
                .stat_at(name)
                .map(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)?,
            _ => false,
        };
        out.push((name.to_owned(), is_dir));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// `depth` levels of `a/` below `base` (through fds: no path is short enough), every other
    /// one read-only, a file and a symlink to `outside` at the bottom.
    pub(crate) fn deep_dir(base: &Path, depth: usize, outside: &Path) {
        let mut cur = Dir::open(base).unwrap();
        for i in 0..depth {
            let next = cur.mkdir_at(c"a", 0o755).unwrap();
            if i % 2 == 1 {
                cur.chmod(0o555).unwrap();
            }
            cur = next;
        }
        cur.create_file(c"f", 0o444).unwrap();
        let t = platform::cstr(outside).unwrap();
        cur.symlink_at(&t, c"out").unwrap();
        cur.chmod(0o555).unwrap();
    }

    #[test]
    fn removes_a_tree_deeper_than_any_path_without_following_symlinks() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), b"k").unwrap();
        let top = t.path().join("top");
        std::fs::create_dir(&top).unwrap();
        deep_dir(&top, 5_000, &outside);
        std::fs::set_permissions(&top, std::fs::Permissions::from_mode(0o555)).unwrap();
        remove_tree(&top).unwrap();
        assert!(!top.exists());
        assert!(outside.join("keep").exists(), "a symlink was followed");
        // Missing is fine.
        remove_tree(&top).unwrap();
    }

    /// A btrfs subvolume (what a cloned subtree is) nested deeper than PATH_MAX, read-only
    /// with a read-only parent, goes too: its one-call removal is relative to its parent's fd.
    #[test]
    fn removes_a_btrfs_subvolume_deeper_than_any_path() {
        let Some(base) = std::env::var_os("CLONESTAGE_TEST_BTRFS").filter(|v| !v.is_empty()) else {
            assert_ne!(
                std::env::var("CLONESTAGE_REQUIRE_FS").as_deref(),
                Ok("1"),
                "CLONESTAGE_TEST_BTRFS is not set but CLONESTAGE_REQUIRE_FS=1"
            );
            eprintln!("SKIP: CLONESTAGE_TEST_BTRFS not set (run .ci/mount-cow.sh as root)");
            return;
        };
        let t = tempfile::tempdir_in(base).unwrap();
        let top = t.path().join("top");
        std::fs::create_dir(&top).unwrap();
        let mut cur = Dir::open(&top).unwrap();
        for _ in 0..2_100 {
            cur = cur.mkdir_at(c"a", 0o755).unwrap();
        }
        platform::new_tree_container(&cur, c"sv").unwrap();
        let sv = cur.open_at(c"sv").unwrap();
        assert_eq!(sv.stat().unwrap().st_ino, 256, "not a subvolume root");
        sv.create_file(c"f", 0o444).unwrap();
        sv.mkdir_at(c"d", 0o555).unwrap();
        sv.chmod(0o555).unwrap();
        cur.chmod(0o555).unwrap();
        remove_tree(&top).unwrap();
        assert!(!top.exists());
    }
}
