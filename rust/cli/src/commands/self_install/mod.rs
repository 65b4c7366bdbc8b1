//! `clonestage self-install`: the binaries into the per-version home (`binaries`), and, given
//! `--launcher`, clonestage into a workspace (`workspace`): what `bazel run
//! @clonestage//:install` runs once its helper is built (private/install.bzl), and what
//! tools/install-binaries.sh runs for the binaries alone.
//!
//! In a workspace the binaries come first: a failed copy exits 1 and leaves the workspace as
//! it was; a `tools/<name>` that is not clonestage's launcher is refused before anything is
//! written (`--force` replaces it, `--as NAME` installs beside it, to be chained). `--check`
//! writes nothing and exits 1 when a copy or binary is missing or differs, or the `.bazelrc`
//! lacks the import or still carries an older install's `build --config=clonestage`.
//!
//! Exit codes: 0 done (or all up to date); 1 failed, refused, or out of date (`--check`);
//! 2 bad arguments (a `--spawn` that is not an executable regular file, a bad `--as`, no
//! workspace).

mod binaries;
mod workspace;

use crate::dirs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use workspace::{copy_state, Bazelrc, IMPORT_LINE};

/// `clonestage self-install`'s flags.
#[derive(clap::Args)]
pub struct SelfInstallArgs {
    /// The clonestage-spawn wrapper to install beside this binary (an executable file).
    #[arg(long, value_name = "PATH")]
    pub spawn: PathBuf,
    /// Install the binaries here instead [default: $XDG_DATA_HOME (if absolute), else
    /// ~/.local/share (Linux) or ~/Library/Application Support (macOS), then
    /// clonestage/<version>/bin].
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// The launcher (clonestage's tools/bazel) to install as tools/<NAME> of WORKSPACE.
    #[arg(long, value_name = "FILE", requires = "bazelrc")]
    pub launcher: Option<PathBuf>,
    /// clonestage's configs (strategy/clonestage.bazelrc), installed as
    /// tools/clonestage.bazelrc.
    #[arg(long, value_name = "FILE", requires = "launcher")]
    pub bazelrc: Option<PathBuf>,
    /// Report what is missing or out of date (exit 1), and write nothing.
    #[arg(long, requires = "launcher")]
    pub check: bool,
    /// Replace a tools/<NAME> that is not clonestage's launcher.
    #[arg(long, requires = "launcher")]
    pub force: bool,
    /// Install the launcher as tools/NAME, to chain it from your own tools/bazel.
    #[arg(
        long = "as",
        value_name = "NAME",
        default_value = "bazel",
        requires = "launcher"
    )]
    pub name: String,
    /// Print the .bazelrc changes instead of making them.
    #[arg(long, requires = "launcher")]
    pub no_bazelrc: bool,
    /// How users run this install, for the messages.
    #[arg(long, default_value = "@clonestage//:install")]
    pub label: String,
    /// The workspace [default: $BUILD_WORKSPACE_DIRECTORY, which `bazel run` sets].
    #[arg(requires = "launcher")]
    pub workspace: Option<PathBuf>,
}

pub fn self_install(a: &SelfInstallArgs) -> anyhow::Result<ExitCode> {
    if let Err(e) = binaries::check_executable(&a.spawn, "--spawn") {
        eprintln!("clonestage: error: {e:#}");
        return Ok(ExitCode::from(2));
    }
    let dir = match &a.dir {
        Some(d) => d.clone(),
        None => dirs::version_home(&dirs::process_env, dirs::VERSION)?,
    };
    let Some(launcher) = &a.launcher else {
        binaries::install(&a.spawn, &dir)?;
        println!("{}", dir.display());
        return Ok(ExitCode::SUCCESS);
    };
    let Some(bazelrc) = &a.bazelrc else {
        anyhow::bail!("--launcher needs --bazelrc (strategy/clonestage.bazelrc)");
    };
    let Some(ws) = a
        .workspace
        .clone()
        .or_else(|| dirs::absolute(std::env::var_os("BUILD_WORKSPACE_DIRECTORY")))
    else {
        say("run it with bazel run, or name the workspace directory");
        return Ok(ExitCode::from(2));
    };
    if a.name.is_empty() || a.name.contains('/') || a.name == "." || a.name == ".." {
        say(&format!(
            "--as takes a file name for tools/, not {}",
            a.name
        ));
        return Ok(ExitCode::from(2));
    }
    let files = Files {
        launcher,
        bazelrc,
        spawn: &a.spawn,
        dir: &dir,
        ws: &ws,
        name: &a.name,
    };
    if a.check {
        return Ok(check(&files));
    }
    install(a, &files)
}

/// What goes where.
struct Files<'a> {
    launcher: &'a Path,
    bazelrc: &'a Path,
    spawn: &'a Path,
    dir: &'a Path,
    ws: &'a Path,
    name: &'a str,
}

impl Files<'_> {
    fn target(&self) -> PathBuf {
        self.ws.join("tools").join(self.name)
    }
    fn bazelrc_copy(&self) -> PathBuf {
        self.ws.join("tools/clonestage.bazelrc")
    }
}

