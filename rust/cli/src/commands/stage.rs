//! `clonestage stage DIGEST DEST`.

use clonestage_engine::tree::SymlinkPolicy;
use clonestage_engine::{Digest, MethodPreference, StageRequest, Stager};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

pub struct StageArgs {
    pub digest: String,
    pub dest: PathBuf,
    pub outputs: Vec<String>,
    pub method: MethodPreference,
    pub symlinks: SymlinkPolicy,
    pub json: bool,
    /// `--preserve-inodes` (a one-shot stage has no pool: links are made in the root only
    /// where the minimum link age is zero).
    pub code: clonestage_engine::stage::CodePolicy,
}

pub fn stage(cache: &Path, a: StageArgs) -> anyhow::Result<ExitCode> {
    let root = Digest::parse(&a.digest)?;
    let stager = Stager::new(Arc::new(super::open(cache)?)).with_code_policy(a.code);
    let staged = stager.stage(&StageRequest {
        root,
        dest: a.dest,
        outputs: a.outputs,
        working_dir: String::new(),
        method: a.method,
        symlinks: a.symlinks,
        // Shared cache directories are the server's (`serve --shared-dir`): a root staged by
        // hand is private.
        shared: None,
        // Testing hook, only in builds with the `fault-injection` feature: fail after N
        // files, to prove a failed stage leaves nothing behind.
        #[cfg(feature = "fault-injection")]
        fail_after_files: std::env::var("CLONESTAGE_FAULT_FAIL_AFTER")
            .ok()
            .and_then(|v| v.parse().ok()),
    });
    // The bookkeeping (counters, access log, cost estimates) is written at exit, a failed
    // stage's failure count too.
    stager.ledger().flush();
    let staged = staged?;
    if a.json {
        let mut v = serde_json::to_value(&staged.counters)?;
        v["micros"] = staged.micros.into();
        println!("{v}");
    } else {
        let c = &staged.counters;
        // Formatted first: stderr is unbuffered, and eprintln! would write it piece by piece.
        let line = format!(
            "staged {} in {:.1} ms: clonefile {} reflink {} snapshot {} hardlink {} copy {} empty {} symlinks {}; subtree hits {} misses {}; fallbacks {}{}\n",
            staged.dest.display(),
            staged.micros as f64 / 1000.0,
            c.clonefile, c.reflink, c.snapshot, c.hardlink, c.copy, c.empty, c.symlinks, c.subtree_hits, c.subtree_misses, c.fallbacks,
            if a.code.preserves() {
                format!("; code linked {} cloned {}", c.code_linked, c.code_cloned)
            } else {
                String::new()
            }
        );
        eprint!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}
