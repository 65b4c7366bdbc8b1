//! `clonestage bench`: clonestage's stage against the raw per-file methods, side by side, on
//! one filesystem, over the five shapes of the published SwiftCompile staging benchmark.
//!
//! For each shape the bench generates the tree as an action root (`root/sdk/...`), ingests it
//! into a cache on the same filesystem, and then times, interleaved per repetition (the order
//! rotates each repetition, so drift and neighbours' noise hit every method alike):
//!
//! - the raw per-file methods the filesystem supports (`raw.rs`): `hardlink`, `reflink` (where
//!   FICLONE works), `copy` (every byte), `symlink` (Bazel's sandbox symlink forest), and on
//!   btrfs `snapshot` (one subvolume snapshot: the floor of a whole-tree clone); and
//!   `hardlink_cas` / `reflink_cas`, the same syscalls from the cache's blob files;
//!   `hardlink_cas_tree` / `reflink_cas_tree`, those after reading and decoding the tree's
//!   Directories from the cache (the floor of a stager of REAPI trees: `raw.rs`);
//! - clonestage's stage (`Stager::stage`, which includes validating the tree, pinning it and
//!   recording counters): `stage_cold`, the first stage with an empty subtree cache (a fresh
//!   `Stager`, `<cache>/subtrees/` and `subtrees.seen` removed); where the filesystem clones
//!   whole trees also `stage_second`, the second sighting, which builds the subtree cache entry
//!   and clones it (the engine caches a subtree only from its `SUBTREE_MIN_SIGHTINGS`th
//!   sighting, and only where cloning it whole pays `SUBTREE_PAYOFF` times over); and
//!   `stage_warm`, a long-lived stager after warm-up stages have populated the subtree cache
//!   (where the filesystem has no tree clone, warm is per-file staging with the blob cache,
//!   the device profile and the directory entries warm). Where the stage hardlinked,
//!   `stage_check` times `StagedRoot::check_inputs` after the warm stage (one lstat per
//!   hardlinked cache inode: the cost of detecting writes through hardlinks, e.g. as root).
//!   With a fourth stager that keeps a pool of ready subtrees (its copy of `sdk/` built during
//!   warm-up): `stage_warm_pooled` (the stage that takes the copy by one rename),
//!   `recycle_check` (proving it untouched and renaming it back, `Pool::recycle`) and
//!   `stage_noop_recycle` (stage, run `/bin/true` in the root, recycle: one action's loop),
//!   beside `stage_noop_remove`, the loop it replaces (the warm per-file stage, `/bin/true`,
//!   removing the root: what the server's janitor does with a root today).
//! - where the filesystem snapshots (btrfs; `--loaded always` elsewhere) the same warm path and
//!   the raw methods while a background thread keeps creating unsynced 64 KiB files (and
//!   removing the oldest) on the same filesystem, like a build writing outputs (`load.rs`):
//!   `stage_warm_loaded`, `hardlink_loaded`, `reflink_loaded`,
//!   `snapshot_loaded`. The loaded stager is its own long-lived `Stager` on its own cache, so
//!   its running cost averages (which decide whether a snapshot pays) see only loaded runs.
//!   Each loaded run starts after a sync and 300 ms of background writes, so no method pays
//!   for the removal of the one before it.
//!
//! Timing covers only the staging itself: removing each destination afterwards is not timed
//! (`clonestage_engine::remove::remove_tree`), and after each quiet run the filesystem is
//! synced (`syncfs`, not timed) so every quiet run starts from a clean filesystem. The page
//! cache is not dropped: a warm cache is the realistic case for staging inputs that were just
//! fetched or built. Three caches (warm, cold, loaded) share the same blob inodes (the cold
//! and loaded ones are hardlinked from the warm one), so they cost one ingest.
//!
//! Each method gets a warm-up run (not timed; copy excepted), then up to `--runs`
//! repetitions, at least `--min-runs`, fewer once a shape has used `--budget` seconds; raw
//! copy runs at most `--copy-runs` times (it writes every byte). Run counts are reported.
//!
//! `--parallel-sweep` instead times raw hardlink and reflink at 1, 2, 4, 8 threads (the
//! engine stages single-threaded today; this is the data for its in-flight cap).
//!
//! `--preserve-inodes-compare` instead stages each shape with a few Mach-O code files under
//! `--preserve-inodes macho` and `none`, side by side (`code_compare.rs`).
//!
//! Files, in the order a run passes through them: `args.rs` (arguments, `--shape`),
//! `machine.rs` (the header's machine and filesystem), `shapes.rs` (the generated trees),
//! `caches.rs` (ingest, the three caches), `interleaved.rs` (one shape: units, warm-up,
//! rotating repetitions) or `thread_sweep.rs` (`--parallel-sweep`), `timing.rs` (one timed run into
//! its row), `raw.rs` with `fdops.rs` and `cas_source.rs` (the raw baselines), `load.rs` (the
//! background write load), `row.rs` and `report.rs` (the table and the JSON lines).

