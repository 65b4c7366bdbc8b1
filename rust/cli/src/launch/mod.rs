//! `clonestage launch`: the launcher behind tools/bazel. Bazelisk and Bazel's own `bazel`
//! wrapper run `<workspace>/tools/bazel` in place of Bazel; that POSIX sh shim finds this
//! binary (or stands aside) and execs `clonestage launch --bazel REAL --workspace WS -- ARGS`.
//! This then:
//!
//! 1. for a command that takes build options (`command_line::BUILD_COMMANDS`), makes sure a
//!    ready `clonestage serve` of its own version runs on the user's cache (`ensure_server`,
//!    `upstream`), and
//! 2. execs the real Bazel with one more startup option, `--bazelrc=<its own rc file>`
//!    (`own_rc`): the executor (`transport`) and clonestage's settings for the Bazel release
//!    that runs (`bazel::settings`), as `build` lines.
//!
//! Contract (tests/launcher checks each point black-box, with the real binary):
//! - Never blocks Bazel, and is never silently local: when the server cannot be found,
//!   started or used, or the command is one clonestage cannot serve (`--digest_function`
//!   other than SHA-256 on the command line or a `startup` rc line; `--ignore_all_rc_files`;
//!   an executor or remote cache named on the command line), it says why in one line and
//!   execs Bazel untouched: Bazel then runs with exactly the team's own settings. Other
//!   commands (`query`, `info`, `version`, ...) run untouched and quietly.
//! - Fast path (server up, Bazel's version known without running it): no lock, no process,
//!   a few stats and reads.
//! - Race-free start: the launcher lock, then `clonestage serve`'s own lock.
//! - No secret in any argv or environment: over TCP the token stays in the server's 0600 rc
//!   file, which the launcher's rc file imports.
//! - The exit status is Bazel's (exec); 127 only when Bazel cannot be run.

mod bazel_version;
mod command_line;
mod detach;
mod ensure_server;
mod own_rc;
mod rc_files;
mod transport;
mod upstream;

pub use transport::FIRST_UNIX_MAJOR;

use crate::dirs::{self, Env};
use command_line::CommandLine;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use transport::Transport;

/// What tools/bazel hands over.
pub struct LaunchArgs {
    /// The real Bazel (Bazelisk's `$BAZEL_REAL`, else the first `bazel` on PATH that is not
    /// the shim).
    pub bazel: PathBuf,
    /// The workspace whose tools/bazel ran.
    pub workspace: PathBuf,
    /// `clonestage --cache DIR launch`; else `dirs::cache_dir`.
    pub cache: Option<PathBuf>,
    /// Bazel's arguments, verbatim.
    pub args: Vec<OsString>,
}

impl LaunchArgs {
    /// The exact form tools/bazel uses, `clonestage launch --bazel REAL --workspace WS --
    /// ARGS...`, read without clap (it runs before every Bazel command); None for any other.
    pub fn from_shim(mut argv: impl Iterator<Item = OsString>) -> Option<LaunchArgs> {
        argv.next()?;
        let mut word = || argv.next();
        if word()? != "launch" || word()? != "--bazel" {
            return None;
        }
        let bazel = PathBuf::from(word()?);
        if word()? != "--workspace" {
            return None;
        }
        let workspace = PathBuf::from(word()?);
        if word()? != "--" {
            return None;
        }
        Some(LaunchArgs {
            bazel,
            workspace,
            cache: None,
            args: argv.collect(),
        })
    }
}

/// Runs the launcher; returns only when Bazel could not be executed.
pub fn launch(a: LaunchArgs) -> ExitCode {
    let env: Env = &dirs::process_env;
    let cl = CommandLine::parse(&a.args);
    if !cl.takes_build_options(&a.args) {
        return exec(&a.bazel, a.args);
    }
    match plan(&a, &cl, env) {
        Ok(rc) => {
            let mut args = a.args;
            let flag = {
                let mut f = OsString::from("--bazelrc=");
                f.push(&rc);
                f
            };
            if env("CLONESTAGE_VERBOSE").is_some_and(|v| v == "1") {
                say(&format!("adding {}", flag.to_string_lossy()));
            }
            args.insert(cl.rc_insert_at(), flag);
            exec(&a.bazel, args)
        }
        Err(StandAside { line, quote_log }) => {
            say(&line);
            if let Some(log) = quote_log {
                for l in ensure_server::last_lines(&log, 4) {
                    say(&format!("  | {l}"));
                }
            }
            exec(&a.bazel, a.args)
        }
    }
}

/// Why the launcher adds nothing (one line) and a log to quote.
struct StandAside {
    line: String,
    quote_log: Option<PathBuf>,
}

