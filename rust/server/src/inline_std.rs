//! How an answered `ActionResult` carries its stdout and stderr inline when the client asks
//! (`inline_stdout`/`inline_stderr`): the answer's side of a result, shared by the two
//! services that answer with one (`action_cache_service`'s GetActionResult and
//! `execution/answer.rs`'s ExecuteResponse). Storage (`ac_store`) keeps results as they are.

use bazel_remote_apis::build::bazel::remote::execution::v2::{self as pb, ActionResult};
use clonestage_engine::Cache;

/// Largest stream sent inline; a larger one is left to the client to read by its digest
/// (`remote_execution.proto`, `inline_stdout`: the server MAY omit inlining, even if
/// requested).
const MAX_INLINE: u64 = 1024 * 1024;

/// Fill `stdout_raw`/`stderr_raw` of a result when asked (inline output files are not
/// inlined: optional), each only up to `MAX_INLINE` bytes.
pub(crate) fn inline_std(cache: &Cache, r: &mut ActionResult, stdout: bool, stderr: bool) {
    let read = |d: &Option<pb::Digest>| {
        d.as_ref()
            .and_then(|d| clonestage_engine::Digest::from_proto(d).ok())
            .filter(|d| d.size <= MAX_INLINE)
            .and_then(|d| cache.read(&d).ok().flatten())
    };
    if stdout {
        if let Some(b) = read(&r.stdout_digest) {
            r.stdout_raw = b;
        }
    }
    if stderr {
        if let Some(b) = read(&r.stderr_digest) {
            r.stderr_raw = b;
        }
    }
}
