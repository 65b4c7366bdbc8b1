//! `ingest`: put a local file or directory tree into the cache and return its digest (a file's
//! blob digest, or the root Directory digest for a tree); `ingest_tree` also returns the
//! Directory messages it wrote, so a caller that needs the REAPI `Tree` (the server, for an
//! output directory) builds it in memory instead of reading them back from the CAS.
//! Files are cloned into the cache where
//! the filesystem allows, else copied; symlinks are recorded, never followed. Directories
//! nested deeper than `MAX_INGEST_DEPTH` are refused (an action's output can be any shape; the
//! walk recurses, and must not run out of a 2 MiB thread's stack).

use super::{Directory, DirectoryNode, FileNode, SymlinkNode};
use crate::cas::{Cache, PutFile};
use crate::digest::Digest;
use crate::error::{Error, IoContext, Result};
use std::collections::{HashMap, HashSet, VecDeque};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

#[derive(Debug, Clone, Copy, Default)]
pub struct IngestOptions {
    /// Mark every file executable, as Bazel (through 8.x) does for action inputs, so the
    /// digest matches the one Bazel sends.
    pub all_executable: bool,
    /// Consume the files (rename them into the cache) instead of cloning or copying them:
    /// for an action's outputs, which live on the cache's filesystem and are discarded after.
    pub move_files: bool,
    /// Hold every blob written or found from this process's eviction until then
    /// (`Cache::put_file_held`): for outputs about to be named in an answer.
    pub hold_until: Option<std::time::Instant>,
}

/// Levels of directories below the top that `ingest_path` follows: 1,024, deeper than any
/// path PATH_MAX (4,096 bytes) can name with 3-byte names. The stager's default limit
/// (`stage::TreeLimits::DEFAULT_MAX_DEPTH`) is this, so what is ingested can be staged.
pub const MAX_INGEST_DEPTH: u32 = 1024;

/// A directory tree put into the cache: its root digest and every Directory message written.
#[derive(Debug, Clone)]
pub struct IngestedTree {
    pub root: Digest,
    dirs: HashMap<Digest, Directory>,
}

impl IngestedTree {
    /// The tree's Directory messages in the order `get_tree` reads them from the CAS: the root
    /// first, then breadth-first, each distinct directory once (what a REAPI `Tree` holds).
    pub fn directories(&self) -> Vec<Directory> {
        let mut out = Vec::with_capacity(self.dirs.len());
        let mut seen = HashSet::new();
        let mut queue = VecDeque::from([self.root]);
        while let Some(d) = queue.pop_front() {
            if !seen.insert(d) {
                continue;
            }
            // Every directory below the root was ingested, so each digest is in the map.
            let Some(dir) = self.dirs.get(&d) else {
                continue;
            };
            for sub in &dir.directories {
                if let Some(sd) = sub.digest.as_ref().and_then(|p| Digest::from_proto(p).ok()) {
                    queue.push_back(sd);
                }
            }
            out.push(dir.clone());
        }
        out
    }
}

/// Put the directory tree at `path` into the cache, keeping the Directory messages written.
pub fn ingest_tree(cache: &Cache, path: &Path, opts: IngestOptions) -> Result<IngestedTree> {
    let meta = std::fs::symlink_metadata(path).ctx("lstat", path)?;
    if !meta.is_dir() {
        return Err(Error::InvalidArgument(format!(
            "{}: not a directory",
            path.display()
        )));
    }
    let mut dirs = HashMap::new();
    let root = ingest_dir(cache, path, opts, 0, &mut dirs)?;
    Ok(IngestedTree { root, dirs })
}

pub fn ingest_path(cache: &Cache, path: &Path, opts: IngestOptions) -> Result<Digest> {
    let meta = std::fs::symlink_metadata(path).ctx("lstat", path)?;
    if meta.is_file() {
        return cache.put_file_held(path, put_mode(opts), None, opts.hold_until);
    }
    if !meta.is_dir() {
        return Err(Error::InvalidArgument(format!(
            "{}: only a regular file or a directory can be ingested",
            path.display()
        )));
    }
    ingest_dir(cache, path, opts, 0, &mut HashMap::new())
}