fn aside(line: String) -> StandAside {
    StandAside {
        line,
        quote_log: None,
    }
}

/// Everything between the command line and Bazel: the rc file to pass, or why not.
fn plan(a: &LaunchArgs, cl: &CommandLine, env: Env) -> Result<PathBuf, StandAside> {
    if let Some(flag) = cl.names_executor_or_cache(&a.args) {
        return Err(aside(format!(
            "{flag} is on the command line: adding no clonestage executor (actions run where \
             your flags say)"
        )));
    }
    if cl.ignore_all_rc_files {
        return Err(aside(
            "--ignore_all_rc_files: clonestage's executor and settings travel only in an rc \
             file, so this command runs without clonestage"
                .to_string(),
        ));
    }
    stand_aside_for_digest(a, cl, env)?;
    let cache = a.cache.clone().unwrap_or_else(|| dirs::cache_dir(env));
    let cache = std::path::absolute(cache)
        .map_err(|e| aside(format!("cannot tell the cache directory: {e}")))?;
    let version = bazel_version::detect(env, &a.workspace, &a.bazel);
    let transport = Transport::choose(env, version);
    let helper = std::env::current_exe()
        .map_err(|e| aside(format!("cannot tell where this clonestage binary is: {e}")))?;
    let upstream = upstream::Settings::read(env, &a.workspace, &mut |l| say(&l));
    let start = ensure_server::Start {
        cache: &cache,
        helper: &helper,
        upstream: &upstream,
        env,
    };
    let server = ensure_server::ensure(&start, &mut |l| say(&l)).map_err(|p| StandAside {
        line: give_up(&p.line),
        quote_log: p.quote_log,
    })?;
    if let Some(line) = upstream::check_running(&cache, &upstream) {
        say(&line);
    }
    let text = own_rc::content(&server, transport, version);
    let rc = own_rc::path(&cache, transport, version, &text);
    own_rc::ensure(&rc, &text).map_err(|e| aside(give_up(&e)))?;
    if transport == Transport::Tcp && !cl.own_output_root {
        transport::keep_bazel_root_private(env).map_err(|e| aside(give_up(&e)))?;
    }
    Ok(rc)
}

/// The server hashes with SHA-256 only: with another digest function Bazel would refuse it.
fn stand_aside_for_digest(a: &LaunchArgs, cl: &CommandLine, env: Env) -> Result<(), StandAside> {
    let mut files = Vec::new();
    if !cl.no_workspace_rc {
        files.push(a.workspace.join(".bazelrc"));
    }
    if let (false, Some(home)) = (cl.no_home_rc, dirs::absolute(env("HOME"))) {
        files.push(home.join(".bazelrc"));
    }
    match rc_files::digest_function(cl.digest_function.as_deref(), &files) {
        Some(d) if !rc_files::is_sha256(&d.value) => Err(aside(format!(
            "--digest_function={}{}: the clonestage server hashes with SHA-256 only, so this \
             command runs without clonestage",
            d.value,
            d.from
                .map(|f| format!(" (a startup line in {})", f.display()))
                .unwrap_or_default()
        ))),
        _ => Ok(()),
    }
}

fn give_up(problem: &str) -> String {
    format!(
        "{problem}; running Bazel without the clonestage executor, with your workspace's own \
         settings"
    )
}

fn say(line: &str) {
    eprintln!("clonestage: {line}");
}

/// Replaces this process with Bazel; returns only if that fails.
fn exec(bazel: &Path, args: Vec<OsString>) -> ExitCode {
    let err = std::process::Command::new(bazel).args(args).exec();
    say(&format!("cannot run Bazel {}: {err}", bazel.display()));
    ExitCode::from(127)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> impl Iterator<Item = OsString> {
        words
            .iter()
            .map(OsString::from)
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn the_shims_form_is_read_without_clap_and_only_that_form() {
        let a = LaunchArgs::from_shim(argv(&[
            "cs",
            "launch",
            "--bazel",
            "/b",
            "--workspace",
            "/w",
            "--",
            "run",
            "//t",
            "--",
            "x",
        ]))
        .unwrap();
        assert_eq!((a.bazel, a.workspace), ("/b".into(), "/w".into()));
        assert_eq!(a.args, ["run", "//t", "--", "x"]);
        for other in [
            &["cs", "launch", "--workspace", "/w", "--bazel", "/b", "--"][..],
            &[
                "cs",
                "--cache",
                "/c",
                "launch",
                "--bazel",
                "/b",
                "--workspace",
                "/w",
                "--",
            ],
            &["cs", "launch", "--bazel", "/b", "--workspace", "/w"],
            &["cs", "status"],
        ] {
            assert!(LaunchArgs::from_shim(argv(other)).is_none(), "{other:?}");
        }
    }
}
