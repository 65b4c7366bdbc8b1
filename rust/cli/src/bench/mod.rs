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

mod load;
mod raw;
mod report;
mod shapes;

use anyhow::{bail, Context, Result};
use clonestage_engine::stats::Counters;
use clonestage_engine::tree::{self, IngestOptions};
use clonestage_engine::{Cache, Digest, StageRequest, Stager};
use raw::{Manifest, Raw};
use report::Row;
use shapes::Shape;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// When to measure under background write load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Loaded {
    /// Where the filesystem clones whole trees by snapshot (btrfs).
    Auto,
    Always,
    Never,
}

/// Compare clonestage's stage with raw per-file hardlink, reflink, copy and symlink forests.
///
/// Works in a fresh `.clonestage-bench-<pid>` directory inside DIR, with its own caches
/// there (the global `--cache` is not used), and removes it at the end.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// A directory on the filesystem to measure [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// small_flat, pcm_cluster, deep_nested, medium_flat, large_flat (comma-separated), or all
    #[arg(long, value_name = "NAME|all", default_value = "all")]
    pub shape: String,
    /// One JSON object per line instead of a table
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON lines to FILE (with the table on stdout: one run, both forms)
    #[arg(long, value_name = "FILE")]
    pub json_out: Option<PathBuf>,
    /// Timed repetitions per method (at most)
    #[arg(long, default_value_t = 11, value_name = "N")]
    pub runs: usize,
    /// Timed repetitions per method (at least, whatever the budget)
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub min_runs: usize,
    /// Seconds per shape after which no new repetition starts (once --min-runs are done)
    #[arg(long, default_value_t = 20.0, value_name = "SECS")]
    pub budget: f64,
    /// Timed repetitions of raw copy (at most)
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub copy_runs: usize,
    /// Threads for the raw per-file methods
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub threads: usize,
    /// Time only raw hardlink and reflink at each of --sweep-threads (per shape)
    #[arg(long)]
    pub parallel_sweep: bool,
    /// Thread counts for --parallel-sweep
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,4,8",
        value_name = "N,N,..."
    )]
    pub sweep_threads: Vec<usize>,
    /// Also measure under background writes
    #[arg(long, value_enum, default_value = "auto")]
    pub loaded: Loaded,
    /// Background load: MiB of 64 KiB files kept (new ones created, oldest removed)
    #[arg(long, default_value_t = 64, value_name = "MIB")]
    pub load_mib: u64,
    /// Background load: MiB/s of new files (0: as fast as one thread can)
    #[arg(long, default_value_t = 64, value_name = "MIB_S")]
    pub load_rate: u64,
    /// Keep the work directory
    #[arg(long)]
    pub keep: bool,
}

struct Env {
    work: PathBuf,
    fs: String,
    reflink: bool,
}

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

pub fn run(args: &BenchArgs) -> Result<()> {
    let shapes = select_shapes(&args.shape)?;
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
    let env = Env {
        fs: raw::fs_type(&work),
        reflink: raw::probe_reflink(&work),
        work,
    };
    if !args.json {
        println!(
            "clonestage bench on {} ({}), {}",
            base.display(),
            env.fs,
            machine()
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
        let rows = if args.parallel_sweep {
            sweep_shape(args, &env, &shape, &dir)
        } else {
            bench_shape(args, &env, &shape, &dir)
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

fn select_shapes(spec: &str) -> Result<Vec<Shape>> {
    if spec == "all" {
        return Ok(shapes::SHAPES.to_vec());
    }
    spec.split(',')
        .map(|n| {
            Shape::by_name(n.trim()).with_context(|| {
                let names: Vec<_> = shapes::SHAPES.iter().map(|s| s.name).collect();
                format!("unknown shape '{n}' (known: {}, all)", names.join(", "))
            })
        })
        .collect()
}

/// "2 cores, Linux 6.x, 2025-01-01 12:00 UTC".
fn machine() -> String {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    let kernel = if unsafe { libc::uname(&mut u) } == 0 {
        let f = |b: &[libc::c_char]| {
            let b: Vec<u8> = b
                .iter()
                .take_while(|c| **c != 0)
                .map(|c| *c as u8)
                .collect();
            String::from_utf8_lossy(&b).into_owned()
        };
        format!("{} {}", f(&u.sysname), f(&u.release))
    } else {
        "unknown kernel".into()
    };
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| format!(" ({})", v.trim()))
        })
        .unwrap_or_default();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            let kb: u64 = t.lines().next()?.split_whitespace().nth(1)?.parse().ok()?;
            Some(format!(", {:.0} GiB RAM", kb as f64 / (1 << 20) as f64))
        })
        .unwrap_or_default();
    format!(
        "{cores} cores{cpu}{mem}, {kernel}, {} UTC",
        utc(secs as i64)
    )
}