mod args;
mod caches;
mod cas_source;
mod code_compare;
mod fdops;
mod interleaved;
mod load;
mod machine;
mod raw;
mod report;
mod row;
mod shapes;
mod thread_sweep;
mod timing;

pub use args::{BenchArgs, Loaded};

use anyhow::{bail, Context, Result};
use machine::Env;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Removes the work directory on every exit path.
struct Cleanup(PathBuf, bool);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !self.1 {
            if let Err(e) = clonestage_engine::remove::remove_tree(&self.0) {
                eprintln!("bench: cannot remove {}: {e}", self.0.display());
            }
        }
    }
}

/// The bench: the one entry point (`clonestage bench`).
pub fn run(args: &BenchArgs) -> Result<()> {
    let shapes = args::select_shapes(&args.shape)?;
    if args.runs == 0 || args.sweep_threads.is_empty() || args.sweep_threads.contains(&0) {
        bail!("--runs and thread counts must be at least 1");
    }
    let base = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir()?,
    };
    let base = base
        .canonicalize()
        .with_context(|| format!("bench directory {}", base.display()))?;
    sweep_dead(&base);
    let work = base.join(format!(".clonestage-bench-{}", std::process::id()));
    std::fs::create_dir(&work).with_context(|| format!("mkdir {}", work.display()))?;
    let _cleanup = Cleanup(work.clone(), args.keep);
    let env = Env::probe(work);
    if !args.json {
        println!(
            "clonestage bench on {} ({}), {}",
            base.display(),
            env.fs,
            machine::describe()
        );
        println!(
            "engine: SUBTREE_PAYOFF {}, SUBTREE_MIN_SIGHTINGS {}; bookkeeping deferred as in the server (not timed); page cache not dropped; \
             destination removal and the sync after each quiet run not timed",
            clonestage_engine::stage::SUBTREE_PAYOFF,
            clonestage_engine::stage::SUBTREE_MIN_SIGHTINGS
        );
        if args.parallel_sweep {
            println!(
                "reflink: {}; parallel sweep of the raw methods; times in ms, median and min over the runs; \
                 med/1t = median / the same method's 1-thread median",
                if env.reflink { "yes" } else { "no" }
            );
        } else {
            println!(
                "reflink: {}; raw methods: {} thread(s); times in ms, median and min over the runs; \
                 med/hl = median / raw hardlink median (loaded rows: / hardlink_loaded); \
                 vs raw = stage / the raw method that did its work",
                if env.reflink { "yes" } else { "no" },
                args.threads
            );
        }
    }
    let mut json_out = match &args.json_out {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("create {}", p.display()))?,
        )),
        None => None,
    };
    for shape in shapes {
        let t = Instant::now();
        let dir = env.work.join(shape.name);
        std::fs::create_dir(&dir)?;
        if args.preserve_inodes_compare {
            let lines = code_compare::compare_shape(args, &shape, &dir, &env.fs)
                .with_context(|| format!("shape {}", shape.name))?;
            for l in lines.iter().filter(|l| !l.starts_with('{') || args.json) {
                println!("{l}");
            }
            if let Some(f) = &mut json_out {
                for l in lines.iter().filter(|l| l.starts_with('{')) {
                    writeln!(f, "{l}")?;
                }
                f.flush()?;
            }
            if !args.keep {
                clonestage_engine::remove::remove_tree(&dir)?;
            }
            eprintln!("bench: {}: {:.0} s", shape.name, t.elapsed().as_secs_f64());
            continue;
        }
        let rows = if args.parallel_sweep {
            thread_sweep::sweep_shape(args, &env, &shape, &dir)
        } else {
            interleaved::bench_shape(args, &env, &shape, &dir)
        }
        .with_context(|| format!("shape {}", shape.name))?;
        if !args.keep {
            clonestage_engine::remove::remove_tree(&dir)?;
        }
        let lines = report::json_lines(&rows, &env.fs, args.parallel_sweep);
        if let Some(f) = &mut json_out {
            for l in &lines {
                writeln!(f, "{l}")?;
            }
            f.flush()?;
        }
        if args.json {
            for l in &lines {
                println!("{l}");
            }
        } else {
            println!(
                "\n{}: {} ({:.0} s)",
                shape.name,
                shape.describe(),
                t.elapsed().as_secs_f64()
            );
            print!("{}", report::table(&rows, args.parallel_sweep));
        }
    }
    Ok(())
}

/// Remove `.clonestage-bench-<pid>` directories of bench runs that were killed.
fn sweep_dead(base: &Path) {
    let Ok(rd) = std::fs::read_dir(base) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(".clonestage-bench-")
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !alive {
            eprintln!(
                "bench: removing {} (left by a killed run)",
                e.path().display()
            );
            let _ = clonestage_engine::remove::remove_tree(&e.path());
        }
    }
}
