//! One Execute, start to end, one step per function in the order a request goes:
//!
//! 1. `check_and_look_up`: check the Action and Command (`action`), then look the action up
//!    in the action cache (and on a local miss in the upstream's, `upstream`) unless
//!    `skip_cache_lookup` or `do_not_cache` says not to;
//! 2. `take_job_slot`: wait for one of the `--jobs` slots (or for shutdown);
//! 3. `run_and_record`: run it (`run`: stage -> spawn -> outputs; once more after `recover`
//!    when it crashed on a shared cache directory) and put a cacheable result
//!    into the action cache (and, with an upstream, queue its upload in the background:
//!    `enqueue_upload`);
//! 4. `record_figures`: the action's figures into the stager's ledger (which holds the stage's
//!    counters, root and estimates already) and the work dir to the janitor, both off the
//!    response's path;
//! 5. `answer`: the `ExecuteResponse` for what happened.
//!
//! Steps 1 and 3 run on the blocking pool, both called from `trip` only. With a job slot free
//! at once, steps 1 to 3 take one trip: each trip costs two thread wake-ups, which a loaded
//! machine makes expensive.

use super::answer;
use super::cleanup::Leftovers;
use super::exec_state::ExecState;
use super::metadata::{self, Timeline};
use super::operations::Op;
use super::run::{self, Executed};
use crate::checks::{self, result_check, Prepared};
use crate::failure::{blocking, Failure};
use crate::server_counters;
use crate::state::State;
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::Digest;
use std::sync::Arc;
use std::time::SystemTime;
use tokio::sync::OwnedSemaphorePermit;

/// What a trip to the blocking pool (`trip`) found.
enum Checked {
    /// The action cache had the result: the answer.
    Hit(Box<pb::ExecuteResponse>),
    /// Checked, not in the cache; waits for a job slot.
    Ready(Box<Prepared>),
    /// It held a job slot, so the action ran in the same trip.
    Ran(Box<(Prepared, Result<Executed, Failure>)>),
}

/// Rounds of fetching missing inputs from the upstream before Bazel is told what is missing
/// (each bounded by the upstream's lookup deadline; a round that fetches nothing ends them).
const INPUT_FETCH_ROUNDS: usize = 8;

/// How one attempt ended.
enum Attempt {
    Done(Box<pb::ExecuteResponse>),
    /// Blobs are missing (answered to Bazel unless the upstream has them).
    Missing(Failure),
}

/// Drive one Execute to its final response. With an upstream, blobs the action needs and the
/// local cache lacks are fetched from it (verified) and the action tried again; only what is
/// still missing reaches Bazel.
pub(super) async fn respond(
    state: Arc<State>,
    exec: Arc<ExecState>,
    op: Arc<Op>,
    req: pb::ExecuteRequest,
    digest: Digest,
) -> pb::ExecuteResponse {
    let mut round = 0;
    loop {
        let f = match attempt(&state, &exec, &op, &req, digest).await {
            Attempt::Done(resp) => return *resp,
            Attempt::Missing(f) => f,
        };
        let fetched = match (&state.upstream, &f) {
            (Some(up), Failure::Missing { digests, .. }) if round < INPUT_FETCH_ROUNDS => {
                up.fetch_inputs(digests).await
            }
            _ => 0,
        };
        round += 1;
        if fetched == 0 {
            tracing::info!(action = %digest, error = %f.message(), "action refused");
            state.count(server_counters::ACTION_ERRORS);
            return answer::error(&f);
        }
        tracing::debug!(action = %digest, fetched, "fetched missing inputs from the upstream; trying again");
    }
}

