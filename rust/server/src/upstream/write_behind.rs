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

use super::upload::{upload_blobs, upload_one, UploadError};
use super::Upstream;
use crate::ac_store::AcStore;
use crate::server_counters;
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::cas::PinGuard;
use clonestage_engine::{Cache, Digest};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

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
            up.count(server_counters::UPSTREAM_UPLOAD_DROPPED);
            tracing::debug!(action = %action, max = q.max, "upstream queue full; result not uploaded");
            return;
        }
    }
    // Pinned before the entry is visible: whoever sees it queued sees its blobs kept.
    let pins = pin_all(&up.cache, &upload_blobs(&up.cache, &action, result));
    let p = q.dir.join(entry_name(&action));
    if let Err(e) = std::fs::write(&p, b"") {
        up.count(server_counters::UPSTREAM_UPLOAD_DROPPED);
        tracing::warn!(path = %p.display(), error = %e, "cannot queue an upstream upload; dropped");
        return;
    }
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
                        let pins = pin_all(&u.cache, &upload_blobs(&u.cache, &d, &r));
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
                up.count(server_counters::UPSTREAM_RESULTS_UPLOADED);
                backoff = BACKOFF_FIRST;
            }
            Err(UploadError::Drop(e)) => {
                tracing::warn!(action = %action, error = %e, "upstream upload dropped");
                up.queue.remove(&action);
                up.count(server_counters::UPSTREAM_UPLOAD_DROPPED);
            }
            Err(UploadError::Retry(e)) => {
                up.count(server_counters::UPSTREAM_UPLOAD_RETRIES);
                if backoff == BACKOFF_FIRST {
                    tracing::warn!(upstream = %up.opts.url, action = %action, error = %e, "upstream upload failed; retrying with backoff");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
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
