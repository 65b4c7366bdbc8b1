//! One upload of the write-behind queue (`write_behind`): the result from the local action
//! cache, FindMissingBlobs upstream, the missing blobs (BatchUpdateBlobs for small ones,
//! ByteStream.Write streamed from the local file for large ones), then UpdateActionResult.
//! Each call's deadline grows with the bytes it carries.

use super::Upstream;
use crate::ac_store::AcStore;
use crate::server_counters;
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::{Cache, Digest};
use prost::Message;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Blobs above this size go by ByteStream.Write.
const BATCH_BLOB_MAX: u64 = 1 << 20;
const BATCH_BYTES: u64 = 3 << 20;

/// Why one upload did not finish.
pub(super) enum UploadError {
    /// Worth retrying (the upstream failed).
    Retry(String),
    /// Never will (the local result or a blob is gone).
    Drop(String),
}

/// What an upload carries besides the result's own blobs: the Action and its Command, which a
/// reader needs to check the result against (`read_through`), as Bazel's own uploads carry
/// them (`UploadManifest.addAction`). Those the local cache lacks (a result a client sent
/// with UpdateActionResult without uploading them) are left out.
pub(super) fn action_blobs(cache: &Cache, action: &Digest) -> Vec<Digest> {
    let mut out = Vec::new();
    let Ok(Some(bytes)) = cache.read(action) else {
        return out;
    };
    out.push(*action);
    let command = pb::Action::decode(bytes.as_slice())
        .ok()
        .and_then(|a| a.command_digest)
        .and_then(|d| Digest::from_proto(&d).ok());
    out.extend(command.filter(|c| cache.contains(c)));
    out
}

/// Every blob one upload carries: the result's and `action_blobs`.
pub(super) fn upload_blobs(cache: &Cache, action: &Digest, r: &pb::ActionResult) -> Vec<Digest> {
    let mut out = crate::result_digests::all_blobs(cache, r);
    out.extend(action_blobs(cache, action));
    out.sort_by_key(|d| (d.hash, d.size));
    out.dedup();
    out
}

/// Deadline of one upload call: twice the timeout plus a second per MiB.
fn call_timeout(up: &Upstream, bytes: u64) -> Duration {
    up.opts.timeout * 2 + Duration::from_secs(bytes >> 20)
}

pub(super) async fn upload_one(
    up: &Upstream,
    ac: &Arc<AcStore>,
    action: Digest,
) -> Result<(), UploadError> {
    let (cache, ac2) = (up.cache.clone(), ac.clone());
    let (result, blobs) = tokio::task::spawn_blocking(move || {
        let r = ac2.get(&cache, &action).ok().flatten()?;
        let blobs = upload_blobs(&cache, &action, &r);
        Some((r, blobs))
    })
    .await
    .map_err(|e| UploadError::Retry(format!("worker task failed: {e}")))?
    .ok_or_else(|| UploadError::Drop("its result (or a blob of it) left the local cache".into()))?;
    let missing = up
        .client
        .find_missing(&blobs, call_timeout(up, 0))
        .await
        .map_err(|s| UploadError::Retry(format!("FindMissingBlobs: {}", s.message())))?;
    let (small, large): (Vec<Digest>, Vec<Digest>) =
        missing.into_iter().partition(|d| d.size <= BATCH_BLOB_MAX);
    let mut batch: Vec<(Digest, Vec<u8>)> = Vec::new();
    let mut bytes = 0u64;
    for (i, d) in small.iter().enumerate() {
        let cache = up.cache.clone();
        let d = *d;
        let data = tokio::task::spawn_blocking(move || cache.read(&d))
            .await
            .map_err(|e| UploadError::Retry(format!("worker task failed: {e}")))?
            .map_err(|e| UploadError::Retry(format!("reading {d}: {e}")))?
            .ok_or_else(|| UploadError::Drop(format!("blob {d} left the local cache")))?;
        bytes += data.len() as u64;
        batch.push((d, data));
        if bytes >= BATCH_BYTES || i + 1 == small.len() {
            let n = batch.len() as u64;
            up.client
                .batch_update(std::mem::take(&mut batch), call_timeout(up, bytes))
                .await
                .map_err(|s| UploadError::Retry(format!("BatchUpdateBlobs: {}", s.message())))?;
            up.add(server_counters::UPSTREAM_BLOBS_UPLOADED, n);
            up.add(server_counters::UPSTREAM_BYTES_UPLOADED, bytes);
            bytes = 0;
        }
    }
    for d in large {
        write_large(up, &d).await?;
        up.count(server_counters::UPSTREAM_BLOBS_UPLOADED);
        up.add(server_counters::UPSTREAM_BYTES_UPLOADED, d.size);
    }
    up.client
        .update_action_result(&action, result, call_timeout(up, 0))
        .await
        .map_err(|s| UploadError::Retry(format!("UpdateActionResult: {}", s.message())))
}

/// Stream one large blob from the local cache (chunks read on the blocking pool).
async fn write_large(up: &Upstream, d: &Digest) -> Result<(), UploadError> {
    use std::io::Read;
    let file = up
        .cache
        .open_blob(d)
        .map_err(|e| UploadError::Retry(format!("opening {d}: {e}")))?
        .ok_or_else(|| UploadError::Drop(format!("blob {d} left the local cache")))?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
    let reader = tokio::task::spawn_blocking(move || {
        let mut f = file;
        loop {
            let mut buf = vec![0u8; 1 << 20];
            let n = f.read(&mut buf)?;
            if n == 0 {
                return Ok::<(), std::io::Error>(());
            }
            buf.truncate(n);
            if tx.blocking_send(buf).is_err() {
                return Ok(());
            }
        }
    });
    let id = format!("{:016x}", rand_id());
    let r = up
        .client
        .write_stream(d, &id, rx, call_timeout(up, d.size))
        .await;
    let read = reader.await;
    r.map_err(|s| UploadError::Retry(format!("ByteStream.Write {d}: {}", s.message())))?;
    match read {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(UploadError::Retry(format!("reading {d}: {e}"))),
        Err(e) => Err(UploadError::Retry(format!("worker task failed: {e}"))),
    }
}

/// An upload id unique enough for ByteStream (time and a counter; not a secret).
fn rand_id() -> u64 {
    use std::sync::atomic::AtomicU64;
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ (SEQ.fetch_add(1, Ordering::Relaxed) << 48) ^ std::process::id() as u64
}