/// Steps 1 to 5 once.
async fn attempt(
    state: &Arc<State>,
    exec: &Arc<ExecState>,
    op: &Arc<Op>,
    req: &pb::ExecuteRequest,
    digest: Digest,
) -> Attempt {
    let queued = metadata::now();
    let timeline = Timeline {
        queued,
        ..Default::default()
    };
    // A job slot free now: steps 1 to 3 in one trip. Else the first trip ends `Ready`, step 2
    // waits for a slot, and a second trip (the action checked already) runs step 3.
    let mut slot = exec.jobs.clone().try_acquire_owned().ok();
    let mut checked = None;
    let (prepared, ran) = loop {
        let t = timeline.clone();
        match trip(state, exec, op, req, digest, t, checked.take(), slot.take()).await {
            Ok(Checked::Hit(hit)) => {
                tracing::debug!(action = %digest, "action cache hit");
                return Attempt::Done(hit);
            }
            Ok(Checked::Ran(ran)) => break *ran,
            Ok(Checked::Ready(p)) => {
                op.set_stage(pb::execution_stage::Value::Queued);
                let Some(permit) = take_job_slot(exec, op).await else {
                    return Attempt::Done(Box::new(answer::error(&Failure::Unavailable(
                        "the server is shutting down; action not started".into(),
                    ))));
                };
                (slot, checked) = (Some(permit), Some(p));
            }
            Err(f @ Failure::Missing { .. }) => return Attempt::Missing(f),
            Err(f) => {
                tracing::info!(action = %digest, error = %f.message(), "action refused");
                state.count(server_counters::ACTION_ERRORS);
                return Attempt::Done(Box::new(answer::error(&f)));
            }
        }
    };
    let resp = match ran {
        Ok(ex) => {
            if ex.recorded {
                enqueue_upload(state, digest, &ex.result);
            }
            let Executed {
                result,
                stats,
                tampered,
                stage_us,
                spawn_us,
                leftovers,
                ..
            } = ex;
            let figures = server_counters::ActionFigures {
                stage_us: Some(stage_us),
                exec_us: stats.wall_us,
                spawn_us,
                serve_us: metadata::span_us(queued, metadata::now()),
                failed: stats.exit_code != 0 && !stats.timed_out,
                timed_out: stats.timed_out,
            };
            record_figures(state, exec, leftovers, figures);
            let ran = answer::Ran {
                result,
                stats: &stats,
                tampered,
                timeout: prepared.timeout,
            };
            let resp = answer::ran(state, ran, req);
            log_ran(digest, &stats, stage_us, queued);
            resp
        }
        Err(Failure::FailedPrecondition(m)) => {
            tracing::warn!(action = %digest, error = %m, "this host cannot run the action as asked");
            state.count(server_counters::ACTION_ERRORS);
            answer::host_lacks(&state.cache, &m, req.inline_stderr)
        }
        Err(f @ Failure::Missing { .. }) => return Attempt::Missing(f),
        Err(f) => {
            tracing::info!(action = %digest, error = %f.message(), "action failed to run");
            state.count(server_counters::ACTION_ERRORS);
            answer::error(&f)
        }
    };
    Attempt::Done(Box::new(resp))
}

/// The record step's upload: a cacheable result executed here is queued for the upstream
/// (`--upstream-write executed` or `all`), in the background, never on the response's path.
fn enqueue_upload(state: &Arc<State>, digest: Digest, result: &pb::ActionResult) {
    let Some(up) = state
        .upstream
        .clone()
        .filter(|u| u.opts.write != crate::upstream::WriteMode::None)
    else {
        return;
    };
    let r = result.clone();
    state.background(move |_| up.enqueue(digest, &r));
}

/// One trip to the blocking pool: step 1 unless the action comes back `checked` from waiting
/// for a slot, then step 3 when it holds a job `slot`. Steps 1 and 3 are called from here
/// only.
#[allow(clippy::too_many_arguments)]
async fn trip(
    state: &Arc<State>,
    exec: &Arc<ExecState>,
    op: &Arc<Op>,
    req: &pb::ExecuteRequest,
    digest: Digest,
    t: Timeline,
    checked: Option<Box<Prepared>>,
    slot: Option<OwnedSemaphorePermit>,
) -> Result<Checked, Failure> {
    let (state, exec, op) = (state.clone(), exec.clone(), op.clone());
    let ask = Lookup {
        skip: req.skip_cache_lookup,
        inline: (req.inline_stdout, req.inline_stderr),
        rt: tokio::runtime::Handle::current(),
    };
    blocking(move || {
        let p = match checked {
            Some(p) => *p,
            None => match check_and_look_up(&state, digest, &ask)? {
                Checked::Ready(p) => *p,
                hit => return Ok(hit),
            },
        };
        let Some(permit) = slot else {
            return Ok(Checked::Ready(Box::new(p)));
        };
        let ran = run_and_record(&state, &exec, &p, &op, t);
        drop(permit);
        Ok(Checked::Ran(Box::new((p, ran))))
    })
    .await
}

/// What step 1 takes from the request, and the runtime the read-through runs on.
struct Lookup {
    skip: bool,
    /// `inline_stdout`, `inline_stderr`.
    inline: (bool, bool),
    rt: tokio::runtime::Handle,
}

/// Step 1 (blocking): check the action, then look it up in the action cache: `Hit` with the
/// answer, or `Ready` to run.
fn check_and_look_up(state: &State, digest: Digest, ask: &Lookup) -> Result<Checked, Failure> {
    let p = checks::prepare(&state.cache, digest)?;
    let hit = if ask.skip || p.do_not_cache {
        None
    } else {
        match state.ac.get(&state.cache, &digest)? {
            Some(hit) => Some(hit),
            // Read-through: the team's cache, bounded by its lookup deadline.
            None => state
                .upstream
                .as_ref()
                .and_then(|up| up.lookup_blocking(&ask.rt, &state.ac, digest)),
        }
    };
    // A stored result is served only while it passes what a new one must (an older entry, or
    // one Bazel sent with UpdateActionResult, may not): else the action runs. Its blobs are
    // then held for the client (`answer_grace`); one evicted already makes it a miss too.
    let hit = hit.filter(|h| {
        result_check::check_stored(&state.cache, &p.outputs, &p.working_dir, h)
            .map_err(|why| tracing::info!(action = %digest, why, "stored result refused; running the action"))
            .is_ok()
            && crate::answer_grace::hold(&state.cache, h).is_ok()
    });
    // A miss is not counted here: Bazel asked GetActionResult first, which counted it.
    if let Some(hit) = hit {
        state.count(server_counters::ACTION_CACHE_HITS);
        let answer = answer::cache_hit(&state.cache, hit, ask.inline);
        return Ok(Checked::Hit(Box::new(answer)));
    }
    Ok(Checked::Ready(Box::new(p)))
}

