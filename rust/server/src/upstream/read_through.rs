//! Read-through: a local action-cache miss asks the upstream. A result is stored locally only
//! once every blob it names (stdout, stderr, output files, output trees and every file in
//! them) is in the local cache, each fetched blob written through the cache's verified write
//! (`put_bytes` / `commit_upload` with the expected digest), so bytes that do not match their
//! digest are never stored. A result naming a blob the upstream does not have, or a blob whose
//! bytes do not match, is rejected (`upstream_rejected`), not stored, and answered as a miss;
//! blobs of it already fetched and verified stay (they are correct content, evictable).
//! Small blobs come by BatchReadBlobs, larger ones by ByteStream.Read. Every lookup, blobs
//! included, is bounded by twice the timeout; with the breaker open nothing is asked, nor for
//! an action the upstream did not have in the last `RECENT_MISS`.

use super::Upstream;
use crate::ac_store::AcStore;
use crate::server_counters;
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::{Cache, Digest};
use prost::Message;
use std::sync::Arc;
use std::time::Instant;
use tonic::Status;

/// Blobs above this size come by ByteStream; below it, in batches.
const BATCH_BLOB_MAX: u64 = 1 << 20;
/// Bytes asked for in one BatchReadBlobs (under the 4 MiB a server commonly allows).
const BATCH_BYTES: u64 = 3 << 20;

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

/// Why fetching failed.
pub(super) enum FetchError {
    /// The upstream failed (transport, status).
    Call(String),
    /// No answer within the bound: a stopped, stalled or overloaded upstream.
    Stalled(String),
    /// The upstream lied: a blob it lacks though it named it, or bytes not matching.
    Lie(String),
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
            up.count(server_counters::UPSTREAM_REJECTED);
            up.read_failed("a result it could not back", &e);
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
    // Outputs first: a Tree must be here before the files it lists can be known.
    let crate::result_digests::Named { direct, trees, bad } = crate::result_digests::named(&r);
    if let Some(e) = bad {
        return Err(FetchError::Lie(format!(
            "its result names a bad digest: {e}"
        )));
    }
    fetch_all(up, &direct, deadline).await?;
    let mut files = Vec::new();
    for t in trees {
        let cache = up.cache.clone();
        let tree = tokio::task::spawn_blocking(move || cache.read(&t))
            .await
            .ok()
            .and_then(|r| r.ok().flatten())
            .ok_or_else(|| FetchError::Lie(format!("output tree {t} not readable")))?;
        let tree = pb::Tree::decode(tree.as_slice())
            .map_err(|e| FetchError::Lie(format!("output tree {t} is not a Tree: {e}")))?;
        for dir in tree.root.iter().chain(tree.children.iter()) {
            for f in &dir.files {
                match f.digest.as_ref().map(Digest::from_proto) {
                    Some(Ok(d)) => files.push(d),
                    _ => {
                        return Err(FetchError::Lie(format!(
                            "output tree {t} names a bad digest"
                        )))
                    }
                }
            }
        }
    }
    fetch_all(up, &files, deadline).await?;
    Ok(Some(r))
}

fn status_text(s: &Status) -> String {
    format!("{:?}: {}", s.code(), s.message())
}

/// Fetch every one of `want` the local cache lacks; every one must arrive and verify.
async fn fetch_all(up: &Upstream, want: &[Digest], deadline: Instant) -> Result<(), FetchError> {
    let (_, absent) = fetch(up, want, deadline).await?;
    match absent.first() {
        None => Ok(()),
        Some(d) => Err(FetchError::Lie(format!(
            "its result names {d}, which its CAS does not have ({} such blob(s))",
            absent.len()
        ))),
    }
}

