//! Execution: Execute and WaitExecution. An Execute checks the Action and Command
//! (`action`), looks the action up in the action cache unless `skip_cache_lookup` (or
//! `do_not_cache`) says not to, waits for one of `--jobs` slots, and runs it (`run`) on the
//! blocking pool. Clients follow it as a stream of Operations (`operations`); the final one
//! carries the `ExecuteResponse`, whose `status` holds execution errors the way Bazel reads
//! them: FAILED_PRECONDITION with the missing digests, INVALID_ARGUMENT, DEADLINE_EXCEEDED
//! (with the partial result) on timeout, UNAVAILABLE when cancelled by shutdown, ABORTED
//! (with the result, for its logs) when a hardlinked input of the root was written through
//! during the run, by the action or by another one sharing the inode.
//! A result is recorded in the action cache only for exit code 0, no timeout, no input
//! tampering, and without the Action's `do_not_cache`. Apple actions get the DEVELOPER_DIR,
//! SDKROOT and TMPDIR Bazel's local provider would give them (`apple_env`; docs/xcode.md);
//! an Xcode the host lacks is FAILED_PRECONDITION with a message.

mod action;
pub(crate) mod apple_env;
mod metadata;
pub(crate) mod operations;
mod outputs;
pub(crate) mod prespawn;
pub(crate) mod run;
pub(crate) mod spawn;
pub(crate) mod workdir;

use crate::action_cache::inline_std;
use crate::state::State;
use crate::stats;
use crate::status::{blocking, check_digest_function, digest_arg, Failure};
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use bazel_remote_apis::google::longrunning::Operation;
use bazel_remote_apis::google::rpc;
use clonestage_engine::Digest;
use operations::Op;
use pb::execution_server::Execution;
use std::sync::Arc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Request, Response, Status};

pub(crate) struct ExecutionService {
    pub state: Arc<State>,
}

fn error_response(f: &Failure) -> pb::ExecuteResponse {
    pb::ExecuteResponse {
        status: Some(f.to_rpc()),
        message: f.message(),
        ..Default::default()
    }
}

/// What the first trip to the blocking pool found.
enum Checked {
    /// The action cache answered.
    Hit(pb::ActionResult),
    /// Checked, not in the cache; waits for a job slot.
    Ready(action::Prepared),
    /// A job slot was free at once, so the action also ran in the same trip.
    Ran(Box<(action::Prepared, Result<run::Executed, Failure>)>),
}

/// Whether a run's result goes into the action cache.
fn cacheable(p: &action::Prepared, ex: &run::Executed) -> bool {
    ex.stats.exit_code == 0 && !ex.stats.timed_out && ex.tampered == 0 && !p.do_not_cache
}

/// Run a checked action in its job slot and record a cacheable result (blocking).
fn run_and_record(
    state: &State,
    p: &action::Prepared,
    op: &Op,
    t: metadata::Timeline,
) -> Result<run::Executed, Failure> {
    op.set_stage(pb::execution_stage::Value::Executing);
    let ex = run::run(state, p, &op.control, t)?;
    if cacheable(p, &ex) {
        if let Err(f) = state.ac.put(&p.digest, &ex.result) {
            tracing::warn!(action = %p.digest, error = %f.message(), "cannot record action result");
        }
    }
    Ok(ex)
}

