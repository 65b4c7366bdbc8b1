//! Read-through: a local action-cache miss asks the upstream. A result is stored locally only
//! once it passed every check a result made here passes (`checks::result_check`: paths,
//! outputs against the Command's declared ones, Trees, symlink targets, exit code 0; the
//! Action and Command come from the upstream first when the local cache lacks them) and every
//! blob it names (stdout, stderr, output files, output trees and every file in them) is in the
//! local cache, each fetched blob written through the cache's verified write (`put_bytes` /
//! `commit_upload` with the expected digest), so bytes that do not match their digest are
//! never stored. A result that fails a check, names a blob the upstream does not have, or a
//! blob whose bytes do not match, is rejected (`upstream_rejected`), not stored, and answered
//! as a miss, so the action runs here; blobs of it already fetched and verified stay (they are
//! correct content, evictable). A result whose Action or Command the upstream lacks cannot be
//! checked: refused and counted the same, without feeding the breaker. Blobs come through
//! `fetch`. Every lookup, blobs included, is bounded by twice the timeout; with the breaker
//! open nothing is asked, nor for an action the upstream did not have, or whose result was
//! refused, in the last `RECENT_MISS`.

use super::fetch::{fetch, fetch_all, status_text, FetchError};
use super::Upstream;
use crate::ac_store::AcStore;
use crate::checks::{self, result_check};
use crate::server_counters;
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::Digest;
use prost::Message;
use std::time::Instant;

/// How long an upstream miss is remembered: Bazel asks GetActionResult, uploads inputs and
/// calls Execute, whose lookup would otherwise ask the upstream a second time.
const RECENT_MISS: std::time::Duration = std::time::Duration::from_secs(10);
/// Misses remembered at most (older ones are forgotten first when it is full).
const RECENT_MISS_MAX: usize = 10_000;

fn missed_recently(up: &Upstream, action: &Digest) -> bool {
    let m = up.recent_misses.lock().unwrap();
    m.get(action).is_some_and(|t| t.elapsed() < RECENT_MISS)
}

fn note_miss(up: &Upstream, action: Digest) {
    let mut m = up.recent_misses.lock().unwrap();
    if m.len() >= RECENT_MISS_MAX {
        m.retain(|_, t| t.elapsed() < RECENT_MISS);
        if m.len() >= RECENT_MISS_MAX {
            m.clear();
        }
    }
    m.insert(action, Instant::now());
}

pub(super) async fn lookup(
    up: &Upstream,
    ac: &AcStore,
    action: Digest,
) -> Option<pb::ActionResult> {
    if missed_recently(up, &action) || !up.breaker.allow() {
        return None;
    }
    let deadline = Instant::now() + up.lookup_deadline();
    let found = tokio::time::timeout(up.lookup_deadline(), find(up, action, deadline)).await;
    let found = match found {
        Err(_) => Err(FetchError::Stalled(format!(
            "no answer within {:?}",
            up.lookup_deadline()
        ))),
        Ok(r) => r,
    };
    match found {
        Ok(None) => {
            up.read_ok();
            note_miss(up, action);
            up.count(server_counters::UPSTREAM_AC_MISSES);
            None
        }
        Ok(Some(r)) => {
            up.read_ok();
            if let Err(f) = ac.put(&action, &r) {
                tracing::warn!(action = %action, error = %f.message(), "cannot store the upstream's result locally");
            }
            up.count(server_counters::UPSTREAM_AC_HITS);
            Some(r)
        }
        Err(FetchError::Call(e)) => {
            up.read_failed("GetActionResult", &e);
            None
        }
        Err(FetchError::Stalled(e)) => {
            up.read_stalled("GetActionResult", &e);
            None
        }
        Err(FetchError::Lie(e)) => {
            tracing::warn!(upstream = %up.opts.url, action = %action, error = %e, "rejected the upstream's result");
            note_miss(up, action);
            up.count(server_counters::UPSTREAM_REJECTED);
            up.read_failed("a result it could not back", &e);
            None
        }
        Err(FetchError::Unverifiable(e)) => {
            tracing::info!(upstream = %up.opts.url, action = %action, error = %e, "did not take the upstream's result");
            up.read_ok();
            note_miss(up, action);
            up.count(server_counters::UPSTREAM_REJECTED);
            None
        }
    }
}

