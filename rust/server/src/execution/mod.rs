//! Execution: Execute and WaitExecution. An Execute (`respond`, one step per function, in
//! order) checks the Action and Command (`action`), looks the action up in the action cache
//! unless `skip_cache_lookup` (or `do_not_cache`) says not to, waits for one of `--jobs`
//! slots, runs it (`run`) on the blocking pool, records it, and answers (`answer`). The
//! service owns its state (`exec_state`: operations, job slots, prespawn pool, janitor).
//! Clients follow it as a stream of Operations (`operations`); the final one
//! carries the `ExecuteResponse`, whose `status` holds execution errors the way Bazel reads
//! them: FAILED_PRECONDITION with the missing digests, INVALID_ARGUMENT, DEADLINE_EXCEEDED
//! (with the partial result) on timeout, UNAVAILABLE when cancelled by shutdown, ABORTED
//! (with the result, for its logs) when a hardlinked input of the root was written through
//! during the run, by the action or by another one sharing the inode.
//! A result is recorded in the action cache only for exit code 0, no timeout, no input
//! tampering, and without the Action's `do_not_cache`. Every action gets the TMPDIR Bazel
//! gives every local spawn (`tmpdir`); Apple actions get the DEVELOPER_DIR and SDKROOT
//! Bazel's macOS provider would give them (`apple_env`; docs/xcode.md); an Xcode the host
//! lacks is a failed action whose stderr names it (`answer::host_lacks`). An action that
//! crashed on a shared cache directory linked into its root (a compiler's module cache,
//! `shared_crash`) gets those directories cleared and runs once more.

mod answer;
pub(crate) mod apple_env;
mod cleanup;
mod declared_outputs;
mod exec_state;
mod janitor;
mod metadata;
pub(crate) mod operations;
mod pool_builder;
pub(crate) mod prespawn;
pub(crate) mod ready_dirs;
mod respond;
pub(crate) mod run;
mod shared_crash;
pub(crate) mod spawn;
mod tmpdir;
pub(crate) mod workdir;

use crate::failure::{check_digest_function, digest_arg, Failure};
use crate::state::State;
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use bazel_remote_apis::google::longrunning::Operation;
pub(crate) use exec_state::ExecState;
use pb::execution_server::Execution;
use std::sync::Arc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

pub(crate) struct ExecutionService {
    pub state: Arc<State>,
    /// What this service alone uses: operations, job slots, prespawn pool, janitor.
    pub exec: Arc<ExecState>,
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
        let op = self.exec.ops.create(digest);
        let stream = op.subscribe();
        let (state, exec) = (self.state.clone(), self.exec.clone());
        tokio::spawn(async move {
            let resp = respond::respond(state, exec, op.clone(), req, digest).await;
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
        match self.exec.ops.get(&name) {
            Some(op) => Ok(Response::new(op.subscribe())),
            None => Err(Failure::NotFound(format!("no operation named '{name}'")).into()),
        }
    }
}