/// Drive one Execute to its final response.
async fn respond(
    state: Arc<State>,
    op: Arc<Op>,
    req: pb::ExecuteRequest,
    digest: Digest,
) -> pb::ExecuteResponse {
    let queued = metadata::now();
    let timeline = metadata::Timeline {
        queued,
        ..Default::default()
    };
    // With a job slot free now, checking, the cache lookup, the run and recording its result
    // take one trip to the blocking pool: each trip costs two thread wake-ups, which a loaded
    // machine makes expensive.
    let early = state.jobs.clone().try_acquire_owned().ok();
    let checked = {
        let (state, op) = (state.clone(), op.clone());
        let skip = req.skip_cache_lookup;
        let (so, se) = (req.inline_stdout, req.inline_stderr);
        let t = timeline.clone();
        blocking(move || {
            let p = action::prepare(&state.cache, digest)?;
            let hit = if skip || p.do_not_cache {
                None
            } else {
                state.ac.get(&state.cache, &digest)?
            };
            // A miss is not counted here: Bazel asked GetActionResult first, which counted it.
            if let Some(mut hit) = hit {
                state.count("action_cache_hits");
                inline_std(&state, &mut hit, so, se);
                return Ok(Checked::Hit(hit));
            }
            match early {
                Some(permit) => {
                    let ran = run_and_record(&state, &p, &op, t);
                    drop(permit);
                    Ok(Checked::Ran(Box::new((p, ran))))
                }
                None => Ok(Checked::Ready(p)),
            }
        })
        .await
    };
    let (prepared, ran) = match checked {
        Ok(Checked::Hit(hit)) => {
            tracing::debug!(action = %digest, "action cache hit");
            return pb::ExecuteResponse {
                result: Some(hit),
                cached_result: true,
                status: Some(rpc::Status {
                    code: Code::Ok as i32,
                    ..Default::default()
                }),
                ..Default::default()
            };
        }
        Ok(Checked::Ran(ran)) => *ran,
        Ok(Checked::Ready(p)) => {
            op.set_stage(pb::execution_stage::Value::Queued);
            let permit = tokio::select! {
                p = state.jobs.clone().acquire_owned() => p.expect("the jobs semaphore is never closed"),
                _ = op.control.cancelled() => {
                    return error_response(&Failure::Unavailable("the server is shutting down; action not started".into()));
                }
            };
            let ran = {
                let (state, op) = (state.clone(), op.clone());
                let p = p.clone();
                blocking(move || run_and_record(&state, &p, &op, timeline)).await
            };
            drop(permit);
            (p, ran)
        }
        Err(f) => {
            tracing::info!(action = %digest, error = %f.message(), "action refused");
            state.count("action_errors");
            return error_response(&f);
        }
    };

    match ran {
        Ok(mut ex) => {
            let failed = ex.stats.exit_code != 0;
            let figures = stats::ActionFigures {
                stage_us: Some(ex.stage_us),
                exec_us: ex.stats.wall_us,
                spawn_us: ex.spawn_us,
                serve_us: metadata::span_us(queued, metadata::now()),
                failed: failed && !ex.stats.timed_out,
                timed_out: ex.stats.timed_out,
            };
            // The stage's counters, root and cost estimates are in the stager's ledger already;
            // the action's figures join them, written by the ledger's timed flush
            // (`ledger_flush`), and the work dir is removed in the background: none of it
            // delays the response.
            state
                .stager
                .ledger()
                .add(|c| stats::add_action(c, &figures));
            let leftovers = ex.leftovers;
            state.background(move |state| leftovers.discard(state));
            let status = if ex.tampered > 0 {
                // Never a clean success: the result may be built from a corrupted input. ABORTED
                // (a concurrency failure, retriable): a retry finds the quarantined blobs
                // missing, Bazel uploads them again and the action runs on clean inputs; an
                // action that writes its own inputs each time fails again after Bazel's
                // bounded retries (--remote_retries), with this message.
                state.count("tainted_actions");
                rpc::Status {
                    code: Code::Aborted as i32,
                    message: format!(
                        "{} hardlinked input(s) of this action's root were written through (by this action or by another one sharing them) while it ran; \
                         they were quarantined and the result is neither cached nor usable",
                        ex.tampered
                    ),
                    details: vec![],
                }
            } else if ex.stats.timed_out {
                let secs = prepared.timeout.map_or(0.0, |t| t.as_secs_f64());
                rpc::Status {
                    code: Code::DeadlineExceeded as i32,
                    message: format!("action timed out after {secs}s"),
                    details: vec![],
                }
            } else {
                rpc::Status {
                    code: Code::Ok as i32,
                    ..Default::default()
                }
            };
            inline_std(&state, &mut ex.result, req.inline_stdout, req.inline_stderr);
            tracing::debug!(
                action = %digest,
                exit = ex.stats.exit_code,
                stage_us = ex.stage_us,
                total_us = metadata::span_us(queued, metadata::now()),
                "action ran"
            );
            pb::ExecuteResponse {
                result: Some(ex.result),
                cached_result: false,
                status: Some(status),
                ..Default::default()
            }
        }
        Err(Failure::FailedPrecondition(m)) => {
            tracing::warn!(action = %digest, error = %m, "this host cannot run the action as asked");
            state.count("action_errors");
            host_lacks(&state, &m, req.inline_stderr)
        }
        Err(f) => {
            tracing::info!(action = %digest, error = %f.message(), "action failed to run");
            state.count("action_errors");
            error_response(&f)
        }
    }
}

/// An action this host cannot run as asked (the Xcode it names is not installed, an Xcode
/// tool failed) is answered as a failed action with the reason on its stderr, not as an
/// Execute error: Bazel prints a failed action's stderr and fails the build, whereas an
/// Execute error under `--remote_local_fallback` (part of --config=clonestage) runs the action
/// locally without a word on the console (measured with Bazel 4.2.3). Never cached: nothing
/// is recorded for it.
fn host_lacks(state: &State, m: &str, inline: bool) -> pb::ExecuteResponse {
    let text = format!("clonestage: {m}\n");
    let mut result = pb::ActionResult {
        exit_code: 1,
        ..Default::default()
    };
    match state.cache.put_bytes(text.as_bytes(), None) {
        Ok(d) => {
            result.stderr_digest = Some(d.to_proto());
            inline_std(state, &mut result, false, inline);
        }
        // The reason must reach Bazel even when the cache cannot take one more blob.
        Err(e) => {
            tracing::warn!(error = %e, "cannot store the refused action's stderr; sending it inline");
            result.stderr_raw = text.into_bytes();
        }
    }
    pb::ExecuteResponse {
        result: Some(result),
        cached_result: false,
        status: Some(rpc::Status {
            code: Code::Ok as i32,
            ..Default::default()
        }),
        // No `message`: Bazel prints it beside the stderr, the same line twice.
        ..Default::default()
    }
}

#[tonic::async_trait]
impl Execution for ExecutionService {
    type ExecuteStream = ReceiverStream<Result<Operation, Status>>;

    async fn execute(
        &self,
        request: Request<pb::ExecuteRequest>,
    ) -> Result<Response<Self::ExecuteStream>, Status> {
        let req = request.into_inner();
        if self.state.is_draining() {
            return Err(Status::unavailable(
                "the clonestage server is shutting down",
            ));
        }
        check_digest_function(req.digest_function)?;
        let digest = digest_arg(req.action_digest.as_ref(), "action_digest")?;
        let op = self.state.ops.create(digest);
        let stream = op.subscribe();
        let state = self.state.clone();
        tokio::spawn(async move {
            let resp = respond(state, op.clone(), req, digest).await;
            op.finish(&resp);
        });
        Ok(Response::new(stream))
    }

    type WaitExecutionStream = ReceiverStream<Result<Operation, Status>>;

    async fn wait_execution(
        &self,
        request: Request<pb::WaitExecutionRequest>,
    ) -> Result<Response<Self::WaitExecutionStream>, Status> {
        let name = request.into_inner().name;
        match self.state.ops.get(&name) {
            Some(op) => Ok(Response::new(op.subscribe())),
            None => Err(Failure::NotFound(format!("no operation named '{name}'")).into()),
        }
    }
}
