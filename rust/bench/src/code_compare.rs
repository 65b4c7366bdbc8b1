//! `clonestage bench --preserve-inodes-compare`: the cost of `--preserve-inodes macho` against
//! `none` (issue 24's target: within noise on XFS for trees with a few Mach-O files), side by
//! side in one run. Each shape's tree gets four Mach-O code files beside its `sdk/` (the
//! worker tool, two universal dylibs, a macro plugin: what a SwiftCompile runs), all ingested
//! into one cache; two stagers on that cache differ only in their code policy (`macho` links
//! code in the root: minimum link age zero, as on Linux), and a second `none` stager gives the
//! noise floor (A/A). Per repetition, in an order rotating by one: a cold stage by each (a
//! fresh stager, the subtree cache emptied) and a warm stage by each long-lived stager, plus,
//! for `macho`, the check after the action of the inodes it linked
//! (`StagedRoot::check_inputs`). Reported: medians, minima, and the median of the
//! per-repetition ratios to `none` of `none2` (what noise alone gives) and of `macho`.

use crate::args::BenchArgs;
use crate::caches::{reset_subtrees, setup};
use crate::fdops;
use crate::shapes::Shape;
use anyhow::{Context, Result};
use clonestage_engine::stage::{CodePolicy, PreserveInodes};
use clonestage_engine::tree::{self, IngestOptions};
use clonestage_engine::{Digest, StageRequest, Stager};
use std::path::Path;
use std::time::{Duration, Instant};

/// A little-endian 64-bit thin Mach-O image of `filetype` (<mach-o/loader.h>), `len` bytes.
fn thin(filetype: u32, len: usize, seed: u8) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    v[..4].copy_from_slice(&0xfeed_facf_u32.to_le_bytes());
    v[4..8].copy_from_slice(&0x0100_000c_u32.to_le_bytes());
    v[12..16].copy_from_slice(&filetype.to_le_bytes());
    v
}

/// A universal binary of two thin images, each at a 16 KiB-aligned offset (<mach-o/fat.h>).
fn universal(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&0xcafe_babe_u32.to_be_bytes());
    out.extend_from_slice(&2u32.to_be_bytes());
    let second = (16384 + a.len()).div_ceil(16384) * 16384;
    for (offset, s) in [(16384usize, a), (second, b)] {
        out.extend_from_slice(&[0u8; 8]);
        out.extend_from_slice(&(offset as u32).to_be_bytes());
        out.extend_from_slice(&(s.len() as u32).to_be_bytes());
        out.extend_from_slice(&14u32.to_be_bytes());
    }
    out.resize(16384, 0);
    out.extend_from_slice(a);
    out.resize(second, 0);
    out.extend_from_slice(b);
    out
}

