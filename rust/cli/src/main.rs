//! `clonestage`: the command line over the staging engine and the local REAPI endpoint.
//! Flags are defined once here with their docs; each command lives in `commands/`, the
//! launcher behind tools/bazel in `launch/`, what it knows of Bazel in `bazel/`, and where a
//! user's files go in `dirs`.

mod arg_groups;
mod bazel;
mod commands;
mod dirs;
mod launch;

use arg_groups::{CodeArgs, Method};
use clap::{Parser, Subcommand};
use clonestage_engine::stage::TreeLimits;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "clonestage",
    version,
    about = "Stage Bazel action inputs by clonefile/reflink/hardlink from a local cache"
)]
struct Cli {
    /// Cache directory [default: $CLONESTAGE_CACHE, else $XDG_CACHE_HOME/clonestage (Linux, when
    /// absolute), else ~/.cache/clonestage, or ~/Library/Caches/clonestage on macOS]
    #[arg(long, global = true, value_name = "DIR")]
    cache: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Put a file or directory tree into the cache; print its digest `<sha256>/<size>`.
    Ingest {
        path: PathBuf,
        /// Mark every file executable, as Bazel does for action inputs (matches Bazel's digest).
        #[arg(long)]
        all_executable: bool,
    },
    /// Materialize tree DIGEST at DEST, which must not exist.
    Stage {
        digest: String,
        dest: PathBuf,
        /// An output path relative to DEST whose parent directories must be writable (repeatable).
        #[arg(long = "output", value_name = "REL")]
        outputs: Vec<String>,
        /// Preferred method; fallbacks still happen (and are counted) where it cannot work.
        #[arg(long, value_enum, default_value = "auto")]
        method: Method,
        /// Accept symlinks with absolute targets.
        #[arg(long)]
        allow_absolute_symlinks: bool,
        /// Accept relative symlinks that climb out of the root.
        #[arg(long)]
        allow_escaping_symlinks: bool,
        /// Print the stage's own counters as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        code: CodeArgs,
    },
    /// Show counters kept across processes (per method, subtree cache, fallbacks, staging time).
    Stats {
        #[arg(long)]
        json: bool,
    },
    /// Re-hash every blob; exit 1 naming each corrupt one (they are quarantined).
    Verify,
    /// Evict least-recently-used blobs until the cache holds at most --max-size bytes.
    Gc {
        /// Bytes; K, M, G suffixes (powers of 1024) accepted.
        #[arg(long, value_parser = commands::parse_size)]
        max_size: u64,
    },
    /// Serve the Remote Execution API for Bazel on a unix socket and loopback TCP.
    Serve {
        /// Loopback TCP port [default: any free port].
        #[arg(long)]
        port: Option<u16>,
        /// Actions run in parallel [default: number of cores].
        #[arg(long)]
        jobs: Option<usize>,
        /// The clonestage-spawn wrapper [default: $CLONESTAGE_SPAWN, beside this binary, PATH].
        #[arg(long)]
        spawn: Option<PathBuf>,
        /// Refuse input roots with directories nested deeper than this (at most the default:
        /// the stager recurses per level on the server's 2 MiB threads).
        #[arg(long, default_value_t = TreeLimits::DEFAULT_MAX_DEPTH,
              value_parser = clap::value_parser!(u32).range(1..=TreeLimits::DEFAULT_MAX_DEPTH as i64))]
        max_tree_depth: u32,
        /// Refuse input roots of more entries (files, directories, symlinks) once expanded.
        #[arg(long, default_value_t = TreeLimits::DEFAULT_MAX_ENTRIES)]
        max_tree_entries: u64,
        /// Refuse input roots of more bytes of files once expanded; K, M, G suffixes.
        #[arg(long, value_parser = commands::parse_size, default_value = "64G")]
        max_tree_bytes: u64,
        /// Keep the cache within this many bytes (K, M, G, T suffixes, powers of 1024), evicting
        /// least-recently-used entries in the background [default: min(25% of the cache's
        /// filesystem, 64G)].
        #[arg(long, value_parser = commands::parse_size)]
        max_size: Option<u64>,
        /// Seconds between two looks at the cache's size (each stats every blob) [default: 30].
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        evict_every: Option<u64>,
        /// A team's REAPI cache behind this one: grpc://HOST:PORT (docs/upstream.md).
        #[arg(long, env = "CLONESTAGE_UPSTREAM")]
        upstream: Option<String>,
        /// The upstream's REAPI instance name.
        #[arg(long, env = "CLONESTAGE_UPSTREAM_INSTANCE", default_value = "")]
        upstream_instance: String,
        /// A file of `Header-Name: value` lines sent on every upstream call (a regular file of
        /// this uid, mode 0600 or 0400; never logged).
        #[arg(long, env = "CLONESTAGE_UPSTREAM_AUTH_FILE")]
        upstream_auth_file: Option<PathBuf>,
        /// A credential helper (Bazel's protocol: `PROG get`) whose headers go on upstream calls.
        #[arg(long, env = "CLONESTAGE_UPSTREAM_AUTH_HELPER")]
        upstream_auth_helper: Option<PathBuf>,
        /// Which results go upstream: none, executed (results this server ran) or all (also
        /// results Bazel sends with UpdateActionResult).
        #[arg(long, env = "CLONESTAGE_UPSTREAM_WRITE", default_value = "executed",
              value_parser = |s: &str| clonestage_server::WriteMode::parse(s).map_err(|e| e.to_string()))]
        upstream_write: clonestage_server::WriteMode,
        /// Milliseconds one upstream call may take (a lookup with its blobs: twice this).
        #[arg(long, env = "CLONESTAGE_UPSTREAM_TIMEOUT_MS", default_value_t = 1000,
              value_parser = clap::value_parser!(u64).range(1..))]
        upstream_timeout_ms: u64,
        /// Results the upload queue holds at most; beyond it new ones are dropped and counted.
        #[arg(long, env = "CLONESTAGE_UPSTREAM_QUEUE_MAX", default_value_t = 10_000)]
        upstream_queue_max: usize,
        /// Ready copies of hot input subtrees the server keeps in <cache>/pool/ (taken by one
        /// rename at stage time); 0 turns the pool off.
        #[arg(long, env = "CLONESTAGE_POOL_COPIES",
              default_value_t = clonestage_engine::stage::PoolBounds::default().copies)]
        pool_copies: usize,
        /// An action-relative directory linked into every root as one persistent directory
        /// (per concrete path), where the action declares nothing there: `*` is any one
        /// directory name. Repeatable, or comma-separated in the variable; `none` turns
        /// sharing off (docs/module-cache.md) [default: bazel-out/*/bin/_swift_module_cache,
        /// bazel-out/*/bin/_objc_module_cache, bazel-out/*/genfiles/_objc_module_cache]
        #[arg(
            long = "shared-dir",
            env = "CLONESTAGE_SHARED_DIRS",
            value_name = "PATTERN",
            value_delimiter = ','
        )]
        shared_dirs: Vec<String>,
        #[command(flatten)]
        code: CodeArgs,
    },
    /// Stop the server for this cache: SIGTERM to it, then wait until it has released the
    /// cache (exit 0; 1 if it is still running after --timeout; 3 if none was running).
    Stop {
        /// Seconds to wait for it to finish running actions and exit.
        #[arg(long, default_value_t = 30)]
        timeout: u64,
    },
    /// Measure staging methods side by side on DIR's filesystem (the SwiftCompile shapes).
    Bench(clonestage_bench::BenchArgs),
    /// Print the Bazel flag that reaches the running server (exit 3 when none runs): the unix
    /// socket executor, for Bazel 6+ (4.x/5.x exit 37 on it without a message; see --for-bazel).
    Address {
        /// The loopback TCP executor (Bazel < 6 cannot use unix sockets). It needs the token
        /// header, which is never printed: Bazel reads both from the file --bazelrc prints.
        #[arg(long, conflicts_with_all = ["bazelrc", "for_bazel"])]
        tcp: bool,
        /// The path of the private (0600) rc file with the TCP executor and token header, for
        /// `bazel --bazelrc=PATH ...` or a `try-import PATH` line in ~/.bazelrc.
        #[arg(long, conflicts_with = "for_bazel")]
        bazelrc: bool,
        /// Exit 4, naming both versions, when the running server is another clonestage
        /// version than this one (tools/bazel then restarts it with its own).
        #[arg(long)]
        same_version: bool,
        /// The ~/.bazelrc line for this Bazel version (`7.4.1`, `bazel 5.4.1`, `6`): the unix
        /// executor for 6+, `try-import <the --bazelrc file>` for 4.x/5.x (exit 2 if VERSION
        /// names no release). Both stay valid across server restarts.
        #[arg(long, value_name = "VERSION")]
        for_bazel: Option<String>,
    },
    /// Check this machine for clonestage (run it first on a Mac): the cache's filesystem, a
    /// trial stage against the permission contract, running staged executables by clone and
    /// by hardlink, the workspace's Xcode routing, the server, a tiny build with your Bazel
    /// through it, the Apple environment. Exit 1 if any check fails.
    Doctor {
        /// The Bazel to build with [default: bazel on PATH].
        #[arg(long, value_name = "PATH")]
        bazel: Option<PathBuf>,
        /// {"version", "checks": [{"name", "status": pass|fail|skip, "detail", "ms"}]}.
        #[arg(long)]
        json: bool,
        /// Runs per kind of staged executable in the exec check [default: 300 on macOS, 20 on
        /// Linux].
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        exec_runs: Option<u32>,
    },
    /// Whether a server is up for the cache (pid, version, socket, TCP port; never the
    /// token), the cache's filesystem, and how and why it stages there (exit 0 up, 3 down).
    Status,
    /// Copy this binary and the spawn wrapper (atomically, 0755) into the per-version home
    /// `<data>/clonestage/<version>/bin/` where tools/bazel looks first; print the directory.
    /// With --launcher, also install clonestage into a workspace (`bazel run
    /// @clonestage//:install` runs this): tools/bazel, tools/clonestage.bazelrc and the
    /// `.bazelrc` line that imports it.
    SelfInstall(commands::SelfInstallArgs),
    /// Run Bazel through clonestage: what tools/bazel execs. For a command that builds, start
    /// the server if it is not up, then exec the real Bazel with clonestage's rc file (the
    /// executor and settings for that Bazel release); every other command, and every command
    /// clonestage cannot serve (said in one line), runs Bazel untouched.
    Launch {
        /// The real Bazel binary.
        #[arg(long, value_name = "PATH")]
        bazel: PathBuf,
        /// The workspace whose tools/bazel ran (its .bazelrc and .bazelversion are read).
        #[arg(long, value_name = "DIR")]
        workspace: PathBuf,
        /// Bazel's arguments, verbatim (after `--`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
}

