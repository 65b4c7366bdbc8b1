//! `clonestage doctor [--cache DIR] [--bazel PATH] [--json]`: checks, on the user's own
//! machine, what CI cannot: where the cache is and how staging works there
//! (`check_filesystem`), a trial stage against the permission contract (`check_stage`), what
//! running a staged executable costs by clone and by hardlink and how often fresh or aged
//! links are killed (`check_exec`), whether the workspace's Xcode config keeps Apple actions
//! away from clonestage (`check_routing`), the server (`check_server`), a tiny build with the
//! user's Bazel through it (`check_bazel`) and the Apple environment the server resolves
//! (`check_xcode`). Each check is one file; what differs between macOS and Linux is in
//! `platform/`. Exit 1 when any check fails.
//!
//! The doctor leaves nothing behind but blobs in the cache: its scratch directory
//! (`<cache>/tmp/<pid>-doctor`, which a later sweep would also take) is removed, and a server
//! it started itself is stopped.

mod check_bazel;
mod check_exec;
mod check_filesystem;
mod check_routing;
mod check_server;
mod check_stage;
mod check_xcode;
mod platform;
mod report;

use clonestage_engine::Cache;
use report::{Checked, Outcome, Status};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

/// What `clonestage doctor` was asked.
pub struct DoctorArgs {
    pub cache: PathBuf,
    /// `--bazel PATH`; None: `bazel` on PATH.
    pub bazel: Option<PathBuf>,
    pub json: bool,
    /// Runs per kind of executable in the exec check; None: the platform's default.
    pub exec_runs: Option<u32>,
}

/// A server the checks use: found running, or started by the doctor (then stopped at the end).
pub struct Server {
    pub socket: PathBuf,
    pub tcp_port: u16,
    pub tcp_bazelrc: PathBuf,
    /// The doctor's own `clonestage serve`, when it started one.
    pub started: Option<std::process::Child>,
}

/// A Bazel's version as it says it, and its major release when known.
#[derive(Debug, Clone)]
pub struct BazelVersion {
    pub text: String,
    pub major: Option<u32>,
}

/// What the checks share, in the order they run.
pub struct Context {
    pub cache_dir: PathBuf,
    /// Opened by the filesystem check (None if it could not be).
    pub cache: Option<Arc<Cache>>,
    /// Whether the cache's filesystem clones files (the filesystem check says).
    pub clones: Option<bool>,
    /// `--bazel`, else `bazel` on PATH.
    pub bazel: Option<PathBuf>,
    bazel_version: Option<Option<BazelVersion>>,
    pub exec_runs: u32,
    pub server: Option<Server>,
    /// The log of a server the doctor started.
    pub server_log: Option<PathBuf>,
    scratch: Option<PathBuf>,
}

impl Context {
    /// `<cache>/tmp/<pid>-doctor-<what>`, made empty; removed with the others at the end.
    pub fn scratch(&mut self, what: &str) -> anyhow::Result<PathBuf> {
        use anyhow::Context as _;
        let top = match &self.scratch {
            Some(p) => p.clone(),
            None => {
                let p = self
                    .cache_dir
                    .join("tmp")
                    .join(format!("{}-doctor", std::process::id()));
                std::fs::create_dir_all(&p).with_context(|| format!("mkdir {}", p.display()))?;
                self.scratch = Some(p.clone());
                p
            }
        };
        let p = top.join(what);
        if p.exists() {
            clonestage_engine::remove::remove_tree(&p)?;
        }
        std::fs::create_dir(&p).with_context(|| format!("mkdir {}", p.display()))?;
        Ok(p)
    }

    /// What the checks' Bazel says it is (asked once); None: there is none, or it does not
    /// answer `--version`. An unstamped build (a distribution's, which says `no_version` or
    /// `development version`) is named by the package that installed it where the platform
    /// can tell (`platform::packaged_version`).
    pub fn bazel_version(&mut self) -> Option<BazelVersion> {
        if self.bazel_version.is_none() {
            let v = self.bazel.as_ref().and_then(|b| {
                let out = std::process::Command::new(b)
                    .arg("--version")
                    .stdin(std::process::Stdio::null())
                    .output()
                    .ok()?;
                let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
                if !out.status.success() || text.is_empty() {
                    return None;
                }
                Some(match crate::bazel::Version::parse(&text).map(|v| v.major) {
                    Some(m) => BazelVersion {
                        text,
                        major: Some(m),
                    },
                    None => match platform::packaged_version(b) {
                        Some((package, version)) => BazelVersion {
                            major: crate::bazel::Version::parse(&version).map(|v| v.major),
                            text: format!("{text} (unstamped; installed by {package} {version})"),
                        },
                        None => BazelVersion { text, major: None },
                    },
                })
            });
            self.bazel_version = Some(v);
        }
        self.bazel_version.clone().flatten()
    }

    fn cleanup(&mut self) {
        if let Some(mut child) = self.server.take().and_then(|s| s.started) {
            let _ = clonestage_server::client::stop(
                &self.cache_dir,
                std::time::Duration::from_secs(15),
            );
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(p) = self.scratch.take() {
            let _ = clonestage_engine::remove::remove_tree(&p);
        }
    }
}

/// One check: what it finds, given what the earlier ones found.
type Check = fn(&mut Context) -> Outcome;

/// The checks, in the order they run (later ones use what earlier ones found).
const CHECKS: [(&str, Check); 7] = [
    ("filesystem", check_filesystem::check),
    ("stage", check_stage::check),
    ("exec", check_exec::check),
    ("routing", check_routing::check),
    ("server", check_server::check),
    ("bazel", check_bazel::check),
    ("xcode", check_xcode::check),
];

pub fn doctor(a: DoctorArgs) -> anyhow::Result<ExitCode> {
    let bazel = a.bazel.or_else(|| find_on_path("bazel"));
    let mut ctx = Context {
        cache_dir: a.cache.clone(),
        cache: None,
        clones: None,
        bazel,
        bazel_version: None,
        exec_runs: a.exec_runs.unwrap_or(platform::EXEC_RUNS),
        server: None,
        server_log: None,
        scratch: None,
    };
    let mut done = Vec::new();
    for (name, check) in CHECKS {
        let t = Instant::now();
        let o = check(&mut ctx);
        let ms = t.elapsed().as_millis() as u64;
        if !a.json {
            eprintln!("doctor: {name}: {:?} ({ms} ms)", o.status);
        }
        done.push(Checked {
            name,
            status: o.status,
            detail: o.detail,
            ms,
        });
    }
    ctx.cleanup();
    if a.json {
        println!("{}", report::json(&done));
    } else {
        let header = format!(
            "clonestage doctor {} ({} {}; cache {})",
            clonestage_server::VERSION,
            platform::NAME,
            std::env::consts::ARCH,
            a.cache.display()
        );
        print!("{}", report::human(&done, &header));
    }
    Ok(if done.iter().any(|c| c.status == Status::Fail) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The first `name` on PATH that is an executable file.
fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The last `n` non-empty lines of `text`, joined with " | " (for details naming a failure).
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// Milliseconds, one decimal.
pub fn ms(d: std::time::Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// Whether `p` exists (for details that name a path the user gave).
pub fn exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}
