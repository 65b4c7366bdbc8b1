//! Collecting declared outputs after the action (`OutputSpec`, from `output_spec`) into the
//! CAS and the `ActionResult`, and opening existing output directories before it. An output
//! directory's `Tree` is built in memory from the Directory messages its ingest wrote.
//!
//! - `output_paths` (v2.1+): each path is reported by what it turned out to be, a file, a
//!   directory (as a `Tree`) or a symlink in `output_symlinks`.
//! - `output_files` / `output_directories` (v2.0): symlinks are reported in
//!   `output_file_symlinks` / `output_directory_symlinks` by how they were declared, and never
//!   also in `output_symlinks` (Bazel rejects a path reported twice).
//!
//! Files are moved into the CAS by rename (the work dir is on the cache's filesystem), never
//! copied. A path whose parent chain contains a symlink is not followed: an action cannot make
//! the server read or move files outside its work dir. Absent outputs are simply not reported;
//! whether the result may then be cached is `result_check`'s to say.

use crate::checks::output_spec::{join, Declared, OutputSpec};
use crate::failure::Failure;
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::tree::{self, IngestOptions, IngestedTree};
use clonestage_engine::{Cache, PutFile};
use pb::command::OutputDirectoryFormat;
use prost::Message;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

impl OutputSpec {
    /// Outputs that already exist as directories in the staged root (an input tree that holds
    /// an empty output directory) become writable, so the action can fill them. Directories are
    /// never shared inodes, so this chmod touches nothing in the cache.
    pub fn open_existing_dirs(&self, root: &Path, wd: &str) -> Result<(), Failure> {
        for (p, decl) in &self.paths {
            if *decl == Declared::File || p.is_empty() {
                continue;
            }
            if let Some(path) = resolve(root, &join(wd, p))? {
                if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
                    chmod(&path, 0o755)?;
                }
            }
        }
        Ok(())
    }

    /// Move every output that exists into the CAS and describe it in `r`. Each blob is held
    /// from eviction until `hold` from before the cache is asked for it (`Cache::put_file_held`),
    /// so none goes between its install and the answer that names it (`answer_grace`).
    #[allow(deprecated)]
    pub fn collect(
        &self,
        cache: &Cache,
        root: &Path,
        wd: &str,
        hold: Instant,
        r: &mut pb::ActionResult,
    ) -> Result<(), Failure> {
        for (p, decl) in &self.paths {
            let Some(path) = resolve(root, &join(wd, p))? else {
                continue;
            };
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io("lstat", &path, e)),
            };
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).map_err(|e| io("readlink", &path, e))?;
                let target = target.into_os_string().into_string().map_err(|t| {
                    Failure::Internal(format!("output symlink '{p}' has a non-UTF-8 target {t:?}"))
                })?;
                let s = pb::OutputSymlink {
                    path: p.clone(),
                    target,
                    node_properties: None,
                };
                match decl {
                    Declared::Any => r.output_symlinks.push(s),
                    Declared::File => r.output_file_symlinks.push(s),
                    Declared::Directory => r.output_directory_symlinks.push(s),
                }
            } else if meta.is_file() {
                let exec = meta.permissions().mode() & 0o111 != 0;
                let d = cache
                    .put_file_held(&path, PutFile::Move, None, Some(hold))
                    .map_err(Failure::from)?;
                r.output_files.push(pb::OutputFile {
                    path: p.clone(),
                    digest: Some(d.to_proto()),
                    is_executable: exec,
                    ..Default::default()
                });
            } else if meta.is_dir() {
                make_dirs_writable(&path, 0)?;
                let ingested = tree::ingest_tree(
                    cache,
                    &path,
                    IngestOptions {
                        move_files: true,
                        hold_until: Some(hold),
                        ..Default::default()
                    },
                )
                .map_err(Failure::from)?;
                r.output_directories
                    .push(self.output_directory(cache, p, &ingested, hold)?);
            } else {
                tracing::warn!(path = %path.display(), "output is neither file, directory nor symlink; not reported");
            }
        }
        Ok(())
    }

    /// An output directory as the client asked for it: a `Tree` (built from the Directory
    /// messages the ingest wrote, not read back from the CAS), its root digest, or both.
    fn output_directory(
        &self,
        cache: &Cache,
        p: &str,
        ingested: &IngestedTree,
        hold: Instant,
    ) -> Result<pb::OutputDirectory, Failure> {
        let root = ingested.root;
        let want_tree = self.dir_format != OutputDirectoryFormat::DirectoryOnly as i32;
        let want_root = self.dir_format != OutputDirectoryFormat::TreeOnly as i32;
        let tree_digest = if want_tree {
            let mut dirs = ingested.directories().into_iter();
            let t = pb::Tree {
                root: dirs.next(),
                children: dirs.collect(),
            };
            Some(
                cache
                    .put_bytes_held(&t.encode_to_vec(), None, Some(hold))
                    .map_err(Failure::from)?
                    .to_proto(),
            )
        } else {
            None
        };
        Ok(pb::OutputDirectory {
            path: p.to_string(),
            tree_digest,
            is_topologically_sorted: false,
            root_directory_digest: want_root.then(|| root.to_proto()),
        })
    }
}

fn io(op: &str, p: &Path, e: std::io::Error) -> Failure {
    Failure::io(op, p, e)
}

fn chmod(p: &Path, mode: u32) -> Result<(), Failure> {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .map_err(|e| io("chmod", p, e))
}

/// `root/rel`, or None if a parent on the way is missing or not a real directory (a symlink an
/// action made must not lead the server outside the work dir).
fn resolve(root: &Path, rel: &str) -> Result<Option<PathBuf>, Failure> {
    let mut path = root.to_path_buf();
    let parts: Vec<&str> = if rel.is_empty() {
        vec![]
    } else {
        rel.split('/').collect()
    };
    for (i, c) in parts.iter().enumerate() {
        path.push(c);
        if i + 1 == parts.len() {
            break;
        }
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("lstat", &path, e)),
        }
    }
    Ok(Some(path))
}

/// Output trees copied from inputs keep 0o555 directories; renaming files out of them needs
/// write permission (for a non-root server). Bounded like the ingest that follows it: an
/// action can make a directory chain of any depth, and this must not exhaust the stack.
fn make_dirs_writable(dir: &Path, depth: u32) -> Result<(), Failure> {
    if depth > tree::MAX_INGEST_DEPTH {
        return Err(Failure::InvalidArgument(format!(
            "output directory {}: nested more than {} levels deep",
            dir.display(),
            tree::MAX_INGEST_DEPTH
        )));
    }
    let m = std::fs::symlink_metadata(dir).map_err(|e| io("lstat", dir, e))?;
    if m.permissions().mode() & 0o700 != 0o700 {
        chmod(dir, 0o755)?;
    }
    for e in std::fs::read_dir(dir).map_err(|e| io("readdir", dir, e))? {
        let e = e.map_err(|e| io("readdir", dir, e))?;
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            make_dirs_writable(&e.path(), depth + 1)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_refuses_symlinked_parents() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("real")).unwrap();
        std::os::unix::fs::symlink("/etc", d.path().join("link")).unwrap();
        assert_eq!(
            resolve(d.path(), "real/x").unwrap(),
            Some(d.path().join("real/x"))
        );
        assert_eq!(resolve(d.path(), "link/passwd").unwrap(), None);
        assert_eq!(resolve(d.path(), "missing/x").unwrap(), None);
    }
}