async fn find(
    up: &Upstream,
    action: Digest,
    deadline: Instant,
) -> Result<Option<pb::ActionResult>, FetchError> {
    // The result is asked within one timeout, two before the first answer (the fetch of its
    // blobs gets the rest of the deadline): an upstream that does not answer this small call
    // is stalled.
    let asked_at = Instant::now();
    let bound = up.ask_bound();
    let asked = tokio::time::timeout(bound, up.client.get_action_result(&action, bound)).await;
    let r = match asked {
        Err(_) => {
            return Err(FetchError::Stalled(format!(
                "GetActionResult unanswered within {:?}",
                bound
            )))
        }
        // The call's own deadline (tonic answers CANCELLED "Timeout expired" when the timeout
        // it sent as grpc-timeout passes), or a connection that timed out (a server that
        // accepts and never speaks) after the connect timeout: a stall too.
        Ok(Err(s))
            if matches!(
                s.code(),
                tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
            ) || asked_at.elapsed() >= up.opts.timeout =>
        {
            return Err(FetchError::Stalled(status_text(&s)))
        }
        Ok(r) => r.map_err(|s| FetchError::Call(status_text(&s)))?,
    };
    let Some(r) = r else {
        return Ok(None);
    };
    // What the Command declared decides what the result may hold: its two small blobs come
    // first (local already when Execute asks), and the result is checked against them before
    // any of its own blobs is fetched (a lie of 200,000 undeclared files costs nothing).
    let p = prepared(up, action, deadline).await?;
    result_check::check_result(&p.outputs, &p.working_dir, &r).map_err(FetchError::Lie)?;
    // Outputs first: a Tree must be here before the files it lists can be known.
    let direct = crate::result_digests::named(&r).direct;
    fetch_all(up, &direct, deadline).await?;
    let mut files = Vec::new();
    for d in &r.output_directories {
        let Some(t) = d
            .tree_digest
            .as_ref()
            .and_then(|t| Digest::from_proto(t).ok())
        else {
            continue;
        };
        let cache = up.cache.clone();
        let tree =
            tokio::task::spawn_blocking(move || crate::result_digests::read_tree(&cache, &t))
                .await
                .ok()
                .flatten()
                .ok_or_else(|| {
                    FetchError::Lie(format!("output tree {t} is not a readable Tree"))
                })?;
        result_check::check_tree(&p.working_dir, &d.path, &tree).map_err(FetchError::Lie)?;
        files.extend(
            crate::result_digests::tree_files(&tree)
                .map_err(|e| FetchError::Lie(format!("output tree {t}: {e}")))?,
        );
    }
    fetch_all(up, &files, deadline).await?;
    Ok(Some(r))
}

/// `action`'s Action and Command, checked as Execute checks them: from the local cache, or
/// fetched from the upstream (verified). Bazel uploads both with every result it writes
/// (`UploadManifest.addAction`), and so does this server's write-behind; a result without
/// them cannot be checked and is refused (`Unverifiable`).
async fn prepared(
    up: &Upstream,
    action: Digest,
    deadline: Instant,
) -> Result<checks::Prepared, FetchError> {
    let need = |what: &str, d: Digest, absent: Vec<Digest>| {
        if absent.is_empty() {
            Ok(())
        } else {
            Err(FetchError::Unverifiable(format!(
                "the upstream lacks its {what} {d}, so its result cannot be checked"
            )))
        }
    };
    let (_, absent) = fetch(up, &[action], deadline).await?;
    need("Action", action, absent)?;
    let cache = up.cache.clone();
    let command = tokio::task::spawn_blocking(move || -> Result<Digest, String> {
        let bytes = cache
            .read(&action)
            .map_err(|e| e.to_string())?
            .ok_or("the Action left the local cache")?;
        let a = pb::Action::decode(bytes.as_slice()).map_err(|e| e.to_string())?;
        crate::failure::digest_arg(a.command_digest.as_ref(), "Action.command_digest")
            .map_err(|f| f.message())
    })
    .await
    .map_err(|e| FetchError::Call(format!("worker task failed: {e}")))?
    .map_err(|e| FetchError::Unverifiable(format!("its Action {action}: {e}")))?;
    let (_, absent) = fetch(up, &[command], deadline).await?;
    need("Command", command, absent)?;
    let cache = up.cache.clone();
    tokio::task::spawn_blocking(move || checks::prepare(&cache, action))
        .await
        .map_err(|e| FetchError::Call(format!("worker task failed: {e}")))?
        .map_err(|f| FetchError::Unverifiable(format!("its Action or Command: {}", f.message())))
}

/// Inputs an Execute lacks: fetched (verified), bounded by the lookup deadline. The breaker
/// is honoured and fed like lookups.
pub(super) async fn fetch_inputs(up: &Upstream, missing: &[Digest]) -> usize {
    if !up.breaker.allow() {
        return 0;
    }
    let deadline = Instant::now() + up.lookup_deadline();
    match tokio::time::timeout(up.lookup_deadline(), fetch(up, missing, deadline)).await {
        Ok(Ok((n, _))) => {
            up.read_ok();
            n
        }
        Ok(Err(FetchError::Call(e))) => {
            up.read_failed("fetching inputs", &e);
            0
        }
        Ok(Err(FetchError::Stalled(e))) => {
            up.read_stalled("fetching inputs", &e);
            0
        }
        Ok(Err(FetchError::Lie(e) | FetchError::Unverifiable(e))) => {
            up.count(server_counters::UPSTREAM_REJECTED);
            up.read_failed("an input blob that did not match its digest", &e);
            0
        }
        Err(_) => {
            up.read_stalled("fetching inputs", "deadline passed");
            0
        }
    }
}
