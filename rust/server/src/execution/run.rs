//! One action, start to end, on a blocking thread: make a work dir, stage the input root with
//! the engine (outputs' parents writable, shared cache directories linked), run the command through the spawn wrapper, check
//! that no hardlinked input was written through, move outputs, stdout and stderr into the CAS,
//! and describe it all in an `ActionResult` with its timestamps and staging figures. The work
//! dir is removed on every path out, the input root unpinned with it; after a successful run
//! that is left to the caller, in `Leftovers` (`cleanup`), after responding.

use super::cleanup::Leftovers;
use super::exec_state::ExecState;
use super::metadata::{self, now, StagingFigures, Timeline};
use super::operations::ActionControl;
use super::spawn::{self, SpawnRequest, SpawnStats};
use super::tmpdir;
use super::workdir::STD_STREAMS;
use crate::checks::Prepared;
use crate::failure::Failure;
use crate::state::State;
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::tree::SymlinkPolicy;
use clonestage_engine::{Digest, MethodPreference, PutFile, StageRequest};
use std::path::Path;
use std::time::Instant;

/// An action that ran (whatever its exit code).
pub(crate) struct Executed {
    pub result: pb::ActionResult,
    pub stats: SpawnStats,
    /// Hardlinked inputs the action wrote through (now quarantined).
    pub tampered: usize,
    pub stage_us: u64,
    /// Starting the wrapper to having its stats.
    pub spawn_us: u64,
    /// The work dir and the pinned staged root, to drop off the response's critical path.
    pub leftovers: Leftovers,
    /// Whether the result went into the action cache (`respond` decides).
    pub recorded: bool,
    /// Shared cache directories (action-relative paths) the command crashed on
    /// (`shared_crash`): `respond` clears them and runs the action again.
    pub crashed_caches: Vec<String>,
}

fn std_stream(state: &State, p: &Path, hold: Instant) -> Result<Digest, Failure> {
    match std::fs::symlink_metadata(p) {
        Ok(_) => state
            .cache
            .put_file_held(p, PutFile::Move, None, Some(hold))
            .map_err(Failure::from),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Digest::EMPTY),
        Err(e) => Err(Failure::io("lstat", p, e)),
    }
}

pub(crate) fn run_action(
    state: &State,
    exec: &ExecState,
    p: &Prepared,
    control: &ActionControl,
    mut t: Timeline,
) -> Result<Executed, Failure> {
    t.worker_start = now();
    // Before staging: an Xcode that is not installed fails the action before any work.
    let apple = exec.apple.additions(&p.command.environment_variables)?;
    let work = exec.ready_dirs.take()?;
    let root = work.root();
    t.fetch_start = now();
    // `..Default::default()` fills the test hooks a `fault-injection` build of the engine adds
    // (none otherwise: then the update is needless).
    #[allow(clippy::needless_update)]
    let staged = state
        .stager
        .stage(&StageRequest {
            root: p.input_root,
            dest: root.clone(),
            // Relative to the working directory, which the stager resolves through the tree.
            outputs: p.outputs.stage_paths(""),
            working_dir: p.working_dir.clone(),
            method: MethodPreference::Auto,
            symlinks: SymlinkPolicy::default(),
            shared: state.shared.clone(),
            ..Default::default()
        })
        .map_err(Failure::from)?;
    t.fetch_done = now();
    // Real directories from the root (the stager followed the tree's own symlinks, never
    // the host's): nothing on the way is a symlink, so the wrapper's chdir stays in the root.
    let wd = staged.working_dir.clone();
    let cwd = root.join(&wd);
    if !std::fs::symlink_metadata(&cwd).is_ok_and(|m| m.is_dir()) {
        return Err(Failure::InvalidArgument(format!(
            "Command.working_directory '{}' is not a directory of the input root",
            p.working_dir
        )));
    }
    p.outputs.open_existing_dirs(&root, &wd)?;

    // The names the ready work dirs hold their empty files under.
    let [stdout, stderr] = STD_STREAMS.map(|f| work.file(f));
    let env = tmpdir::replace(
        p.command
            .environment_variables
            .iter()
            .map(|v| (v.name.as_str(), v.value.as_str()))
            .chain(apple.iter().map(|(k, v)| (*k, v.as_str()))),
        &exec.tmpdir,
    );
    t.exec_start = now();
    let ran = spawn::spawn_command(
        &SpawnRequest {
            wrapper: &exec.spawn,
            work_dir: &work.path,
            cwd: &cwd,
            args: &p.command.arguments,
            env,
            timeout: p.timeout,
            stdout: &stdout,
            stderr: &stderr,
            pool: Some(&exec.prespawn),
        },
        control,
    );
    t.exec_done = now();
    let tampered = staged.check_inputs().len();
    let stats = ran?;
    if control.is_cancelled() {
        return Err(Failure::Unavailable(format!(
            "action {} was cancelled (server shutting down or client gone)",
            p.digest
        )));
    }

    // Before stderr moves into the CAS: did the command crash on a shared cache directory?
    let crashed_caches = super::shared_crash::named_caches(&stats, &stderr, staged.shared_dirs());

    t.upload_start = now();
    let mut r = pb::ActionResult {
        exit_code: stats.exit_code,
        ..Default::default()
    };
    // Kept for the client, which reads them after the response (`answer_grace`): held from
    // before each is put, then checked all together.
    let hold = crate::answer_grace::until();
    p.outputs.collect(&state.cache, &root, &wd, hold, &mut r)?;
    r.stdout_digest = Some(std_stream(state, &stdout, hold)?.to_proto());
    r.stderr_digest = Some(std_stream(state, &stderr, hold)?.to_proto());
    crate::answer_grace::hold(&state.cache, &r).map_err(|d| {
        Failure::Unavailable(format!(
            "output blob {d} of action {} was evicted before the answer; try again",
            p.digest
        ))
    })?;
    t.upload_done = now();
    let aux = metadata::staging_any(&StagingFigures {
        counters: &staged.counters,
        staging_us: staged.micros,
        hardlinked_inodes: staged.hardlinked_inodes(),
        tampered_inputs: tampered,
        command: Some(&stats),
    });
    let stage_us = staged.micros;
    let spawn_us = metadata::span_us(t.exec_start, t.exec_done);
    t.worker_done = now();
    tracing::debug!(
        action = %p.digest,
        queued_us = metadata::span_us(t.queued, t.worker_start),
        workdir_us = metadata::span_us(t.worker_start, t.fetch_start),
        stage_us = metadata::span_us(t.fetch_start, t.fetch_done),
        prespawn_us = metadata::span_us(t.fetch_done, t.exec_start),
        exec_us = metadata::span_us(t.exec_start, t.exec_done),
        command_us = stats.wall_us,
        command_cpu_us = stats.user_us + stats.sys_us,
        postexec_us = metadata::span_us(t.exec_done, t.upload_start),
        outputs_us = metadata::span_us(t.upload_start, t.upload_done),
        "action phases"
    );
    r.execution_metadata = Some(metadata::executed_metadata(&exec.worker, &t, vec![aux]));
    Ok(Executed {
        result: r,
        stats,
        tampered,
        stage_us,
        spawn_us,
        leftovers: Leftovers { staged, work },
        recorded: false,
        crashed_caches,
    })
}