fn say(line: &str) {
    eprintln!("clonestage install: {line}");
}

/// `--check`: one line per item, exit 1 when any is missing or out of date.
fn check(f: &Files) -> ExitCode {
    let mut stale = false;
    let mut report = |ok: bool, what: String| {
        println!("{what}");
        stale |= !ok;
    };
    for (src, dst) in [
        (f.launcher.to_path_buf(), f.target()),
        (f.bazelrc.to_path_buf(), f.bazelrc_copy()),
        (f.spawn.to_path_buf(), f.dir.join("clonestage-spawn")),
    ] {
        let state = copy_state(&src, &dst);
        report(state == "up to date", format!("{state}: {}", dst.display()));
    }
    let helper = f.dir.join("clonestage");
    match binaries::me() {
        Ok(me) if binaries::same(&me, &helper) => {
            report(true, format!("up to date: {}", helper.display()))
        }
        _ => report(
            false,
            format!("missing or out of date: {}", helper.display()),
        ),
    }
    let rc = Bazelrc::read(f.ws);
    if rc.imports() {
        report(
            true,
            format!(
                "up to date: {} imports tools/clonestage.bazelrc",
                rc.path.display()
            ),
        );
    } else {
        report(
            false,
            format!(
                "missing: {} does not import tools/clonestage.bazelrc",
                rc.path.display()
            ),
        );
    }
    for n in rc.old_config_lines() {
        report(
            false,
            format!(
                "out of date: line {n} of {}, `build --config=clonestage`, applies clonestage's \
                 settings even where the launcher stands aside (a team's caches are reset on \
                 machines without clonestage); installing again removes it",
                rc.path.display()
            ),
        );
    }
    note_other_config_lines(&rc);
    if stale {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn note_other_config_lines(rc: &Bazelrc) {
    for (n, line) in rc.other_config_lines() {
        println!(
            "note: line {n} of {}, `{line}`, names --config=clonestage: clonestage's settings \
             then apply even where the launcher stands aside; the launcher applies them itself",
            rc.path.display()
        );
    }
}

fn install(a: &SelfInstallArgs, f: &Files) -> anyhow::Result<ExitCode> {
    let target = f.target();
    if target.exists()
        && !binaries::same(f.launcher, &target)
        && !workspace::is_launcher(&target)
        && !a.force
    {
        say(&format!(
            "{} exists and is not clonestage's launcher; not replacing it",
            target.display()
        ));
        eprintln!(
            "  Either replace it:      bazel run {label} -- --force\n  \
             or chain the two: install clonestage's launcher beside yours,\n                          \
             bazel run {label} -- --as clonestage-bazel\n  \
             and make your tools/bazel end with (BAZEL_REAL, set by Bazelisk or Bazel's wrapper,\n  \
             stays in the environment, so clonestage's launcher still finds the real Bazel):\n                          \
             exec \"$(dirname \"$0\")/clonestage-bazel\" \"$@\"",
            label = a.label
        );
        return Ok(ExitCode::FAILURE);
    }
    if let Err(e) = binaries::install(f.spawn, f.dir) {
        say(&format!(
            "error: installing the binaries into {} failed: {e:#}; nothing was changed in {}",
            f.dir.display(),
            f.ws.display()
        ));
        return Ok(ExitCode::FAILURE);
    }
    println!(
        "installed: {}, {}",
        f.dir.join("clonestage").display(),
        f.dir.join("clonestage-spawn").display()
    );
    for (src, dst, mode) in [
        (f.launcher, target.clone(), 0o755),
        (f.bazelrc, f.bazelrc_copy(), 0o644),
    ] {
        if binaries::same(src, &dst) {
            println!("up to date: {}", dst.display());
            continue;
        }
        std::fs::create_dir_all(dst.parent().expect("tools/"))?;
        binaries::put(src, &dst, mode)?;
        println!("installed: {}", dst.display());
    }
    let rc = Bazelrc::read(f.ws);
    let old = rc.old_config_lines();
    if !rc.needs_fix() {
        println!(
            "up to date: {} imports tools/clonestage.bazelrc",
            rc.path.display()
        );
    } else if a.no_bazelrc {
        println!();
        if !rc.imports() {
            println!("Add to {}:\n  {IMPORT_LINE}", rc.path.display());
        }
        if !old.is_empty() {
            println!(
                "Remove from {} (the launcher applies clonestage's settings itself):\n  \
                 build --config=clonestage",
                rc.path.display()
            );
        }
    } else {
        let imported = rc.imports();
        rc.write_fixed()
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", rc.path.display()))?;
        if !imported {
            println!("added to {}: {IMPORT_LINE}", rc.path.display());
        }
        if !old.is_empty() {
            println!(
                "removed from {}: build --config=clonestage (the launcher applies \
                 clonestage's settings itself, and only when the build runs through clonestage)",
                rc.path.display()
            );
        }
    }
    note_other_config_lines(&Bazelrc::read(f.ws));
    if f.name != "bazel" {
        println!(
            "Call tools/{} from your tools/bazel (see above): Bazel runs only tools/bazel.",
            f.name
        );
    }
    Ok(ExitCode::SUCCESS)
}
