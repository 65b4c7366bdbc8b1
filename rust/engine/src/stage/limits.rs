//! Bounds on one tree (`TreeLimits`), checked by the plan before anything is created, and the
//! INVALID_ARGUMENT errors that name the `clonestage serve` flag raising each.

use crate::digest::Digest;
use crate::error::{Error, Result};

/// Bounds on one tree, checked before anything is created (INVALID_ARGUMENT naming the flag
/// of `clonestage serve` that raises it). The defaults are far above real actions: the largest
/// SwiftCompile stages ~2,000 files / 466 MB in trees ~30 levels deep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeLimits {
    /// Directories nested below the root (a chain of N+1 Directories is N deep).
    pub max_depth: u32,
    /// Files, directories and symlinks once expanded (a Directory listed twice counts twice).
    pub max_entries: u64,
    /// Bytes of files once expanded.
    pub max_bytes: u64,
}

impl TreeLimits {
    /// 1,024 levels, what ingest follows (`tree::MAX_INGEST_DEPTH`, which says why).
    pub const DEFAULT_MAX_DEPTH: u32 = crate::tree::MAX_INGEST_DEPTH;
    pub const DEFAULT_MAX_ENTRIES: u64 = 1_000_000;
    pub const DEFAULT_MAX_BYTES: u64 = 64 << 30;
}

impl Default for TreeLimits {
    fn default() -> Self {
        TreeLimits {
            max_depth: Self::DEFAULT_MAX_DEPTH,
            max_entries: Self::DEFAULT_MAX_ENTRIES,
            max_bytes: Self::DEFAULT_MAX_BYTES,
        }
    }
}

pub(super) fn too_deep(path: &str, d: &Digest, limits: &TreeLimits) -> Error {
    // The path is as long as the tree is deep: its first and last levels are enough.
    let path = if path.len() > 120 {
        let head: String = path.chars().take(40).collect();
        let mut tail: Vec<char> = path.chars().rev().take(40).collect();
        tail.reverse();
        format!("{head}...{}", tail.into_iter().collect::<String>())
    } else {
        path.to_string()
    };
    Error::InvalidTree {
        path,
        digest: *d,
        reason: format!(
            "directories nested more than {} levels deep (the limit, --max-tree-depth)",
            limits.max_depth
        ),
    }
}

/// `entries`: files, directories and symlinks once expanded; `bytes`: of the files (both
/// saturated at u64::MAX).
pub(super) fn check_size(
    root: &Digest,
    entries: u64,
    bytes: u64,
    limits: &TreeLimits,
) -> Result<()> {
    let bad = |reason: String| Error::InvalidTree {
        path: String::new(),
        digest: *root,
        reason,
    };
    if entries > limits.max_entries {
        return Err(bad(format!(
            "the tree expands to {}{entries} entries, over the limit of {} (--max-tree-entries raises it)",
            if entries == u64::MAX { "at least " } else { "" },
            limits.max_entries
        )));
    }
    if bytes > limits.max_bytes {
        return Err(bad(format!(
            "the tree expands to {}{} bytes of files, over the limit of {} (--max-tree-bytes raises it)",
            if bytes == u64::MAX { "at least " } else { "" },
            bytes,
            limits.max_bytes
        )));
    }
    Ok(())
}
