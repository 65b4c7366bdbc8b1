//! A just-answered result's blobs get a short grace from eviction. The client reads them after
//! the response (Bazel downloads a result's outputs right after Execute or GetActionResult
//! answers), and the eviction thread (`eviction`) could take them in between: under an
//! absurdly small `--max-size`, 19 of 200 such reads failed (issue 23). Never wrong bytes, but
//! the client then fails the action.
//!
//! Every path that answers with a result calls `hold` first: it keeps every blob the result
//! names (stdout, stderr, output files, output Trees and the files they list) for `GRACE`
//! (`Cache::hold`: this process's eviction only), then checks that they are all still there.
//! A blob evicted before the hold (between its install and this call) makes the result
//! unusable: the caller answers it as not there (a lookup misses). An Execute's own outputs
//! cannot go that way: it holds each from before it is put (`OutputSpec::collect`,
//! `Cache::put_file_held`), so its check here finds them all (it once did not, one Execute in
//! 119 under `--max-size 1 --evict-every 1`, when the hold came after the puts).

use crate::result_digests::all_blobs;
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::{Cache, Digest};
use std::time::{Duration, Instant};

/// How long a just-answered result's blobs are kept. Bazel starts its downloads as soon as the
/// response arrives; a minute covers a slow one and outlasts a tick of the eviction thread
/// (30 s by default).
pub(crate) const GRACE: Duration = Duration::from_secs(60);

/// When a grace that starts now ends.
pub(crate) fn until() -> Instant {
    Instant::now() + GRACE
}

/// Hold `r`'s blobs for `GRACE`. Err names a blob that is already gone.
pub(crate) fn hold(cache: &Cache, r: &pb::ActionResult) -> Result<(), Digest> {
    if let Err(e) = cache.hold(&all_blobs(cache, r), until()) {
        // Only the lock file failed: the blobs are answered all the same, without the grace.
        tracing::warn!(error = %e, "cannot hold a result's blobs from eviction");
    }
    match crate::ac_store::first_missing_blob(cache, r) {
        Some(d) => Err(d),
        None => Ok(()),
    }
}
