//! Write-behind: results executed here (and, with `--upstream-write all`, results Bazel sent
//! with UpdateActionResult) go upstream from a queue, never on an action's response path.
//!
//! - The queue is `<cache>/upstream/queue/<hash>-<size>`, one empty file per action digest
//!   (the result itself is read from the local action cache when uploaded), so it survives a
//!   restart; it holds at most `--upstream-queue-max` entries, beyond which new ones are
//!   dropped and counted (`upstream_upload_dropped`).
//! - While queued, every blob the result names is pinned (`Cache::pin`), so eviction keeps
//!   what the upload needs; a restarted server pins what it finds queued.
//! - One uploader task takes entries oldest first: FindMissingBlobs upstream, upload the
//!   missing (BatchUpdateBlobs for small blobs, ByteStream.Write for large), then
//!   UpdateActionResult. A failed upload is retried with exponential backoff (0.5 s doubling
//!   to 30 s, `upstream_upload_retries`); an entry whose result or blobs left the local cache
//!   is dropped (`upstream_upload_dropped`).
//! - On shutdown the uploader gets a bounded grace; what is left stays queued.

use super::Upstream;
use crate::ac_store::AcStore;
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::cas::PinGuard;
use clonestage_engine::{Cache, Digest};
use prost::Message;
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// Blobs above this size go by ByteStream.Write.
const BATCH_BLOB_MAX: u64 = 1 << 20;
const BATCH_BYTES: u64 = 3 << 20;
const BACKOFF_FIRST: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

pub(super) struct Queue {
    dir: PathBuf,
    max: usize,
    inner: Mutex<Inner>,
    wake: Notify,
    stopping: AtomicBool,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

#[derive(Default)]
struct Inner {
    order: VecDeque<Digest>,
    pins: HashMap<Digest, Vec<PinGuard>>,
}

fn queue_dir(cache_root: &Path) -> PathBuf {
    cache_root.join("upstream").join("queue")
}

fn entry_name(d: &Digest) -> String {
    format!("{}-{}", d.hex(), d.size)
}

fn parse_entry(name: &str) -> Option<Digest> {
    let (h, s) = name.split_once('-')?;
    Digest::from_parts(h, s.parse().ok()?).ok()
}

pub(super) fn queue_len(cache_root: &Path) -> Option<u64> {
    let rd = std::fs::read_dir(queue_dir(cache_root)).ok()?;
    Some(
        rd.flatten()
            .filter(|e| parse_entry(&e.file_name().to_string_lossy()).is_some())
            .count() as u64,
    )
}

impl Queue {
    /// Open (or make) the queue and list what an earlier server left, oldest first.
    pub fn open(cache: &Cache, max: usize) -> anyhow::Result<Queue> {
        let dir = queue_dir(cache.root());
        std::fs::create_dir_all(&dir)
            .map_err(|e| anyhow::anyhow!("mkdir {}: {e}", dir.display()))?;
        let mut found: Vec<(std::time::SystemTime, Digest)> = std::fs::read_dir(&dir)
            .map_err(|e| anyhow::anyhow!("readdir {}: {e}", dir.display()))?
            .flatten()
            .filter_map(|e| {
                let d = parse_entry(&e.file_name().to_string_lossy())?;
                let t = e.metadata().and_then(|m| m.modified()).ok()?;
                Some((t, d))
            })
            .collect();
        found.sort();
        let inner = Inner {
            order: found.into_iter().map(|(_, d)| d).collect(),
            ..Default::default()
        };
        if !inner.order.is_empty() {
            tracing::info!(entries = inner.order.len(), dir = %dir.display(), "upstream uploads left queued by an earlier server");
        }
        Ok(Queue {
            dir,
            max,
            inner: Mutex::new(inner),
            wake: Notify::new(),
            stopping: AtomicBool::new(false),
            task: Mutex::new(None),
        })
    }

    fn remove(&self, d: &Digest) {
        let mut i = self.inner.lock().unwrap();
        i.order.retain(|x| x != d);
        i.pins.remove(d);
        drop(i);
        let p = self.dir.join(entry_name(d));
        if let Err(e) = std::fs::remove_file(&p) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %p.display(), error = %e, "cannot remove an upstream queue entry");
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.inner.lock().unwrap().order.is_empty()
    }
}

/// Every blob `r` names, the files of its output trees included (trees read from `cache`).
fn result_blobs(cache: &Cache, r: &pb::ActionResult) -> Vec<Digest> {
    let mut out = Vec::new();
    let mut push = |d: Option<&pb::Digest>| {
        if let Some(Ok(d)) = d.map(Digest::from_proto) {
            if !d.is_empty() {
                out.push(d);
            }
        }
    };
    push(r.stdout_digest.as_ref());
    push(r.stderr_digest.as_ref());
    for f in &r.output_files {
        push(f.digest.as_ref());
    }
    let mut trees = Vec::new();
    for d in &r.output_directories {
        push(d.tree_digest.as_ref());
        push(d.root_directory_digest.as_ref());
        if let Some(Ok(t)) = d.tree_digest.as_ref().map(Digest::from_proto) {
            trees.push(t);
        }
    }
    for t in trees {
        let Some(tree) = cache
            .read(&t)
            .ok()
            .flatten()
            .and_then(|b| pb::Tree::decode(b.as_slice()).ok())
        else {
            continue;
        };
        for dir in tree.root.iter().chain(tree.children.iter()) {
            for f in &dir.files {
                push(f.digest.as_ref());
            }
        }
    }
    out.sort_by_key(|d| (d.hash, d.size));
    out.dedup();
    out
}

