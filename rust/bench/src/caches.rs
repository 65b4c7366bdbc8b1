//! The bench's caches for one shape: the warm one the tree is ingested into, and the cold
//! and loaded ones holding the same blob inodes (hardlinked, so three caches cost one ingest);
//! emptying a cache's subtree cache so its next stage is cold.

use crate::fdops;
use crate::shapes::{Manifest, Shape};
use anyhow::{Context, Result};
use clonestage_engine::tree::{self, IngestOptions};
use clonestage_engine::{Cache, Digest, Stager};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The stagers and caches one shape's units run with.
pub struct Caches {
    pub cold: Arc<Cache>,
    pub warm: Stager,
    pub loaded: Option<(Stager, PathBuf)>,
    /// A stager with a pool of ready subtrees, on its own cache (same blob inodes).
    pub pooled: Stager,
    pub tree_fs: bool,
}

/// Generate `shape` under `dir/src`, ingest it into `dir/cache-warm`, make `dir/dst`.
pub fn setup(
    shape: &Shape,
    dir: &Path,
) -> Result<(Manifest, PathBuf, PathBuf, Arc<Cache>, Digest)> {
    let src = dir.join("src");
    let man = shape.generate(&src)?;
    let cache = Arc::new(Cache::open(&dir.join("cache-warm"))?);
    let digest = tree::ingest_path(&cache, &src, IngestOptions::default())?;
    let dst = dir.join("dst");
    std::fs::create_dir(&dst)?;
    fdops::syncfs(dir)?;
    Ok((man, src, dst, cache, digest))
}

/// A second cache holding the same blob inodes as `from` (Directory messages included).
pub fn link_cache(from: &Path, to: &Path) -> Result<Arc<Cache>> {
    let cache = Cache::open(to)?;
    fn walk(from: &Path, to: &Path) -> Result<()> {
        for e in std::fs::read_dir(from)? {
            let e = e?;
            let (s, d) = (e.path(), to.join(e.file_name()));
            if e.file_type()?.is_dir() {
                std::fs::create_dir_all(&d)?;
                walk(&s, &d)?;
            } else {
                std::fs::hard_link(&s, &d)
                    .with_context(|| format!("link {} {}", s.display(), d.display()))?;
            }
        }
        Ok(())
    }
    for sub in ["blobs", "exec"] {
        walk(&from.join(sub), &to.join(sub))?;
    }
    Ok(Arc::new(cache))
}

/// Empty the subtree cache and forget every sighting (what makes the next stage cold).
pub fn reset_subtrees(cache: &Cache) -> Result<()> {
    let dir = cache.root().join("subtrees");
    for e in std::fs::read_dir(&dir)? {
        clonestage_engine::remove::remove_tree(&e?.path())?;
    }
    match std::fs::remove_file(cache.root().join("subtrees.seen")) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}