fn main() -> ExitCode {
    // tools/bazel runs this before every Bazel command, always in one form: read it without
    // building the whole command line (clap still parses any other form of `launch`).
    if let Some(a) = launch::LaunchArgs::from_shim(std::env::args_os()) {
        return launch::launch(a);
    }
    let cli = Cli::parse();
    // The launcher runs before every Bazel command: no logging setup on its path.
    let cmd = match cli.cmd {
        Cmd::Launch {
            bazel,
            workspace,
            args,
        } => {
            return launch::launch(launch::LaunchArgs {
                bazel,
                workspace,
                cache: cli.cache,
                args,
            })
        }
        other => other,
    };
    // The server logs its readiness and each failure; one-shot commands only warnings.
    let default_level = if matches!(cmd, Cmd::Serve { .. }) {
        "info"
    } else {
        "warn"
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CLONESTAGE_LOG")
                .unwrap_or_else(|_| default_level.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    if !matches!(cmd, Cmd::Serve { .. } | Cmd::Bench(_)) {
        // A one-shot command's report piped into `head` must end it quietly, as it does any
        // Unix tool, not panic on EPIPE (Rust ignores SIGPIPE by default). The server and
        // the bench keep ignoring it: they write to sockets and pipes of their own.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let cache = cli
        .cache
        .clone()
        .unwrap_or_else(|| dirs::cache_dir(&dirs::process_env));
    let r = match cmd {
        Cmd::Ingest {
            path,
            all_executable,
        } => commands::ingest(&cache, &path, all_executable),
        Cmd::Stage {
            digest,
            dest,
            outputs,
            method,
            allow_absolute_symlinks,
            allow_escaping_symlinks,
            json,
            code,
        } => commands::stage(
            &cache,
            commands::StageArgs {
                digest,
                dest,
                outputs,
                method: match method {
                    Method::Auto => clonestage_engine::MethodPreference::Auto,
                    Method::Clone => clonestage_engine::MethodPreference::Clone,
                    Method::Hardlink => clonestage_engine::MethodPreference::Hardlink,
                    Method::Copy => clonestage_engine::MethodPreference::Copy,
                },
                symlinks: clonestage_engine::tree::SymlinkPolicy {
                    allow_absolute: allow_absolute_symlinks,
                    allow_escaping: allow_escaping_symlinks,
                },
                json,
                code: code.policy(),
            },
        ),
        Cmd::Stats { json } => commands::stats(&cache, json),
        Cmd::Verify => commands::verify(&cache),
        Cmd::Gc { max_size } => commands::gc(&cache, max_size),
        Cmd::Stop { timeout } => commands::stop(&cache, timeout),
        Cmd::Serve {
            port,
            jobs,
            spawn,
            max_tree_depth,
            max_tree_entries,
            max_tree_bytes,
            max_size,
            evict_every,
            upstream,
            upstream_instance,
            upstream_auth_file,
            upstream_auth_helper,
            upstream_write,
            upstream_timeout_ms,
            upstream_queue_max,
            pool_copies,
            shared_dirs,
            code,
        } => clonestage_server::serve(clonestage_server::ServeOptions {
            cache_dir: cache,
            port,
            jobs: jobs.unwrap_or_else(|| {
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(2)
            }),
            spawn,
            limits: TreeLimits {
                max_depth: max_tree_depth,
                max_entries: max_tree_entries,
                max_bytes: max_tree_bytes,
            },
            max_size,
            evict_every: evict_every.map(std::time::Duration::from_secs),
            upstream: upstream.filter(|u| !u.is_empty()).map(|url| {
                clonestage_server::UpstreamOptions {
                    instance: upstream_instance,
                    auth_file: upstream_auth_file,
                    auth_helper: upstream_auth_helper,
                    write: upstream_write,
                    timeout: std::time::Duration::from_millis(upstream_timeout_ms),
                    queue_max: upstream_queue_max,
                    ..clonestage_server::UpstreamOptions::new(&url)
                }
            }),
            pool_copies,
            shared_dirs,
            code: code.policy(),
        })
        .map(|_| ExitCode::SUCCESS),
        Cmd::Address {
            tcp,
            bazelrc,
            for_bazel,
            same_version,
        } => commands::address(
            &cache,
            match (tcp, bazelrc, for_bazel) {
                (_, _, Some(v)) => commands::AddressMode::ForBazel(v),
                (true, _, _) => commands::AddressMode::Tcp,
                (_, true, _) => commands::AddressMode::Bazelrc,
                _ => commands::AddressMode::Unix,
            },
            same_version,
        ),
        Cmd::Status => commands::status(&cache),
        Cmd::Doctor {
            bazel,
            json,
            exec_runs,
        } => commands::doctor(commands::DoctorArgs {
            cache: cache.clone(),
            bazel,
            json,
            exec_runs,
        }),
        Cmd::Bench(args) => clonestage_bench::run(&args).map(|_| ExitCode::SUCCESS),
        Cmd::SelfInstall(args) => commands::self_install(&args),
        Cmd::Launch { .. } => unreachable!("handled before logging is set up"),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("clonestage: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