/// Civil date from Unix seconds (Howard Hinnant's days_from_civil, inverted).
fn utc(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60
    )
}

/// A second cache holding the same blob inodes as `from` (Directory messages included).
fn link_cache(from: &Path, to: &Path) -> Result<Arc<Cache>> {
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
fn reset_subtrees(cache: &Cache) -> Result<()> {
    let dir = cache.root().join("subtrees");
    for e in std::fs::read_dir(&dir)? {
        clonestage_engine::remove::remove_tree(&e?.path())?;
    }
    match std::fs::remove_file(cache.root().join("subtrees.seen")) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// How long the background writer runs after a sync before each loaded run is timed.
const LOAD_SETTLE: Duration = Duration::from_millis(300);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Unit {
    Raw(Raw),
    Snapshot,
    /// stage_cold, then (tree-clone filesystems) stage_second, with one fresh stager.
    Cold,
    Warm,
    /// Every `_loaded` method, under one background write load.
    Loaded,
}

struct Ctx<'a> {
    args: &'a BenchArgs,
    shape: &'static str,
    man: Manifest,
    src: PathBuf,
    dst: PathBuf,
    digest: Digest,
    /// The cached `sdk` subvolume that raw `snapshot` clones (btrfs, after warm-up).
    snap_src: Option<PathBuf>,
    /// The blobs the raw `*_cas` methods link or clone from (the warm cache's).
    cas: Option<raw::CasSource>,
    rows: Vec<Row>,
    recording: bool,
    seq: usize,
    /// Bytes the background load wrote during recorded loaded phases, and their duration.
    load_bytes: u64,
    load_secs: f64,
}

impl Ctx<'_> {
    fn row(&mut self, method: &str) -> Option<&mut Row> {
        self.rows.iter_mut().find(|r| r.method == method)
    }

    fn dest(&mut self, method: &str) -> PathBuf {
        self.seq += 1;
        self.dst.join(format!("{method}-{}", self.seq))
    }

    fn record(&mut self, method: &str, d: Duration, c: Option<Counters>) {
        if !self.recording {
            return;
        }
        let row = self
            .row(method)
            .unwrap_or_else(|| panic!("bench row {method} not set up"));
        row.samples.push(d.as_secs_f64() * 1e3);
        row.counters.extend(c);
    }

    fn quiet(&self) -> Result<()> {
        raw::syncfs(&self.dst).context("syncfs")
    }

    fn raw(&mut self, m: Raw, method: &str, threads: usize) -> Result<()> {
        let dest = self.dest(method);
        let cpu = thread_cpu_us();
        let d = raw::run(m, &self.man, &self.src, self.cas.as_ref(), &dest, threads)
            .with_context(|| format!("{method} into {}", dest.display()))?;
        trace_cpu(method, d, cpu);
        if self.recording {
            let row = self
                .rows
                .iter_mut()
                .find(|r| r.method == method && r.threads == threads)
                .expect("raw row set up");
            row.samples.push(d.as_secs_f64() * 1e3);
        }
        clonestage_engine::remove::remove_tree(&dest)?;
        Ok(())
    }

    fn snapshot(&mut self, method: &str) -> Result<()> {
        let Some(src) = self.snap_src.clone() else {
            return Ok(());
        };
        let dest = self.dest(method);
        let d = raw::snapshot(&src, &dest, "sdk")
            .with_context(|| format!("{method} into {}", dest.display()))?;
        self.record(method, d, None);
        clonestage_engine::remove::remove_tree(&dest)?;
        Ok(())
    }

    fn stage(&mut self, stager: &Stager, method: &str) -> Result<Counters> {
        let dest = self.dest(method);
        // As the server stages: the access log, persistent counters and cost estimates wait in
        // the stager's ledger and are written by its flush, after the timed stage.
        let req = StageRequest {
            root: self.digest,
            dest: dest.clone(),
            ..Default::default()
        };
        // The engine's running cost estimates this stage decides with (not timed).
        let prof = stager.profile_for(&self.dst)?;
        let cpu = thread_cpu_us();
        let t = Instant::now();
        let staged = stager
            .stage(&req)
            .with_context(|| format!("{method} into {}", dest.display()))?;
        let d = t.elapsed();
        trace_cpu(method, d, cpu);
        stager.ledger().flush();
        let c = staged.counters.clone();
        if method == "stage_warm" && c.hardlink > 0 && self.recording {
            // What detecting writes through hardlinked inputs costs after the action.
            let t = Instant::now();
            let bad = staged.check_inputs();
            let d = t.elapsed();
            anyhow::ensure!(
                bad.is_empty(),
                "check_inputs flagged {} untouched inputs",
                bad.len()
            );
            if self.row("stage_check").is_none() {
                let n = self.man.files.len();
                self.rows.push(Row::new(self.shape, "stage_check", 0, n));
            }
            self.record("stage_check", d, None);
        }
        drop(staged);
        self.record(method, d, Some(c.clone()));
        if self.recording {
            if let Some(r) = self.row(method) {
                r.estimates.push((prof.file_us, prof.tree_clone_us));
            }
        }
        clonestage_engine::remove::remove_tree(&dest)?;
        Ok(c)
    }
}

