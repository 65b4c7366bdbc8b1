//! How many bytes a shared directory holds: the sizes of the regular files below it, walked
//! without following any symlink (an action may leave one pointing anywhere) and without
//! recursion. A tree too deep for paths (an action can make one) stops the walk: what was
//! counted is returned with `complete: false`, and eviction treats the directory as the first
//! to go.

use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub bytes: u64,
    pub files: u64,
    /// False when part of the tree could not be read (then `bytes` is a lower bound).
    pub complete: bool,
}

pub(super) fn measure(dir: &Path) -> Usage {
    let mut u = Usage {
        complete: true,
        ..Default::default()
    };
    // The top itself must be a real directory: a symlink in its place holds nothing of ours.
    if !std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
        return u;
    }
    let mut todo: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            u.complete = false;
            continue;
        };
        for e in rd {
            let Ok(e) = e else {
                u.complete = false;
                continue;
            };
            // DirEntry::file_type never follows a symlink.
            match e.file_type() {
                Ok(t) if t.is_dir() => todo.push(e.path()),
                Ok(t) if t.is_file() => match e.metadata() {
                    Ok(m) => {
                        u.bytes = u.bytes.saturating_add(m.len());
                        u.files += 1;
                    }
                    Err(_) => u.complete = false,
                },
                Ok(_) => {}
                Err(_) => u.complete = false,
            }
        }
    }
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_out_of_the_directory_are_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("big"), vec![0u8; 100_000]).unwrap();
        let d = t.path().join("d");
        std::fs::create_dir_all(d.join("h")).unwrap();
        std::fs::write(d.join("h/a.pcm"), b"12345").unwrap();
        std::os::unix::fs::symlink(&outside, d.join("out")).unwrap();
        std::os::unix::fs::symlink(outside.join("big"), d.join("h/big")).unwrap();
        let u = measure(&d);
        assert_eq!((u.bytes, u.files, u.complete), (5, 1, true));
    }
}