/// Step 2: one of the `--jobs` slots, or None when shutdown cancelled the action first.
async fn take_job_slot(exec: &ExecState, op: &Op) -> Option<OwnedSemaphorePermit> {
    tokio::select! {
        p = exec.jobs.clone().acquire_owned() => Some(p.expect("the jobs semaphore is never closed")),
        _ = op.control.cancelled() => None,
    }
}

/// Whether a run's result goes into the action cache: it succeeded, on untampered inputs,
/// the Action allows caching, and it passes `result_check` (what a team cache's result must
/// pass too): e.g. an action that exits 0 without a mandatory output is answered, not cached.
fn cacheable(state: &State, p: &Prepared, ex: &Executed) -> bool {
    if ex.stats.exit_code != 0 || ex.stats.timed_out || ex.tampered > 0 || p.do_not_cache {
        return false;
    }
    match result_check::check_stored(&state.cache, &p.outputs, &p.working_dir, &ex.result) {
        Ok(()) => true,
        Err(why) => {
            tracing::info!(action = %p.digest, why, "result not cached");
            state.count(server_counters::RESULTS_NOT_CACHED);
            false
        }
    }
}

/// Step 3 (blocking, in a job slot): run the action and record a cacheable result.
fn run_and_record(
    state: &State,
    exec: &ExecState,
    p: &Prepared,
    op: &Op,
    t: Timeline,
) -> Result<Executed, Failure> {
    op.set_stage(pb::execution_stage::Value::Executing);
    let mut ex = run::run_action(state, exec, p, &op.control, t.clone())?;
    if !ex.crashed_caches.is_empty() {
        ex = recover(state, exec, p, op, t, ex)?;
    }
    ex.recorded = cacheable(state, p, &ex);
    if ex.recorded {
        if let Err(f) = state.ac.put(&p.digest, &ex.result) {
            tracing::warn!(action = %p.digest, error = %f.message(), "cannot record action result");
        }
    }
    Ok(ex)
}

/// Step 3's recovery: the action crashed on shared cache directories (`shared_crash`). This
/// root lets go of them, each is cleared once no other root holds it, and the action runs
/// once more; the second result is the answer, whatever it is.
fn recover(
    state: &State,
    exec: &ExecState,
    p: &Prepared,
    op: &Op,
    t: Timeline,
    mut first: Executed,
) -> Result<Executed, Failure> {
    let Some(shared) = &state.shared else {
        return Ok(first);
    };
    let named = std::mem::take(&mut first.crashed_caches);
    first.leftovers.staged.release_shared();
    discard(state, exec, first.leftovers);
    for rel in &named {
        match shared.clear(rel) {
            Ok(bytes) => tracing::warn!(
                action = %p.digest,
                dir = %rel,
                at = %shared.path_for(rel).display(),
                bytes,
                exit = first.stats.exit_code,
                "the action crashed on a shared cache directory: cleared it, running the action again"
            ),
            Err(e) => {
                tracing::warn!(action = %p.digest, dir = %rel, error = %e, "cannot clear a shared cache directory")
            }
        }
    }
    state.count(server_counters::SHARED_DIR_RECOVERIES);
    let again = run::run_action(state, exec, p, &op.control, t)?;
    if again.stats.exit_code != 0 {
        state.count(server_counters::SHARED_DIR_RECOVERIES_FAILED);
    }
    Ok(again)
}

/// Step 4: the stage's counters, root and cost estimates are in the stager's ledger already;
/// the action's figures join them, written by the ledger's timed flush (`ledger_flush`), and
/// the work dir is removed in the background: none of it delays the response.
fn record_figures(
    state: &Arc<State>,
    exec: &Arc<ExecState>,
    leftovers: Leftovers,
    figures: server_counters::ActionFigures,
) {
    state
        .stager
        .ledger()
        .add(|c| server_counters::add_action(c, &figures));
    let exec = exec.clone();
    state.background(move |state| discard(state, &exec, leftovers));
}

/// An answered run's leftovers (`cleanup`): the root unpinned now, the work dir to the
/// janitor, its pooled copies back to the pool first.
fn discard(state: &State, exec: &ExecState, leftovers: Leftovers) {
    exec.janitor
        .push_discarded(leftovers.discard(state.stager.pool(), &state.cache));
}

fn log_ran(
    digest: Digest,
    stats: &super::spawn::SpawnStats,
    stage_us: u64,
    queued: Option<SystemTime>,
) {
    tracing::debug!(
        action = %digest,
        exit = stats.exit_code,
        stage_us,
        total_us = metadata::span_us(queued, metadata::now()),
        "action ran"
    );
}