/// This thread's user + system CPU time, µs.
fn thread_cpu_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer; CLOCK_THREAD_CPUTIME_ID exists on Linux and macOS.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

/// Wall against CPU of one timed run (`CLONESTAGE_LOG=clonestage=debug`): where a method's
/// wall time exceeds its CPU time, it waited (I/O, locks, journal) or was preempted.
fn trace_cpu(method: &str, wall: Duration, cpu_before: u64) {
    tracing::debug!(
        method,
        wall_us = wall.as_micros() as u64,
        cpu_us = thread_cpu_us().saturating_sub(cpu_before),
        "timed run"
    );
}

/// Stage with `stager` until a run takes its subtree from the subtree cache (at most 4
/// stages; fewer where the filesystem has no tree clone or the subtree does not pay).
fn warm_up(ctx: &mut Ctx, stager: &Stager, tree_fs: bool) -> Result<usize> {
    for i in 1..=4 {
        let c = ctx.stage(stager, "stage_warm")?;
        if !tree_fs || (c.subtree_hits > 0 && c.subtree_misses == 0) {
            return Ok(i);
        }
    }
    Ok(4)
}

struct Caches {
    cold: Arc<Cache>,
    warm: Stager,
    loaded: Option<(Stager, PathBuf)>,
    tree_fs: bool,
}

fn run_unit(ctx: &mut Ctx, caches: &Caches, unit: Unit, rep: usize) -> Result<()> {
    let args = ctx.args;
    match unit {
        Unit::Raw(m) => {
            ctx.raw(m, m.name(), args.threads)?;
            ctx.quiet()?;
        }
        Unit::Snapshot => {
            ctx.snapshot("snapshot")?;
            ctx.quiet()?;
        }
        Unit::Cold => {
            reset_subtrees(&caches.cold)?;
            let st = Stager::new(caches.cold.clone());
            st.profile_for(&ctx.dst)?;
            ctx.quiet()?;
            ctx.stage(&st, "stage_cold")?;
            ctx.quiet()?;
            if caches.tree_fs {
                ctx.stage(&st, "stage_second")?;
                ctx.quiet()?;
            }
        }
        Unit::Warm => {
            ctx.stage(&caches.warm, "stage_warm")?;
            ctx.quiet()?;
        }
        Unit::Loaded => {
            let Some((stager, load_dir)) = &caches.loaded else {
                return Ok(());
            };
            ctx.seq += 1;
            let t_load = Instant::now();
            let load = load::Load::start(
                &load_dir.join(format!("p{}", ctx.seq)),
                args.load_mib,
                args.load_rate,
            )?;
            let mut order: Vec<&str> = [
                "stage_warm_loaded",
                "hardlink_loaded",
                "reflink_loaded",
                "snapshot_loaded",
            ]
            .into_iter()
            .filter(|m| ctx.rows.iter().any(|r| r.method == *m))
            .collect();
            let n = order.len();
            order.rotate_left(rep % n.max(1));
            for m in order {
                // Each loaded run starts the same way: our own previous run synced away, then
                // LOAD_SETTLE of the writer's pending creations (not the previous method's
                // removals) in the transaction the next snapshot has to commit.
                ctx.quiet()?;
                std::thread::sleep(LOAD_SETTLE);
                match m {
                    "stage_warm_loaded" => {
                        ctx.stage(stager, m)?;
                    }
                    "hardlink_loaded" => ctx.raw(Raw::Hardlink, m, 1)?,
                    "reflink_loaded" => ctx.raw(Raw::Reflink, m, 1)?,
                    _ => ctx.snapshot(m)?,
                }
            }
            let bytes = load.stop()?;
            if ctx.recording {
                ctx.load_bytes += bytes;
                ctx.load_secs += t_load.elapsed().as_secs_f64();
            }
            ctx.quiet()?;
        }
    }
    Ok(())
}

