//! Linux: the mount points of this process's mount namespace from `/proc/self/mountinfo`
//! (field 5, with `\ooo` octal escapes for space, tab, newline and backslash: proc(5)), and
//! `umount2(MNT_DETACH | UMOUNT_NOFOLLOW)`, a lazy unmount that takes the mount, and any below
//! it, out of the namespace at once even while a process still uses it (umount(2)).

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

pub const DETACH_CALL: &str = "umount2(MNT_DETACH)";

pub fn mount_points() -> io::Result<Vec<PathBuf>> {
    let text = std::fs::read("/proc/self/mountinfo")?;
    Ok(text
        .split(|b| *b == b'\n')
        .filter_map(|line| line.split(|b| *b == b' ').nth(4))
        .map(|p| PathBuf::from(OsString::from_vec(unescape(p))))
        .collect())
}

/// `\040` -> ' ' and the like.
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let oct = field
            .get(i + 1..i + 4)
            .filter(|d| field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match oct {
            Some(d) => {
                out.push(d.iter().fold(0u8, |n, c| n.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

pub fn detach(path: &Path) -> io::Result<()> {
    let p = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: `p` is a valid NUL-terminated path.
    if unsafe { libc::umount2(p.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) } == 0 {
        return Ok(());
    }
    Err(io::Error::last_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_mount_points_are_read_back() {
        assert_eq!(unescape(br"/a\040b\011c\134d"), b"/a b\tc\\d");
        assert_eq!(unescape(br"/plain\0"), br"/plain\0");
        assert!(mount_points().unwrap().contains(&PathBuf::from("/")));
    }
}
