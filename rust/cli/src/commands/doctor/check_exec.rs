//! `exec`: what running a staged executable costs on this machine, staged by clone against
//! staged by hardlink to the cache's inode, and how often macOS kills a link. The executable
//! is this clonestage binary itself (put into the cache; run as `--version`), a signed
//! Mach-O like the tools Bazel runs (rules_swift's worker, apple_support's wrapped_clang).
//!
//! - clone: a fresh clone per run, so every run is a first run of a new inode (on macOS, a new
//!   code-signature verification and malware scan: the cost `--preserve-inodes macho` saves);
//! - aged link: links to the cache's inode (run once first, as after the first action), made
//!   ahead and run once older than the minimum link age (what the pool lends);
//! - renamed link: an aged link whose directory was renamed just before the run (what the
//!   pool's take does to a copy);
//! - fresh link: a link run the moment it is made (what macOS intermittently SIGKILLs:
//!   jdx/mr-boxington PR 134; never done by the server while the minimum age is not zero).
//!
//! It reports the median first-run time of each, the SIGKILLs of each kind, whether a trusted
//! developer tool exempts this session (`platform::developer_tool_status`), and which
//! `--preserve-inodes` setting wins here. It fails when a staged executable cannot run at all
//! from the cache's volume (e.g. mounted noexec), or when aged or renamed links were killed
//! while this environment asks the server for `macho` (`CLONESTAGE_PRESERVE_INODES`).
//! Skipped where the cache's filesystem has no clones: every input is a hardlink already.

use super::report::Outcome;
use super::{ms, platform, Context};
use clonestage_engine::platform as fsplat;
use clonestage_engine::stage::{CodePolicy, PreserveInodes};
use clonestage_engine::{MethodPreference, StageRequest, Stager};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Clones timed for the first-run cost (each a new inode: a full verification on macOS).
const CLONE_RUNS: u32 = 30;
/// A first run this much slower by clone than by link is the scan `macho` saves.
const SCAN_MATTERS: Duration = Duration::from_millis(20);

/// The runs of one kind of executable.
#[derive(Default)]
struct Runs {
    times: Vec<Duration>,
    killed: u32,
    /// The first failure that was not a signal (cannot exec, exit status).
    broken: Option<String>,
}

impl Runs {
    fn exec(&mut self, exe: &Path) {
        let t = Instant::now();
        let r = std::process::Command::new(exe)
            .arg("--version")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        let took = t.elapsed();
        match r {
            Ok(s) if s.success() => self.times.push(took),
            Ok(s) if s.signal() == Some(libc::SIGKILL) => self.killed += 1,
            Ok(s) => {
                self.broken
                    .get_or_insert(format!("{} exited with {s}", exe.display()));
            }
            Err(e) => {
                self.broken
                    .get_or_insert(format!("cannot run {}: {e}", exe.display()));
            }
        }
    }

    fn median(&self) -> Option<Duration> {
        let mut t = self.times.clone();
        t.sort();
        t.get(t.len() / 2).copied()
    }

    fn said(&self, what: &str) -> String {
        let runs = self.times.len() as u32 + self.killed;
        match self.median() {
            Some(m) => format!(
                "{what} {} (median of {runs}, {} killed)",
                ms(m),
                self.killed
            ),
            None => format!(
                "{what}: no run completed ({} killed of {runs})",
                self.killed
            ),
        }
    }
}

pub fn check(ctx: &mut Context) -> Outcome {
    let Some(cache) = ctx.cache.clone() else {
        return Outcome::skip("no cache (see filesystem)");
    };
    if ctx.clones != Some(true) {
        return Outcome::skip(
            "the cache's filesystem has no clones: every input is staged as a hardlink to the cache's inode already, so there is nothing to compare",
        );
    }
    match measure(ctx, &cache) {
        Ok(o) => o,
        Err(e) => Outcome::fail(e),
    }
}