fn setup(shape: &Shape, dir: &Path) -> Result<(Manifest, PathBuf, PathBuf, Arc<Cache>, Digest)> {
    let src = dir.join("src");
    let man = shape.generate(&src)?;
    let cache = Arc::new(Cache::open(&dir.join("cache-warm"))?);
    let digest = tree::ingest_path(&cache, &src, IngestOptions::default())?;
    let dst = dir.join("dst");
    std::fs::create_dir(&dst)?;
    raw::syncfs(dir)?;
    Ok((man, src, dst, cache, digest))
}

fn bench_shape(args: &BenchArgs, env: &Env, shape: &Shape, dir: &Path) -> Result<Vec<Row>> {
    let t_setup = Instant::now();
    let (man, src, dst, cache_warm, digest) = setup(shape, dir)?;
    let warm = Stager::new(cache_warm.clone());
    let prof = warm.profile_for(&dst)?;
    let tree_fs = prof.tree_clone.is_some();
    let loaded = match args.loaded {
        Loaded::Always => true,
        Loaded::Never => false,
        Loaded::Auto => tree_fs && env.fs == "btrfs",
    };
    let cold = link_cache(cache_warm.root(), &dir.join("cache-cold"))?;
    let loaded_stager = if loaded {
        let c = link_cache(cache_warm.root(), &dir.join("cache-loaded"))?;
        std::fs::create_dir(dir.join("load"))?;
        Some((Stager::new(c), dir.join("load")))
    } else {
        None
    };
    let caches = Caches {
        cold,
        warm,
        loaded: loaded_stager,
        tree_fs,
    };

    let mut raws = vec![Raw::Hardlink, Raw::HardlinkCas, Raw::HardlinkCasTree];
    if env.reflink {
        raws.extend([Raw::Reflink, Raw::ReflinkCas, Raw::ReflinkCasTree]);
    }
    raws.extend([Raw::Copy, Raw::Symlink]);
    let cas = Some(raw::CasSource::open(&cache_warm, &man, &digest)?);
    let n = man.files.len();
    let mut rows: Vec<Row> = raws
        .iter()
        .map(|m| Row::new(shape.name, m.name(), args.threads, n))
        .collect();
    if tree_fs {
        rows.push(Row::new(shape.name, "snapshot", 1, n));
    }
    rows.push(Row::new(shape.name, "stage_cold", 0, n));
    if tree_fs {
        rows.push(Row::new(shape.name, "stage_second", 0, n));
    }
    rows.push(Row::new(shape.name, "stage_warm", 0, n));
    if loaded {
        rows.push(Row::new(shape.name, "hardlink_loaded", 1, n));
        if env.reflink {
            rows.push(Row::new(shape.name, "reflink_loaded", 1, n));
        }
        if tree_fs {
            rows.push(Row::new(shape.name, "snapshot_loaded", 1, n));
        }
        rows.push(Row::new(shape.name, "stage_warm_loaded", 0, n));
    }
    let mut ctx = Ctx {
        args,
        shape: shape.name,
        man,
        src,
        dst,
        digest,
        snap_src: None,
        cas,
        rows,
        recording: false,
        seq: 0,
        load_bytes: 0,
        load_secs: 0.0,
    };

    // Warm-up: nothing recorded.
    let w = warm_up(&mut ctx, &caches.warm, tree_fs)?;
    if let Some((st, _)) = &caches.loaded {
        warm_up(&mut ctx, st, tree_fs)?;
    }
    if tree_fs {
        let root = tree::load_directory(&cache_warm, &ctx.digest, "")?.context("root Directory")?;
        let sdk = root
            .directories
            .first()
            .context("root has no subdirectory")?;
        let d = Digest::from_opt_proto(sdk.digest.as_ref(), "sdk")?;
        let entry = cache_warm.root().join("subtrees").join(d.file_name());
        ctx.snap_src = entry.exists().then_some(entry);
    }
    if ctx.snap_src.is_none() {
        ctx.rows.retain(|r| !r.method.starts_with("snapshot"));
    }
    let mut units: Vec<Unit> = raws.iter().map(|m| Unit::Raw(*m)).collect();
    if ctx.snap_src.is_some() {
        units.push(Unit::Snapshot);
    }
    units.extend([Unit::Cold, Unit::Warm]);
    if loaded {
        units.push(Unit::Loaded);
    }
    for u in &units {
        if !matches!(u, Unit::Raw(Raw::Copy) | Unit::Warm) {
            run_unit(&mut ctx, &caches, *u, 0)?;
        }
    }
    eprintln!(
        "bench: {}: setup and warm-up {:.1} s ({w} warm-up stage(s); {})",
        ctx.shape,
        t_setup.elapsed().as_secs_f64(),
        if tree_fs {
            "tree clone: snapshot"
        } else {
            "no tree clone"
        }
    );

    ctx.recording = true;
    let t = Instant::now();
    for rep in 0..args.runs {
        let mut order = units.clone();
        order.rotate_left(rep % units.len());
        for u in order {
            if u == Unit::Raw(Raw::Copy) && rep >= args.copy_runs {
                continue;
            }
            run_unit(&mut ctx, &caches, u, rep)?;
        }
        if rep + 1 >= args.min_runs && t.elapsed().as_secs_f64() > args.budget {
            break;
        }
    }
    if ctx.load_secs > 0.0 {
        let rate = ctx.load_bytes as f64 / (1 << 20) as f64 / ctx.load_secs;
        for r in ctx.rows.iter_mut().filter(|r| r.is_loaded()) {
            r.load_mib_s = Some(rate);
        }
    }
    Ok(ctx.rows)
}

