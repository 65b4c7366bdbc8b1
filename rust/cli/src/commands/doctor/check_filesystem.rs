//! `filesystem`: which filesystem the cache is on, the method staging uses there and why (the
//! engine's probe, as `clonestage status` explains it), and whether the cache, the work dirs
//! and the pool are on one volume (clonefile and reflink work only within one). Fails when
//! staging would copy every byte, when those directories are on different volumes, or on a
//! platform whose cache belongs on a cloning filesystem (`platform::CLONES_EXPECTED`) when
//! it is not on one.

use super::report::Outcome;
use super::{platform, Context};
use clonestage_engine::platform as fsplat;
use clonestage_engine::stage::FileMethod;
use clonestage_engine::{Cache, Stager};
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

pub fn check(ctx: &mut Context) -> Outcome {
    let cache = match Cache::open(&ctx.cache_dir) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            return Outcome::fail(format!(
                "cannot open the cache {}: {e}",
                ctx.cache_dir.display()
            ))
        }
    };
    ctx.cache_dir = cache.root().to_path_buf();
    ctx.cache = Some(cache.clone());
    let root = cache.root();
    let fs = fsplat::filesystem_name(root).unwrap_or_else(|e| format!("unknown ({e})"));
    // Where the server stages (made by it; the cache's own device before it ever ran).
    let work = root.join("work");
    let dest = if work.is_dir() {
        work
    } else {
        root.to_path_buf()
    };
    let prof = match Stager::new(cache.clone()).profile_for(&dest) {
        Ok(p) => p,
        Err(e) => {
            return Outcome::fail(format!("cannot probe staging into {}: {e}", dest.display()))
        }
    };
    let (method, why) = crate::commands::status::explain(&prof, &fs, &dest);
    ctx.clones = Some(prof.file_method == FileMethod::Clone);
    let mut volumes = Vec::new();
    let dev_of = |p: &std::path::Path| std::fs::metadata(p).ok().map(|m| m.dev());
    let cache_dev = dev_of(&root.join("tmp"));
    for sub in ["work", "pool", "subtrees"] {
        let p = root.join(sub);
        if let (Some(d), Some(c)) = (dev_of(&p), cache_dev) {
            if d != c {
                volumes.push(p.display().to_string());
            }
        }
    }
    let detail = format!("cache {} on {fs}; staging: {method}; {why}", root.display());
    if !volumes.is_empty() {
        return Outcome::fail(format!(
            "{detail}; but {} is on another volume than the cache's blobs (clones and links fail across volumes, EXDEV: keep them in the cache directory)",
            volumes.join(", ")
        ));
    }
    match prof.file_method {
        FileMethod::Copy => Outcome::fail(format!(
            "{detail}; every input would be copied byte by byte: put the cache on a filesystem with clones (APFS, btrfs, XFS with reflink=1) or at least hardlinks"
        )),
        FileMethod::Hardlink if platform::CLONES_EXPECTED => Outcome::fail(format!(
            "{detail}; on {} the cache belongs on a volume with clonefile (APFS): here every input is a fresh hardlink, which the OS may kill at exec",
            platform::NAME
        )),
        _ => Outcome::pass(format!("{detail}; cache, work and pool on one volume")),
    }
}
