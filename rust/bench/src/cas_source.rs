//! Where the raw `*_cas` and `*_cas_tree` methods take each file from: the blob files of
//! the warm cache, through shard directory fds opened once before the runs (as the engine
//! keeps them), and the list of the tree's Directories the `*_cas_tree` methods read first.

use crate::fdops::{cpath, open_dir};
use crate::shapes::Manifest;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Each manifest file's blob in a cache: the shard directories, open, and per file (in
/// manifest order) its shard and leaf name.
pub struct CasSource {
    pub(crate) shards: Vec<OwnedFd>,
    pub(crate) files: Vec<(usize, CString)>,
    pub(crate) cache: std::sync::Arc<clonestage_engine::Cache>,
    /// Every Directory of the tree, once each (what the `*_cas_tree` methods read).
    pub(crate) tree: Vec<clonestage_engine::Digest>,
}

impl CasSource {
    /// Hash every source file (not timed) and find its blob in `cache`; list the Directories
    /// of the tree at `root`.
    pub fn open(
        cache: &std::sync::Arc<clonestage_engine::Cache>,
        man: &Manifest,
        root: &clonestage_engine::Digest,
    ) -> anyhow::Result<CasSource> {
        use anyhow::Context;
        // Each Directory once, by the engine's own walk; a stored Directory is its canonical
        // encoding, so encoding it again gives back its digest.
        let tree: Vec<clonestage_engine::Digest> = clonestage_engine::tree::get_tree(cache, root)?
            .iter()
            .map(|d| clonestage_engine::Digest::of_bytes(&clonestage_engine::tree::encode(d)))
            .collect();
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut shards = Vec::new();
        let mut files = Vec::with_capacity(man.files.len());
        for f in &man.files {
            let src = Path::new(std::ffi::OsStr::from_bytes(f.target.to_bytes()));
            let file =
                std::fs::File::open(src).with_context(|| format!("open {}", src.display()))?;
            let d = clonestage_engine::Digest::of_reader(file)
                .with_context(|| format!("read {}", src.display()))?;
            let blob = cache.blob_path(&d);
            anyhow::ensure!(
                blob.is_file(),
                "{} is not in the cache as {}",
                src.display(),
                blob.display()
            );
            let dir = blob.parent().expect("sharded").to_path_buf();
            let shard = match dirs.iter().position(|x| *x == dir) {
                Some(i) => i,
                None => {
                    shards.push(open_dir(&dir).with_context(|| format!("open {}", dir.display()))?);
                    dirs.push(dir);
                    dirs.len() - 1
                }
            };
            let leaf = cpath(Path::new(blob.file_name().expect("leaf")))?;
            files.push((shard, leaf));
        }
        anyhow::ensure!(
            tree.len() == man.dirs.len(),
            "the tree at {root} has {} Directories, the generated tree {} directories",
            tree.len(),
            man.dirs.len()
        );
        Ok(CasSource {
            shards,
            files,
            cache: cache.clone(),
            tree,
        })
    }
}