fn measure(
    ctx: &mut Context,
    cache: &std::sync::Arc<clonestage_engine::Cache>,
) -> Result<Outcome, String> {
    let dir = ctx.scratch("exec").map_err(|e| format!("{e:#}"))?;
    let me = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    // A one-file tree holding this binary, staged by hardlink: `inode/clonestage` is then the
    // cache's own 0o555 inode for it (the one `macho` links).
    let src = dir.join("src");
    std::fs::create_dir(&src).map_err(|e| format!("mkdir {}: {e}", src.display()))?;
    std::fs::copy(&me, src.join("clonestage"))
        .map_err(|e| format!("copy {}: {e}", me.display()))?;
    let root = clonestage_engine::tree::ingest_path(cache, &src, Default::default())
        .map_err(|e| format!("ingest {}: {e}", src.display()))?;
    let st = Stager::new(cache.clone());
    let inode = dir.join("inode");
    st.stage(&StageRequest {
        root,
        dest: inode.clone(),
        method: MethodPreference::Hardlink,
        ..Default::default()
    })
    .map_err(|e| format!("stage {} by hardlink: {e}", inode.display()))?;
    let target = inode.join("clonestage");
    let blob = cache.blob_path(&clonestage_engine::Digest::of_bytes(
        &std::fs::read(&me).map_err(|e| format!("read {}: {e}", me.display()))?,
    ));
    let n = ctx.exec_runs.max(1);
    // The age the server would use: CLONESTAGE_MACHO_LINK_AGE_MS as `serve` reads it, else
    // the platform's.
    let min_age = std::env::var("CLONESTAGE_MACHO_LINK_AGE_MS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(CodePolicy::new(PreserveInodes::Macho).min_link_age);

    let mut warm = Runs::default();
    warm.exec(&target);
    if let Some(b) = warm.broken {
        return Ok(Outcome::fail(format!(
            "a staged executable cannot run from the cache's volume ({b}): is it mounted noexec?"
        )));
    }
    let clones = dir.join("clones");
    let mut cloned = Runs::default();
    std::fs::create_dir(&clones).map_err(|e| format!("mkdir {}: {e}", clones.display()))?;
    let clones_dir =
        fsplat::Dir::open(&clones).map_err(|e| format!("open {}: {e}", clones.display()))?;
    for i in 0..CLONE_RUNS.min(n) {
        let name = fsplat::cstr(format!("c{i}")).expect("no NUL");
        fsplat::clone_file(&blob, &clones_dir, &name, 0o555)
            .map_err(|e| format!("clone {} into {}: {e}", blob.display(), clones.display()))?;
        cloned.exec(&clones.join(format!("c{i}")));
    }
    let aged = links(&dir.join("aged"), &target, n, false)?;
    let renamed = links(&dir.join("renamed"), &target, n, true)?;
    // Made ahead, then run once older than the minimum age (as the pool lends them).
    std::thread::sleep(min_age);
    let mut aged_runs = Runs::default();
    for p in &aged {
        aged_runs.exec(p);
    }
    let mut renamed_runs = Runs::default();
    for (i, p) in renamed.iter().enumerate() {
        let from = p.parent().expect("in its own dir");
        let to = dir.join("renamed").join(format!("taken{i}"));
        std::fs::rename(from, &to).map_err(|e| format!("rename {}: {e}", from.display()))?;
        renamed_runs.exec(&to.join("clonestage"));
    }
    let fresh = dir.join("fresh");
    std::fs::create_dir(&fresh).map_err(|e| format!("mkdir {}: {e}", fresh.display()))?;
    let mut fresh_runs = Runs::default();
    for i in 0..n {
        let p = fresh.join(format!("f{i}"));
        std::fs::hard_link(&target, &p).map_err(|e| format!("link {}: {e}", p.display()))?;
        fresh_runs.exec(&p);
    }
    for r in [&cloned, &aged_runs, &renamed_runs, &fresh_runs] {
        if let Some(b) = &r.broken {
            return Ok(Outcome::fail(format!(
                "a staged executable did not run: {b}"
            )));
        }
    }
    Ok(verdict(
        &cloned,
        &aged_runs,
        &renamed_runs,
        &fresh_runs,
        min_age,
    ))
}

/// `n` links to `target` under `dir`, each in a directory of its own (`renamed`) or side by
/// side; returns their paths.
fn links(dir: &Path, target: &Path, n: u32, own_dirs: bool) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    (0..n)
        .map(|i| {
            let p = if own_dirs {
                let d = dir.join(format!("copy{i}"));
                std::fs::create_dir(&d).map_err(|e| format!("mkdir {}: {e}", d.display()))?;
                d.join("clonestage")
            } else {
                dir.join(format!("a{i}"))
            };
            std::fs::hard_link(target, &p).map_err(|e| format!("link {}: {e}", p.display()))?;
            Ok(p)
        })
        .collect()
}

/// The report, and which `--preserve-inodes` setting wins here.
fn verdict(cloned: &Runs, aged: &Runs, renamed: &Runs, fresh: &Runs, min_age: Duration) -> Outcome {
    let scan = match (cloned.median(), aged.median()) {
        (Some(c), Some(l)) => c.saturating_sub(l),
        _ => Duration::ZERO,
    };
    let aged_safe = aged.killed == 0 && renamed.killed == 0;
    let wins = if !platform::APPLE {
        format!(
            "none wins here: {} verifies no code per inode and runs no Mach-O, the only files --preserve-inodes links (a clone's first run still cost {} more than a link's)",
            platform::NAME,
            ms(scan)
        )
    } else if !aged_safe {
        "none wins here: links old enough to run were still killed".to_string()
    } else if scan >= SCAN_MATTERS {
        format!(
            "macho wins here: each cloned executable costs {} more on its first run",
            ms(scan)
        )
    } else {
        format!(
            "none wins here: a clone's first run costs only {} more",
            ms(scan)
        )
    };
    let exempt = match platform::developer_tool_status() {
        Some(s) if s == "authorized" => "; this session is a trusted developer tool (scans skipped)".to_string(),
        Some(s) => format!(
            "; developer tool status: {s} (scans apply: allow your terminal under System Settings > Privacy & Security > Developer Tools, or `spctl developer-mode enable-terminal`)"
        ),
        None => String::new(),
    };
    let detail = format!(
        "first run: {}; {}; {}; {} (links aged {}){exempt}; {wins}",
        cloned.said("clone"),
        aged.said("aged link"),
        renamed.said("aged link, directory renamed"),
        fresh.said("fresh link"),
        ms(min_age),
    );
    let asked = std::env::var("CLONESTAGE_PRESERVE_INODES").unwrap_or_default();
    if !aged_safe && asked.trim() == "macho" {
        return Outcome::fail(format!(
            "{detail}; but CLONESTAGE_PRESERVE_INODES=macho asks the server to run such links: set it to none"
        ));
    }
    Outcome::pass(detail)
}
