//! The comparison of one shape (`bench_shape`): every method as a unit, warmed up once, then
//! timed in repetitions whose order rotates by one each time (drift and neighbours' noise hit
//! every method alike), until `--runs`, or `--budget` once `--min-runs` are done. The loaded
//! unit times its methods under one background write load (`load.rs`).

use crate::args::{BenchArgs, Loaded};
use crate::caches::{link_cache, reset_subtrees, setup, Caches};
use crate::cas_source::CasSource;
use crate::load;
use crate::machine::Env;
use crate::raw::Raw;
use crate::row::Row;
use crate::shapes::Shape;
use crate::timing::Ctx;
use anyhow::{Context, Result};
use clonestage_engine::tree;
use clonestage_engine::{Digest, Stager};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long the background writer runs after a sync before each loaded run is timed.
const LOAD_SETTLE: Duration = Duration::from_millis(300);

/// What one repetition times, each in turn.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Unit {
    Raw(Raw),
    Snapshot,
    /// stage_cold, then (tree-clone filesystems) stage_second, with one fresh stager.
    Cold,
    Warm,
    /// Every `_loaded` method, under one background write load.
    Loaded,
    /// stage_warm_pooled, recycle_check, stage_noop_recycle (`Ctx::pooled`).
    Pooled,
}

/// Make `sdk/` hot for the pooled stager (two sightings) and build its ready copies.
fn warm_up_pool(ctx: &mut Ctx, stager: &Stager) -> Result<()> {
    for _ in 0..2 {
        ctx.stage(stager, "stage_warm")?;
    }
    let pool = stager.pool().context("a pooled stager")?;
    while pool.wanted() > 0 {
        stager.build_pooled()?;
    }
    anyhow::ensure!(pool.ready() > 0, "the pool built no copy of sdk/");
    // A fresh copy is lent once it is older than a clock tick.
    std::thread::sleep(Duration::from_millis(100));
    Ok(())
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

/// Time one unit once (recorded only once `ctx.recording`); `rep` rotates the loaded order.
fn time_unit(ctx: &mut Ctx, caches: &Caches, unit: Unit, rep: usize) -> Result<()> {
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
            ctx.noop_remove(&caches.warm)?;
            ctx.quiet()?;
        }
        Unit::Pooled => {
            ctx.pooled(&caches.pooled)?;
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

/// Every method on `shape`, interleaved; the rows with their samples.
pub fn bench_shape(args: &BenchArgs, env: &Env, shape: &Shape, dir: &Path) -> Result<Vec<Row>> {
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
    let pooled = Stager::new(link_cache(cache_warm.root(), &dir.join("cache-pooled"))?)
        .with_pool(Default::default())?;
    let caches = Caches {
        cold,
        warm,
        loaded: loaded_stager,
        pooled,
        tree_fs,
    };

    let mut raws = vec![Raw::Hardlink, Raw::HardlinkCas, Raw::HardlinkCasTree];
    if env.reflink {
        raws.extend([Raw::Reflink, Raw::ReflinkCas, Raw::ReflinkCasTree]);
    }
    raws.extend([Raw::Copy, Raw::Symlink]);
    let cas = Some(CasSource::open(&cache_warm, &man, &digest)?);
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
    for m in [
        "stage_noop_remove",
        "stage_warm_pooled",
        "recycle_check",
        "stage_noop_recycle",
    ] {
        rows.push(Row::new(shape.name, m, 0, n));
    }
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
    warm_up_pool(&mut ctx, &caches.pooled)?;
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
    units.extend([Unit::Cold, Unit::Warm, Unit::Pooled]);
    if loaded {
        units.push(Unit::Loaded);
    }
    for u in &units {
        if !matches!(u, Unit::Raw(Raw::Copy) | Unit::Warm) {
            time_unit(&mut ctx, &caches, *u, 0)?;
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
            time_unit(&mut ctx, &caches, u, rep)?;
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
