//! Argument groups that more than one command of `main.rs` takes (clap derives), kept apart so
//! the command table stays readable.

use clap::ValueEnum;

/// `--preserve-inodes` and `--macho-link-age-ms`, for `stage` and `serve`.
#[derive(clap::Args)]
pub(crate) struct CodeArgs {
    /// macho: Mach-O executables, dylibs and plugins are staged as hardlinks to the cache's
    /// inode even where clones exist (macOS verifies code per inode: a clone is verified again
    /// in every action); none: every input is cloned there. `clonestage doctor` says which
    /// wins on this machine.
    #[arg(long, env = "CLONESTAGE_PRESERVE_INODES", default_value = "none",
          value_parser = clonestage_engine::stage::PreserveInodes::parse)]
    pub preserve_inodes: clonestage_engine::stage::PreserveInodes,
    /// How old (milliseconds) a hardlink must be before an action may run through it; younger
    /// links come only from the pool's ready copies, made ahead (macOS SIGKILLs some execs of
    /// fresh links) [default: 2000 on macOS, 0 on Linux].
    #[arg(long, env = "CLONESTAGE_MACHO_LINK_AGE_MS", value_name = "MS")]
    pub macho_link_age_ms: Option<u64>,
}

impl CodeArgs {
    pub(crate) fn policy(&self) -> clonestage_engine::stage::CodePolicy {
        let p = clonestage_engine::stage::CodePolicy::new(self.preserve_inodes);
        match self.macho_link_age_ms {
            Some(ms) => p.with_min_link_age(std::time::Duration::from_millis(ms)),
            None => p,
        }
    }
}

/// `stage --method`: the engine's `MethodPreference`.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Method {
    Auto,
    Clone,
    Hardlink,
    Copy,
}
