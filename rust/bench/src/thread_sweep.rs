//! `--parallel-sweep`: raw hardlink and reflink only, at each of `--sweep-threads`, in
//! rotating order per repetition (the data for a parallel stager's in-flight cap).

use crate::args::BenchArgs;
use crate::fdops;
use crate::machine::Env;
use crate::raw::Raw;
use crate::row::Row;
use crate::shapes::Shape;
use crate::timing::Ctx;
use anyhow::Result;
use clonestage_engine::Digest;
use std::path::Path;
use std::time::Instant;

/// Time `shape`'s raw per-file methods at each thread count; the rows with their samples.
pub fn sweep_shape(args: &BenchArgs, env: &Env, shape: &Shape, dir: &Path) -> Result<Vec<Row>> {
    let src = dir.join("src");
    let man = shape.generate(&src)?;
    let dst = dir.join("dst");
    std::fs::create_dir(&dst)?;
    fdops::syncfs(dir)?;
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
