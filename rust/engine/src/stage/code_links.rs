//! `--preserve-inodes macho`: Mach-O code inputs (the cache's `code_record`) staged as
//! hardlinks to the cache's own inode even where clones exist, so that macOS, which keeps its
//! code-signature verdict per inode (`macho`), verifies a tool or dylib once rather than in
//! every action; everything else is cloned as before. The default is `none`.
//!
//! The catch is the exec of a fresh link, which macOS intermittently SIGKILLs
//! (`platform::MIN_EXEC_LINK_AGE`). So a link is made in a root only where that age is zero
//! (Linux, or a Mac where `clonestage doctor` found fresh links safe); otherwise links are made
//! ahead, in the pool's ready copies (a directory that holds code is pooled whatever its
//! size), and a copy is lent only once its links are older than the minimum age. Code
//! that no aged copy covers is cloned, as without the option, and counted (`code_cloned`).
//!
//! Whole-subtree clones: a btrfs snapshot is a subvolume, and link(2) across subvolumes fails
//! with EXDEV, so code cannot be linked back into a snapshot once it is taken (measured,
//! docs/bench/issue24-preserve-inodes.txt). Where links are made in roots, a subtree that
//! holds code is therefore filled per file down the path to the code, and its other
//! subdirectories are still cloned whole (`fill.rs`).

use std::time::Duration;

/// Which inputs keep the cache's inode where clones exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PreserveInodes {
    /// Every input cloned where the filesystem clones (the default).
    #[default]
    None,
    /// Mach-O executables, dylibs, bundles and the dynamic linker hardlinked; the rest cloned.
    Macho,
}

impl PreserveInodes {
    /// `none` or `macho` (what `--preserve-inodes` and `CLONESTAGE_PRESERVE_INODES` take).
    pub fn parse(s: &str) -> Result<PreserveInodes, String> {
        match s.trim() {
            "none" | "" => Ok(PreserveInodes::None),
            "macho" => Ok(PreserveInodes::Macho),
            other => Err(format!(
                "--preserve-inodes takes none or macho, not '{other}'"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PreserveInodes::None => "none",
            PreserveInodes::Macho => "macho",
        }
    }
}

/// What a stager does with code inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodePolicy {
    pub preserve: PreserveInodes,
    /// How old a link must be before an action may run it (`platform::MIN_EXEC_LINK_AGE`
    /// unless overridden): zero lets roots link code themselves.
    pub min_link_age: Duration,
}

impl Default for CodePolicy {
    fn default() -> Self {
        CodePolicy::new(PreserveInodes::None)
    }
}

impl CodePolicy {
    /// `preserve` with this platform's minimum link age.
    pub fn new(preserve: PreserveInodes) -> CodePolicy {
        CodePolicy {
            preserve,
            min_link_age: crate::platform::MIN_EXEC_LINK_AGE,
        }
    }

    pub fn with_min_link_age(self, min_link_age: Duration) -> CodePolicy {
        CodePolicy {
            min_link_age,
            ..self
        }
    }

    /// How a root being staged places code.
    pub(super) fn in_roots(&self) -> CodeMode {
        match (self.preserve, self.min_link_age.is_zero()) {
            (PreserveInodes::None, _) => CodeMode::Off,
            (PreserveInodes::Macho, true) => CodeMode::Link,
            (PreserveInodes::Macho, false) => CodeMode::CloneAndCount,
        }
    }

    /// How a pooled copy, built ahead of its use, places code.
    pub(super) fn in_pool(&self) -> CodeMode {
        match self.preserve {
            PreserveInodes::None => CodeMode::Off,
            PreserveInodes::Macho => CodeMode::Link,
        }
    }

    /// Whether any input keeps the cache's inode where clones exist.
    pub fn preserves(&self) -> bool {
        self.preserve != PreserveInodes::None
    }
}

/// How the placer treats a file that is Mach-O code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CodeMode {
    /// Like any file (no option, or filling a subtree cache entry that is cloned later).
    Off,
    /// Hardlink it (falling back to the device's method where links fail).
    Link,
    /// By the device's method, counted as code that no aged link covered.
    CloneAndCount,
}