/// The four code files, written under `src` beside the shape's `sdk/`.
fn add_code(src: &Path) -> Result<()> {
    let files = [
        ("tools/bin/worker", thin(0x2, 2 << 20, 1), true),
        (
            "frameworks/libA.dylib",
            universal(&thin(0x6, 600 << 10, 2), &thin(0x6, 500 << 10, 3)),
            false,
        ),
        (
            "frameworks/libB.dylib",
            universal(&thin(0x6, 300 << 10, 4), &thin(0x6, 250 << 10, 5)),
            false,
        ),
        ("plugins/Macros", thin(0x8, 1 << 20, 6), true),
    ];
    for (rel, data, exec) in files {
        let p = src.join(rel);
        std::fs::create_dir_all(p.parent().expect("nested"))?;
        std::fs::write(&p, data).with_context(|| format!("write {}", p.display()))?;
        use std::os::unix::fs::PermissionsExt;
        let mode = if exec { 0o555 } else { 0o444 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

#[derive(Default, Clone)]
struct Samples {
    ms: Vec<f64>,
}

impl Samples {
    fn median(&self) -> f64 {
        median(&self.ms)
    }

    fn min(&self) -> f64 {
        self.ms.iter().copied().fold(f64::INFINITY, f64::min)
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Stage `root` once into `dst` with `st`; the time, and what the stage hardlinked (checked).
fn stage_once(
    st: &Stager,
    root: Digest,
    dst: &Path,
    n: &mut u64,
) -> Result<(Duration, u64, Duration)> {
    *n += 1;
    let dest = dst.join(format!("r{n}"));
    let t = Instant::now();
    let s = st
        .stage(&StageRequest {
            root,
            dest: dest.clone(),
            ..Default::default()
        })
        .with_context(|| format!("stage into {}", dest.display()))?;
    let took = t.elapsed();
    st.ledger().flush();
    let t = Instant::now();
    let bad = s.check_inputs();
    let check = t.elapsed();
    anyhow::ensure!(bad.is_empty(), "untouched inputs flagged: {bad:?}");
    let linked = s.counters.code_linked;
    drop(s);
    clonestage_engine::remove::remove_tree(&dest)?;
    fdops::syncfs(dst)?;
    Ok((took, linked, check))
}

/// The arms: a second `none` stager is the noise floor (A/A) the macho ratio is read against.
const ARMS: [(&str, bool); 3] = [("none", false), ("none2", false), ("macho", true)];

/// The A/B run of one shape; the report's lines (a table and JSON).
pub fn compare_shape(args: &BenchArgs, shape: &Shape, dir: &Path, fs: &str) -> Result<Vec<String>> {
    let (_, src, dst, cache, _) = setup(shape, dir)?;
    add_code(&src)?;
    let root = tree::ingest_path(&cache, &src, IngestOptions::default())?;
    let macho = CodePolicy::new(PreserveInodes::Macho).with_min_link_age(Duration::ZERO);
    let make = |code: bool| {
        let st = Stager::new(cache.clone());
        if code {
            st.with_code_policy(macho)
        } else {
            st
        }
    };
    let warm: Vec<Stager> = ARMS.iter().map(|a| make(a.1)).collect();
    let mut n = 0;
    // Warm-up: the long-lived stagers until their subtree cache (where there is one) is built.
    for _ in 0..3 {
        for st in &warm {
            stage_once(st, root, &dst, &mut n)?;
        }
    }
    let mut cold: Vec<Samples> = ARMS.iter().map(|_| Samples::default()).collect();
    let mut hot: Vec<Samples> = ARMS.iter().map(|_| Samples::default()).collect();
    let mut check = Samples::default();
    let mut linked = vec![0u64; ARMS.len()];
    let t0 = Instant::now();
    for rep in 0..args.runs {
        let mut order: Vec<usize> = (0..ARMS.len()).collect();
        order.rotate_left(rep % ARMS.len());
        for &i in &order {
            reset_subtrees(&cache)?;
            let st = make(ARMS[i].1);
            let (d, l, _) = stage_once(&st, root, &dst, &mut n)?;
            cold[i].ms.push(d.as_secs_f64() * 1e3);
            linked[i] = l;
        }
        // The warm stagers' subtree entries were removed with the cold runs: build them again
        // (not timed), then time one warm stage each.
        for st in &warm {
            stage_once(st, root, &dst, &mut n)?;
            stage_once(st, root, &dst, &mut n)?;
        }
        for &i in &order {
            let (d, _, c) = stage_once(&warm[i], root, &dst, &mut n)?;
            hot[i].ms.push(d.as_secs_f64() * 1e3);
            if ARMS[i].1 {
                check.ms.push(c.as_secs_f64() * 1e3);
            }
        }
        if rep + 1 >= args.min_runs && t0.elapsed().as_secs_f64() > args.budget {
            break;
        }
    }
    anyhow::ensure!(
        linked == [0, 0, 4],
        "code files linked per arm: {linked:?} (want 0, 0, 4)"
    );
    let mut lines = Vec::new();
    let files = shape.files + 4;
    for (label, s) in [("cold", &cold), ("warm", &hot)] {
        let paired = |i: usize| {
            let r: Vec<f64> = s[i]
                .ms
                .iter()
                .zip(&s[0].ms)
                .map(|(x, base)| x / base)
                .collect();
            median(&r)
        };
        let (aa, macho) = (paired(1), paired(2));
        for (i, (name, _)) in ARMS.iter().enumerate() {
            lines.push(format!(
                "{:<12} {label:<5} {name:<6} median {:>8.2} ms  min {:>8.2} ms  runs {:>3}{}",
                shape.name,
                s[i].median(),
                s[i].min(),
                s[i].ms.len(),
                if i > 0 {
                    format!("  /none paired median {:.3}", paired(i))
                } else {
                    String::new()
                }
            ));
        }
        lines.push(
            serde_json::json!({
                "shape": shape.name, "fs": fs, "files": files, "stage": label,
                "none_median_ms": s[0].median(), "none2_median_ms": s[1].median(),
                "macho_median_ms": s[2].median(), "none_min_ms": s[0].min(),
                "none2_min_ms": s[1].min(), "macho_min_ms": s[2].min(),
                "none2_over_none_paired_median": aa, "macho_over_none_paired_median": macho,
                "runs": s[0].ms.len(),
            })
            .to_string(),
        );
    }
    lines.push(format!(
        "{:<12} check after the action of the 4 linked code inodes (macho warm): median {:.3} ms",
        shape.name,
        check.median()
    ));
    Ok(lines)
}
