//! Execution: Execute and WaitExecution. An Execute checks the Action and Command
//! (`action`), looks the action up in the action cache unless `skip_cache_lookup` (or
//! `do_not_cache`) says not to, waits for one of `--jobs` slots, and runs it (`run`) on the
//! blocking pool. Clients follow it as a stream of Operations (`operations`); the final one
//! carries the `ExecuteResponse`, whose `status` holds execution errors the way Bazel reads
//! them: FAILED_PRECONDITION with the missing digests, INVALID_ARGUMENT, DEADLINE_EXCEEDED
//! (with the partial result) on timeout, UNAVAILABLE when cancelled by shutdown.
//! A result is recorded in the action cache only for exit code 0, no timeout, no input
//! tampering, and without the Action's `do_not_cache`.

mod action;
mod metadata;
pub(crate) mod operations;
mod outputs;
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

/// Drive one Execute to its final response.
async fn respond(
    state: Arc<State>,
    op: Arc<Op>,
    req: pb::ExecuteRequest,
    digest: Digest,
) -> pb::ExecuteResponse {
    let mut timeline = metadata::Timeline {
        queued: metadata::now(),
        ..Default::default()
    };
    let prepared = {
        let state = state.clone();
        let skip = req.skip_cache_lookup;
        blocking(move || {
            let p = action::prepare(&state.cache, digest)?;
            let hit = if skip || p.do_not_cache {
                None
            } else {
                state.ac.get(&state.cache, &digest)?
            };
            // A miss is not counted here: Bazel asked GetActionResult first, which counted it.
            if hit.is_some() {
                stats::count(&state.layout.cache, "action_cache_hits");
            }
            Ok((p, hit))
        })
        .await
    };
    let prepared = match prepared {
        Ok((_, Some(mut hit))) => {
            tracing::debug!(action = %digest, "action cache hit");
            let state2 = state.clone();
            let (so, se) = (req.inline_stdout, req.inline_stderr);
            hit = tokio::task::spawn_blocking(move || {
                inline_std(&state2, &mut hit, so, se);
                hit
            })
            .await
            .unwrap_or_default();
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
        Ok((p, None)) => p,
        Err(f) => {
            tracing::info!(action = %digest, error = %f.message(), "action refused");
            stats::count(&state.layout.cache, "action_errors");
            return error_response(&f);
        }
    };

    op.set_stage(pb::execution_stage::Value::Queued);
    let permit = tokio::select! {
        p = state.jobs.clone().acquire_owned() => p.expect("the jobs semaphore is never closed"),
        _ = op.control.cancelled() => {
            return error_response(&Failure::Unavailable("the server is shutting down; action not started".into()));
        }
    };
    op.set_stage(pb::execution_stage::Value::Executing);
    let ran = {
        let (state, op) = (state.clone(), op.clone());
        let p = prepared.clone();
        let t = std::mem::take(&mut timeline);
        blocking(move || run::run(&state, &p, &op.control, t)).await
    };
    drop(permit);

    match ran {
        Ok(mut ex) => {
            let failed = ex.stats.exit_code != 0;
            let figures = stats::ActionFigures {
                stage_us: Some(ex.stage_us),
                exec_us: ex.stats.wall_us,
                failed: failed && !ex.stats.timed_out,
                timed_out: ex.stats.timed_out,
            };
            // Removing the work dir and updating stats.json do not delay the response.
            state.background(move |state| {
                state.stager.record(&ex.leftovers.staged);
                drop(ex.leftovers);
                stats::record_action(&state.layout.cache, &figures);
            });
            let cacheable =
                !failed && !ex.stats.timed_out && ex.tampered == 0 && !prepared.do_not_cache;
            let mut message = String::new();
            if cacheable {
                let (state, r) = (state.clone(), ex.result.clone());
                if let Err(f) = blocking(move || state.ac.put(&digest, &r)).await {
                    tracing::warn!(action = %digest, error = %f.message(), "cannot record action result");
                }
            } else if ex.tampered > 0 {
                message = format!(
                    "the action wrote through {} hardlinked input(s); they were quarantined and the result is not cached",
                    ex.tampered
                );
            }
            let status = if ex.stats.timed_out {
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
            tracing::debug!(action = %digest, exit = ex.stats.exit_code, stage_us = ex.stage_us, "action ran");
            pb::ExecuteResponse {
                result: Some(ex.result),
                cached_result: false,
                status: Some(status),
                message,
                ..Default::default()
            }
        }
        Err(f) => {
            tracing::info!(action = %digest, error = %f.message(), "action failed to run");
            stats::count(&state.layout.cache, "action_errors");
            error_response(&f)
        }
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