fn sweep_shape(args: &BenchArgs, env: &Env, shape: &Shape, dir: &Path) -> Result<Vec<Row>> {
    let src = dir.join("src");
    let man = shape.generate(&src)?;
    let dst = dir.join("dst");
    std::fs::create_dir(&dst)?;
    raw::syncfs(dir)?;
    let mut methods = vec![Raw::Hardlink];
    if env.reflink {
        methods.push(Raw::Reflink);
    }
    let combos: Vec<(Raw, usize)> = methods
        .iter()
        .flat_map(|m| args.sweep_threads.iter().map(move |t| (*m, *t)))
        .collect();
    let n = man.files.len();
    let rows = combos
        .iter()
        .map(|(m, t)| Row::new(shape.name, m.name(), *t, n))
        .collect();
    let mut ctx = Ctx {
        args,
        shape: shape.name,
        man,
        src,
        dst,
        digest: Digest::default(),
        snap_src: None,
        cas: None,
        rows,
        recording: false,
        seq: 0,
        load_bytes: 0,
        load_secs: 0.0,
    };
    for (m, t) in &combos {
        ctx.raw(*m, m.name(), *t)?;
        ctx.quiet()?;
    }
    ctx.recording = true;
    let t0 = Instant::now();
    for rep in 0..args.runs {
        let mut order = combos.clone();
        order.rotate_left(rep % combos.len());
        for (m, t) in order {
            ctx.raw(m, m.name(), t)?;
            ctx.quiet()?;
        }
        if rep + 1 >= args.min_runs && t0.elapsed().as_secs_f64() > args.budget {
            break;
        }
    }
    Ok(ctx.rows)
}