/// Ingest one directory (and, first, those below it); every Directory written goes into `out`.
fn ingest_dir(
    cache: &Cache,
    path: &Path,
    opts: IngestOptions,
    depth: u32,
    out: &mut HashMap<Digest, Directory>,
) -> Result<Digest> {
    if depth > MAX_INGEST_DEPTH {
        return Err(Error::InvalidArgument(format!(
            "{}: directories nested more than {MAX_INGEST_DEPTH} levels deep",
            path.display()
        )));
    }
    let mut entries: Vec<(String, std::fs::DirEntry)> = Vec::new();
    for e in std::fs::read_dir(path).ctx("readdir", path)? {
        let e = e.ctx("readdir", path)?;
        let name = e.file_name().into_string().map_err(|n| {
            Error::InvalidArgument(format!("{}: name {n:?} is not UTF-8", path.display()))
        })?;
        entries.push((name, e));
    }
    // REAPI orders entries by name as bytes (UTF-8), which is what str comparison does.
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut dir = Directory::default();
    for (name, e) in entries {
        let p = e.path();
        let meta = std::fs::symlink_metadata(&p).ctx("lstat", &p)?;
        let ft = meta.file_type();
        if ft.is_symlink() {
            let target = std::fs::read_link(&p).ctx("readlink", &p)?;
            let target = target.into_os_string().into_string().map_err(|t| {
                Error::InvalidArgument(format!(
                    "{}: symlink target {t:?} is not UTF-8",
                    p.display()
                ))
            })?;
            dir.symlinks.push(SymlinkNode {
                name,
                target,
                node_properties: None,
            });
        } else if ft.is_dir() {
            let d = ingest_dir(cache, &p, opts, depth + 1, out)?;
            dir.directories.push(DirectoryNode {
                name,
                digest: Some(d.to_proto()),
            });
        } else if ft.is_file() {
            let d = cache.put_file_held(&p, put_mode(opts), None, opts.hold_until)?;
            let exec = opts.all_executable || meta.permissions().mode() & 0o111 != 0;
            dir.files.push(FileNode {
                name,
                digest: Some(d.to_proto()),
                is_executable: exec,
                node_properties: None,
            });
        } else {
            return Err(Error::InvalidArgument(format!(
                "{}: sockets, fifos and devices cannot be ingested",
                p.display()
            )));
        }
    }
    let d = cache.put_bytes_held(&super::encode(&dir), None, opts.hold_until)?;
    out.insert(d, dir);
    Ok(d)
}

fn put_mode(opts: IngestOptions) -> PutFile {
    if opts.move_files {
        PutFile::Move
    } else {
        PutFile::CloneOrCopy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Directory messages kept by `ingest_tree` are the ones `get_tree` reads back from
    /// the CAS, in the same order, byte for byte: a tree with a repeated subdirectory (stored
    /// once), nesting, an empty directory, executables and a symlink.
    #[test]
    fn ingest_tree_keeps_what_get_tree_reads_back() {
        let t = tempfile::tempdir().unwrap();
        let cache = Cache::open(&t.path().join("cache")).unwrap();
        let top = t.path().join("top");
        for sub in ["a/x", "b/x", "c/deep/er", "empty"] {
            std::fs::create_dir_all(top.join(sub)).unwrap();
        }
        for f in ["a/x/f", "b/x/f", "c/deep/er/g", "c/h"] {
            std::fs::write(top.join(f), f.len().to_string()).unwrap();
        }
        std::fs::set_permissions(top.join("c/h"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("../a", top.join("c/link")).unwrap();
        let ingested = ingest_tree(&cache, &top, IngestOptions::default()).unwrap();
        let from_cas = super::super::get_tree(&cache, &ingested.root).unwrap();
        let mine = ingested.directories();
        assert!(from_cas.len() >= 6, "{from_cas:?}");
        assert_eq!(mine, from_cas);
        let bytes = |v: &[Directory]| v.iter().map(super::super::encode).collect::<Vec<_>>();
        assert_eq!(bytes(&mine), bytes(&from_cas));
        assert_eq!(
            ingested.root,
            ingest_path(&cache, &top, IngestOptions::default()).unwrap()
        );
    }

    /// Outputs are ingested on the server's 2 MiB blocking threads: the deepest accepted tree
    /// must fit, and one level more is refused, not a stack overflow.
    #[test]
    fn ingest_takes_max_depth_on_a_small_stack_and_refuses_deeper() {
        let t = tempfile::tempdir().unwrap();
        let cache = Cache::open(&t.path().join("cache")).unwrap();
        let top = t.path().join("top");
        let mut p = top.clone();
        for _ in 0..MAX_INGEST_DEPTH {
            p.push("a");
        }
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("f"), b"x").unwrap();
        let (cache, top2) = (std::sync::Arc::new(cache), top.clone());
        let c2 = cache.clone();
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                ingest_path(&c2, &top2, IngestOptions::default()).unwrap();
                std::fs::create_dir(p.join("b")).unwrap();
                let e = ingest_path(&c2, &top2, IngestOptions::default()).unwrap_err();
                assert!(e.to_string().contains("levels deep"), "{e}");
            })
            .unwrap()
            .join()
            .expect("no stack overflow");
    }
}
