//! One timed run of one method, recorded into its row (`Ctx`): a raw method (`raw.rs`), a
//! btrfs snapshot, or the engine's stage (`Stager::stage`, with its counters, the running
//! estimates it decided with, and after a warm stage that hardlinked the `stage_check` row).
//! Each run gets a fresh destination, which is removed afterwards (not timed).

use crate::args::BenchArgs;
use crate::cas_source::CasSource;
use crate::fdops;
use crate::raw::{self, Raw};
use crate::row::Row;
use crate::shapes::Manifest;
use anyhow::{Context, Result};
use clonestage_engine::stats::Counters;
use clonestage_engine::{Digest, StageRequest, Stager};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The state of one shape's measurement: its tree, where runs go, and the rows so far.
pub struct Ctx<'a> {
    pub args: &'a BenchArgs,
    pub shape: &'static str,
    pub man: Manifest,
    pub src: PathBuf,
    pub dst: PathBuf,
    pub digest: Digest,
    /// The cached `sdk` subvolume that raw `snapshot` clones (btrfs, after warm-up).
    pub snap_src: Option<PathBuf>,
    /// The blobs the raw `*_cas` methods link or clone from (the warm cache's).
    pub cas: Option<CasSource>,
    pub rows: Vec<Row>,
    pub recording: bool,
    pub seq: usize,
    /// Bytes the background load wrote during recorded loaded phases, and their duration.
    pub load_bytes: u64,
    pub load_secs: f64,
}

impl Ctx<'_> {
    pub fn row(&mut self, method: &str) -> Option<&mut Row> {
        self.rows.iter_mut().find(|r| r.method == method)
    }

    pub fn dest(&mut self, method: &str) -> PathBuf {
        self.seq += 1;
        self.dst.join(format!("{method}-{}", self.seq))
    }

    pub fn record(&mut self, method: &str, d: Duration, c: Option<Counters>) {
        if !self.recording {
            return;
        }
        let row = self
            .row(method)
            .unwrap_or_else(|| panic!("bench row {method} not set up"));
        row.samples.push(d.as_secs_f64() * 1e3);
        row.counters.extend(c);
    }

    pub fn quiet(&self) -> Result<()> {
        fdops::syncfs(&self.dst).context("syncfs")
    }

    pub fn raw(&mut self, m: Raw, method: &str, threads: usize) -> Result<()> {
        let dest = self.dest(method);
        let cpu = thread_cpu_us();
        let d = raw::time_tree(m, &self.man, &self.src, self.cas.as_ref(), &dest, threads)
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

    pub fn snapshot(&mut self, method: &str) -> Result<()> {
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

    pub fn stage(&mut self, stager: &Stager, method: &str) -> Result<Counters> {
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

impl Ctx<'_> {
    /// The per-file loop the pooled one replaces (`stage_noop_remove`): stage with `stager`
    /// (no pool), run `/bin/true` in the root, remove the root, all timed.
    pub fn noop_remove(&mut self, stager: &Stager) -> Result<()> {
        let method = "stage_noop_remove";
        let dest = self.dest(method);
        let req = StageRequest {
            root: self.digest,
            dest: dest.clone(),
            ..Default::default()
        };
        let t = Instant::now();
        let staged = stager
            .stage(&req)
            .with_context(|| format!("{method} into {}", dest.display()))?;
        noop(&dest)?;
        let c = staged.counters.clone();
        drop(staged);
        clonestage_engine::remove::remove_tree(&dest)?;
        let d = t.elapsed();
        stager.ledger().flush();
        self.record(method, d, Some(c));
        Ok(())
    }

    /// With a pooled stager (its copy of `sdk/` ready): `stage_warm_pooled` (the stage that
    /// takes it), `recycle_check` (the proof that it is untouched and the rename back), and
    /// `stage_noop_recycle` (stage, run `/bin/true` in the root, recycle) as one loop.
    pub fn pooled(&mut self, stager: &Stager) -> Result<()> {
        let pool = stager.pool().context("a pooled stager")?.clone();
        for method in ["stage_warm_pooled", "stage_noop_recycle"] {
            let dest = self.dest(method);
            let req = StageRequest {
                root: self.digest,
                dest: dest.clone(),
                ..Default::default()
            };
            let t = Instant::now();
            let mut staged = stager
                .stage(&req)
                .with_context(|| format!("{method} into {}", dest.display()))?;
            let stage_d = t.elapsed();
            anyhow::ensure!(
                staged.counters.pool_hits > 0,
                "{method}: no ready copy was taken (pool: {} ready)",
                pool.ready()
            );
            if method == "stage_noop_recycle" {
                noop(&dest)?;
            }
            let t_check = Instant::now();
            for l in staged.take_loans() {
                pool.recycle(stager.cache(), &dest, l).map_err(|e| {
                    anyhow::anyhow!("{method}: an untouched copy was discarded: {e:?}")
                })?;
            }
            let check_d = t_check.elapsed();
            let c = staged.counters.clone();
            drop(staged);
            stager.ledger().flush();
            if method == "stage_warm_pooled" {
                self.record(method, stage_d, Some(c));
                self.record("recycle_check", check_d, None);
            } else {
                self.record(method, t.elapsed(), Some(c));
            }
            clonestage_engine::remove::remove_tree(&dest)?;
        }
        Ok(())
    }
}

/// The no-op action: `/bin/true` run in the root.
fn noop(root: &std::path::Path) -> Result<()> {
    let st = std::process::Command::new("/bin/true")
        .current_dir(root)
        .status()
        .context("run /bin/true")?;
    anyhow::ensure!(st.success(), "/bin/true failed");
    Ok(())
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
        target: "clonestage::bench",
        method,
        wall_us = wall.as_micros() as u64,
        cpu_us = thread_cpu_us().saturating_sub(cpu_before),
        "timed run"
    );
}