/// Fetch what of `want` the local cache lacks: (how many arrived, which the upstream did not
/// have). Bytes that do not match are a lie.
pub(super) async fn fetch(
    up: &Upstream,
    want: &[Digest],
    deadline: Instant,
) -> Result<(usize, Vec<Digest>), FetchError> {
    let mut want: Vec<Digest> = want.iter().filter(|d| !d.is_empty()).copied().collect();
    want.sort_by_key(|d| d.hex());
    want.dedup();
    let missing = {
        let cache = up.cache.clone();
        tokio::task::spawn_blocking(move || cache.find_missing(want.iter()))
            .await
            .map_err(|e| FetchError::Call(format!("worker task failed: {e}")))?
    };
    let (small, large): (Vec<Digest>, Vec<Digest>) =
        missing.into_iter().partition(|d| d.size <= BATCH_BLOB_MAX);
    let mut fetched = 0;
    let mut absent = Vec::new();
    for batch in batches(&small) {
        let left = remaining(deadline)?;
        let got = up
            .client
            .batch_read(batch, left)
            .await
            .map_err(|s| FetchError::Call(status_text(&s)))?;
        let cache = up.cache.clone();
        let n_bytes: u64 = got.iter().map(|(_, b)| b.len() as u64).sum();
        let stored = tokio::task::spawn_blocking(move || store_batch(&cache, got))
            .await
            .map_err(|e| FetchError::Call(format!("worker task failed: {e}")))??;
        for d in batch {
            if !stored.contains(d) {
                absent.push(*d);
            }
        }
        fetched += stored.len();
        up.add(server_counters::UPSTREAM_BLOBS_FETCHED, stored.len() as u64);
        up.add(server_counters::UPSTREAM_BYTES_FETCHED, n_bytes);
    }
    for d in large {
        let left = remaining(deadline)?;
        match read_large(up, &d, left).await {
            Ok(()) => {
                fetched += 1;
                up.count(server_counters::UPSTREAM_BLOBS_FETCHED);
                up.add(server_counters::UPSTREAM_BYTES_FETCHED, d.size);
            }
            Err(FetchError::Call(e)) if e.starts_with("NotFound") => absent.push(d),
            Err(e) => return Err(e),
        }
    }
    Ok((fetched, absent))
}

fn remaining(deadline: Instant) -> Result<std::time::Duration, FetchError> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| FetchError::Call("deadline passed while fetching blobs".into()))
}

fn batches(small: &[Digest]) -> Vec<&[Digest]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (i, d) in small.iter().enumerate() {
        if i > start && (bytes + d.size > BATCH_BYTES || i - start >= 1000) {
            out.push(&small[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += d.size;
    }
    if start < small.len() {
        out.push(&small[start..]);
    }
    out
}

/// Store a batch through the verified write; any blob whose bytes do not match is a lie and
/// is not stored.
fn store_batch(cache: &Cache, got: Vec<(Digest, Vec<u8>)>) -> Result<Vec<Digest>, FetchError> {
    let mut stored = Vec::new();
    for (d, data) in got {
        match cache.put_bytes(&data, Some(&d)) {
            Ok(_) => stored.push(d),
            Err(e @ clonestage_engine::Error::DigestMismatch { .. }) => {
                return Err(FetchError::Lie(e.to_string()))
            }
            Err(e) => return Err(FetchError::Call(format!("storing blob {d} locally: {e}"))),
        }
    }
    Ok(stored)
}

async fn read_large(
    up: &Upstream,
    d: &Digest,
    left: std::time::Duration,
) -> Result<(), FetchError> {
    let cache: Arc<Cache> = up.cache.clone();
    let mut upload = cache
        .new_upload()
        .map_err(|e| FetchError::Call(format!("temp file for blob {d}: {e}")))?;
    let mut local_err = None;
    let r = up
        .client
        .read_stream(d, left, |chunk| {
            if upload.written + chunk.len() as u64 > d.size {
                return Err(Status::out_of_range("more bytes than the digest's size"));
            }
            upload.write_chunk(chunk).map_err(|e| {
                local_err = Some(e.to_string());
                Status::internal("local write failed")
            })
        })
        .await;
    if let Some(e) = local_err {
        return Err(FetchError::Call(format!("storing blob {d} locally: {e}")));
    }
    match r {
        Ok(()) => {}
        Err(s) if s.code() == tonic::Code::OutOfRange => {
            return Err(FetchError::Lie(format!("blob {d}: {}", s.message())))
        }
        Err(s) => return Err(FetchError::Call(status_text(&s))),
    }
    let d = *d;
    tokio::task::spawn_blocking(move || cache.commit_upload(upload, &d))
        .await
        .map_err(|e| FetchError::Call(format!("worker task failed: {e}")))?
        .map_err(|e| match e {
            e @ clonestage_engine::Error::DigestMismatch { .. } => FetchError::Lie(e.to_string()),
            e => FetchError::Call(format!("storing blob {d} locally: {e}")),
        })
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
        Ok(Err(FetchError::Lie(e))) => {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_stay_under_the_byte_bound() {
        let ds: Vec<Digest> = (0..10u8)
            .map(|i| Digest {
                size: 1 << 20,
                ..Digest::of_bytes(&[i])
            })
            .collect();
        let b = batches(&ds);
        assert!(b
            .iter()
            .all(|b| b.iter().map(|d| d.size).sum::<u64>() <= BATCH_BYTES));
        assert_eq!(b.iter().map(|b| b.len()).sum::<usize>(), 10);
        assert!(batches(&[]).is_empty());
    }
}
