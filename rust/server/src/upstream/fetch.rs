//! Fetching blobs from the upstream into the local cache, verified: what the local cache lacks
//! of a list, small blobs by BatchReadBlobs (in batches under the 4 MiB a server commonly
//! allows), larger ones by ByteStream.Read streamed into a temp file. Every blob goes through
//! the cache's verified write (`put_bytes` / `commit_upload` with the expected digest), so
//! bytes that do not match their digest are never stored: that is a lie. Used by the
//! read-through (`read_through`) for results and for an Execute's missing inputs.

use super::Upstream;
use crate::server_counters;
use clonestage_engine::{Cache, Digest};
use std::sync::Arc;
use std::time::Instant;
use tonic::Status;

/// Blobs above this size come by ByteStream; below it, in batches.
const BATCH_BLOB_MAX: u64 = 1 << 20;
/// Bytes asked for in one BatchReadBlobs (under the 4 MiB a server commonly allows).
const BATCH_BYTES: u64 = 3 << 20;

/// Why fetching failed.
pub(super) enum FetchError {
    /// The upstream failed (transport, status).
    Call(String),
    /// No answer within the bound: a stopped, stalled or overloaded upstream.
    Stalled(String),
    /// The upstream lied: a blob it lacks though it named it, bytes not matching, or a result
    /// that fails `result_check`.
    Lie(String),
    /// The result cannot be checked: the upstream lacks its Action or Command, or this server
    /// could not run that Command either. Not the upstream failing: the breaker is not fed.
    Unverifiable(String),
}

pub(super) fn status_text(s: &Status) -> String {
    format!("{:?}: {}", s.code(), s.message())
}

/// Fetch every one of `want` the local cache lacks; every one must arrive and verify.
pub(super) async fn fetch_all(
    up: &Upstream,
    want: &[Digest],
    deadline: Instant,
) -> Result<(), FetchError> {
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