fn pin_all(cache: &Cache, blobs: &[Digest]) -> Vec<PinGuard> {
    blobs.iter().filter_map(|d| cache.pin(d).ok()).collect()
}

/// Queue `action` (blocking: a file and pins; callers run it off the response's path).
pub(super) fn enqueue(up: &Upstream, action: Digest, result: &pb::ActionResult) {
    let q = &up.queue;
    {
        let i = q.inner.lock().unwrap();
        if i.order.contains(&action) {
            return;
        }
        if i.order.len() >= q.max {
            drop(i);
            up.count("upstream_upload_dropped");
            tracing::debug!(action = %action, max = q.max, "upstream queue full; result not uploaded");
            return;
        }
    }
    let p = q.dir.join(entry_name(&action));
    if let Err(e) = std::fs::write(&p, b"") {
        up.count("upstream_upload_dropped");
        tracing::warn!(path = %p.display(), error = %e, "cannot queue an upstream upload; dropped");
        return;
    }
    let pins = pin_all(&up.cache, &result_blobs(&up.cache, result));
    let mut i = q.inner.lock().unwrap();
    if !i.order.contains(&action) {
        i.order.push_back(action);
    }
    i.pins.insert(action, pins);
    drop(i);
    q.wake.notify_one();
}

/// Start the uploader on the current runtime; it first pins what an earlier server queued.
pub(super) fn start(up: Arc<Upstream>, ac: Arc<AcStore>) {
    let task = tokio::spawn({
        let up = up.clone();
        async move {
            let (u, a) = (up.clone(), ac.clone());
            let _ = tokio::task::spawn_blocking(move || {
                let queued: Vec<Digest> = u
                    .queue
                    .inner
                    .lock()
                    .unwrap()
                    .order
                    .iter()
                    .copied()
                    .collect();
                for d in queued {
                    if let Ok(Some(r)) = a.get(&u.cache, &d) {
                        let pins = pin_all(&u.cache, &result_blobs(&u.cache, &r));
                        u.queue.inner.lock().unwrap().pins.insert(d, pins);
                    }
                }
            })
            .await;
            uploader(up, ac).await
        }
    });
    *up.queue.task.lock().unwrap() = Some(task);
}

/// Why one upload did not finish.
enum UploadError {
    /// Worth retrying (the upstream failed).
    Retry(String),
    /// Never will (the local result or a blob is gone).
    Drop(String),
}

async fn uploader(up: Arc<Upstream>, ac: Arc<AcStore>) {
    let mut backoff = BACKOFF_FIRST;
    loop {
        if up.queue.stopping.load(Ordering::Relaxed) {
            return;
        }
        let next = up.queue.inner.lock().unwrap().order.front().copied();
        let Some(action) = next else {
            tokio::select! {
                _ = up.queue.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            }
            continue;
        };
        match upload_one(&up, &ac, action).await {
            Ok(()) => {
                up.queue.remove(&action);
                up.count("upstream_results_uploaded");
                backoff = BACKOFF_FIRST;
            }
            Err(UploadError::Drop(e)) => {
                tracing::warn!(action = %action, error = %e, "upstream upload dropped");
                up.queue.remove(&action);
                up.count("upstream_upload_dropped");
            }
            Err(UploadError::Retry(e)) => {
                up.count("upstream_upload_retries");
                if backoff == BACKOFF_FIRST {
                    tracing::warn!(upstream = %up.opts.url, action = %action, error = %e, "upstream upload failed; retrying with backoff");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

/// Deadline of one upload call: twice the timeout plus a second per MiB.
fn call_timeout(up: &Upstream, bytes: u64) -> Duration {
    up.opts.timeout * 2 + Duration::from_secs(bytes >> 20)
}

async fn upload_one(up: &Upstream, ac: &Arc<AcStore>, action: Digest) -> Result<(), UploadError> {
    let (cache, ac2) = (up.cache.clone(), ac.clone());
    let (result, blobs) = tokio::task::spawn_blocking(move || {
        let r = ac2.get(&cache, &action).ok().flatten()?;
        let blobs = result_blobs(&cache, &r);
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
            up.add("upstream_blobs_uploaded", n);
            up.add("upstream_bytes_uploaded", bytes);
            bytes = 0;
        }
    }
    for d in large {
        write_large(up, &d).await?;
        up.count("upstream_blobs_uploaded");
        up.add("upstream_bytes_uploaded", d.size);
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

/// Give the uploader `grace` to empty the queue, then stop it; the rest stays queued.
pub(super) async fn drain(up: &Upstream, grace: Duration) {
    let t0 = std::time::Instant::now();
    while !up.queue.is_empty() && t0.elapsed() < grace {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    up.queue.stopping.store(true, Ordering::Relaxed);
    let task = up.queue.task.lock().unwrap().take();
    if let Some(t) = task {
        t.abort();
        let _ = t.await;
    }
    let left = up.queue.inner.lock().unwrap().order.len();
    if left > 0 {
        tracing::info!(
            entries = left,
            "upstream uploads left queued for the next server"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names_round_trip() {
        let d = Digest::of_bytes(b"x");
        assert_eq!(parse_entry(&entry_name(&d)), Some(d));
        assert_eq!(parse_entry(".tmp-1"), None);
    }
}
