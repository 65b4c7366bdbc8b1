//! The `ExecuteResponse` for each way an Execute ends: a cache hit, an action that ran
//! (OK, DEADLINE_EXCEEDED on timeout, ABORTED when a hardlinked input was written through),
//! an action this host cannot run (a failed action whose stderr says why), and an error
//! (its `status`, the way Bazel reads it).

use super::spawn::SpawnStats;
use crate::failure::Failure;
use crate::inline_std::inline_std;
use crate::server_counters;
use crate::state::State;
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use bazel_remote_apis::google::rpc;
use clonestage_engine::Cache;
use std::sync::Arc;
use std::time::Duration;
use tonic::Code;

fn ok() -> rpc::Status {
    rpc::Status {
        code: Code::Ok as i32,
        ..Default::default()
    }
}

/// An execution error, in `status` (and `message`).
pub(super) fn error(f: &Failure) -> pb::ExecuteResponse {
    pb::ExecuteResponse {
        status: Some(f.to_rpc()),
        message: f.message(),
        ..Default::default()
    }
}

/// The action cache had the result; its stdout and stderr inline when the client asked
/// (`inline`: the request's `inline_stdout` and `inline_stderr`).
pub(super) fn cache_hit(
    cache: &Cache,
    mut hit: pb::ActionResult,
    inline: (bool, bool),
) -> pb::ExecuteResponse {
    inline_std(cache, &mut hit, inline.0, inline.1);
    pb::ExecuteResponse {
        result: Some(hit),
        cached_result: true,
        status: Some(ok()),
        ..Default::default()
    }
}

/// What `ran` needs of an action that ran.
pub(super) struct Ran<'a> {
    pub result: pb::ActionResult,
    pub stats: &'a SpawnStats,
    /// Hardlinked inputs written through while it ran.
    pub tampered: usize,
    /// The Action's timeout, named in the DEADLINE_EXCEEDED message.
    pub timeout: Option<Duration>,
}

/// An action that ran, whatever its exit code.
pub(super) fn ran(state: &Arc<State>, ran: Ran, req: &pb::ExecuteRequest) -> pb::ExecuteResponse {
    let Ran {
        mut result,
        stats,
        tampered,
        timeout,
    } = ran;
    let status = if tampered > 0 {
        // Never a clean success: the result may be built from a corrupted input. ABORTED
        // (a concurrency failure, retriable): a retry finds the quarantined blobs
        // missing, Bazel uploads them again and the action runs on clean inputs; an
        // action that writes its own inputs each time fails again after Bazel's
        // bounded retries (--remote_retries), with this message.
        state.count(server_counters::TAINTED_ACTIONS);
        rpc::Status {
            code: Code::Aborted as i32,
            message: format!(
                "{} hardlinked input(s) of this action's root were written through (by this action or by another one sharing them) while it ran; \
                 they were quarantined and the result is neither cached nor usable",
                tampered
            ),
            details: vec![],
        }
    } else if stats.timed_out {
        let secs = timeout.map_or(0.0, |t| t.as_secs_f64());
        rpc::Status {
            code: Code::DeadlineExceeded as i32,
            message: format!("action timed out after {secs}s"),
            details: vec![],
        }
    } else {
        ok()
    };
    inline_std(
        &state.cache,
        &mut result,
        req.inline_stdout,
        req.inline_stderr,
    );
    pb::ExecuteResponse {
        result: Some(result),
        cached_result: false,
        status: Some(status),
        ..Default::default()
    }
}

/// An action this host cannot run as asked (the Xcode it names is not installed, an Xcode
/// tool failed) is answered as a failed action with the reason on its stderr, not as an
/// Execute error: Bazel prints a failed action's stderr and fails the build, whereas an
/// Execute error under `--remote_local_fallback` (part of --config=clonestage) runs the action
/// locally without a word on the console (measured with Bazel 4.2.3). Never cached: nothing
/// is recorded for it.
pub(super) fn host_lacks(cache: &Cache, m: &str, inline: bool) -> pb::ExecuteResponse {
    let text = format!("clonestage: {m}\n");
    let mut result = pb::ActionResult {
        exit_code: 1,
        ..Default::default()
    };
    match cache.put_bytes(text.as_bytes(), None) {
        Ok(d) => {
            result.stderr_digest = Some(d.to_proto());
            inline_std(cache, &mut result, false, inline);
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
        status: Some(ok()),
        // No `message`: Bazel prints it beside the stderr, the same line twice.
        ..Default::default()
    }
}
