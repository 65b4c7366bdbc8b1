//! Upload sessions, so an interrupted ByteStream Write can resume: one per resource name
//! (which holds the client's upload uuid), keeping the engine `Upload` (a temp file in
//! `<cache>/tmp/`) whose size is the committed size, uncompressed bytes for compressed
//! uploads too (REAPI: a compressed Write resumes at an uncompressed offset; see `write_call`).
//! Nothing else: a compressed upload's zstd decoder belongs to its stream and goes with it.
//!
//! A Write stream attaches to its session (`attach`). A second Write of the same name takes the
//! session over at once and the first stream stops (ABORTED), so an idle stream never blocks
//! its name: Bazel's uploader sends a second Write of a name only after its first call failed
//! on its side (`ByteStreamUploader`: a failed attempt asks QueryWriteStatus, then writes from
//! the committed size under the same resource name).
//!
//! Bounds, so abandoned uploads cannot pile up (issue 23):
//! - `SESSIONS` sessions in all and `SESSIONS_PER_CLIENT` per client (`invocation`). A new
//!   session that would pass either pushes out the session no stream has used for longest
//!   (of that client, for its own cap); when every one has a live stream, the Write gets
//!   RESOURCE_EXHAUSTED, which Bazel retries.
//! - A session no stream is attached to expires after `IDLE_LIMIT`, or `TIGHT_IDLE_LIMIT` when
//!   the table or the decoders' memory (`memory`) is half full, or such sessions' temp files
//!   hold `TIGHT_IDLE_BYTES`. Expired sessions are swept every `SWEEP_EVERY` and whenever a
//!   stream attaches; their temp files go with them.
//!
//! The table's lock is a plain mutex, never held across an await; a session's own lock is held
//! only while one message is written, never while waiting for the next one.

use super::memory::DecoderBudget;
use crate::failure::Failure;
use clonestage_engine::cas::Upload;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How long a session no stream uses is kept for a resumed Write.
pub const IDLE_LIMIT: Duration = Duration::from_secs(15 * 60);
/// The same when the table or the decoders' memory is at least half full: Bazel's retries
/// come within seconds (`--remote_retry_max_delay`, 5 s by default).
pub const TIGHT_IDLE_LIMIT: Duration = Duration::from_secs(60);
/// Temp files of sessions no stream uses that make the table tight.
pub const TIGHT_IDLE_BYTES: u64 = 256 << 20;
/// Sessions in all: each holds a temp file (and its descriptor).
pub const SESSIONS: usize = 512;
/// Sessions of one client (one Bazel command: `invocation`).
pub const SESSIONS_PER_CLIENT: usize = 256;
const SWEEP_EVERY: Duration = Duration::from_secs(10);

pub(crate) struct Session {
    /// The bytes received so far (uncompressed), if any.
    pub upload: Option<Upload>,
}

impl Session {
    /// What QueryWriteStatus reports, and where a resumed Write must start.
    pub fn committed(&self) -> u64 {
        self.upload.as_ref().map_or(0, |u| u.written)
    }
}

pub(crate) type SessionRef = Arc<tokio::sync::Mutex<Session>>;

struct Entry {
    session: SessionRef,
    client: Arc<str>,
    /// The Write stream attached now (none when it cannot be upgraded).
    owner: Weak<Stream>,
    /// When the last stream let go of it.
    since: Instant,
    /// The bytes its temp file holds, as its stream last wrote them.
    held: Arc<AtomicU64>,
}

/// A Write stream's claim on its session.
#[derive(Default)]
struct Stream {
    superseded: AtomicBool,
    stop: Notify,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub sessions: usize,
    pub per_client: usize,
    pub idle: Duration,
    pub tight_idle: Duration,
    pub tight_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            sessions: SESSIONS,
            per_client: SESSIONS_PER_CLIENT,
            idle: IDLE_LIMIT,
            tight_idle: TIGHT_IDLE_LIMIT,
            tight_bytes: TIGHT_IDLE_BYTES,
        }
    }
}

/// What the upload sessions hold now (`ServerHandle::uploads`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UploadGauge {
    pub sessions: usize,
    /// Sessions a Write stream is attached to.
    pub streams: usize,
    /// zstd decoders holding memory, and how much they were granted.
    pub decoders: usize,
    pub decoder_bytes: u64,
}

struct Table {
    map: Mutex<HashMap<String, Entry>>,
    limits: Limits,
    budget: Arc<DecoderBudget>,
}

#[derive(Clone)]
pub(crate) struct Uploads {
    table: Arc<Table>,
}

impl Uploads {
    /// The server's sessions, swept every `SWEEP_EVERY` by a task of the current runtime.
    pub fn start() -> Uploads {
        let budget = DecoderBudget::new(super::memory::DECODER_MEMORY, super::memory::IDLE_GRACE);
        let u = Uploads::with(Limits::default(), budget);
        let weak = Arc::downgrade(&u.table);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(SWEEP_EVERY);
            loop {
                every.tick().await;
                let Some(table) = weak.upgrade() else { return };
                let gone = table.sweep(&mut table.map.lock().unwrap(), Instant::now());
                drop(gone); // temp files removed outside the lock
            }
        });
        u
    }

    pub fn with(limits: Limits, budget: Arc<DecoderBudget>) -> Uploads {
        Uploads {
            table: Arc::new(Table {
                map: Mutex::default(),
                limits,
                budget,
            }),
        }
    }

    pub fn budget(&self) -> &Arc<DecoderBudget> {
        &self.table.budget
    }

    /// Attach a new Write stream of `name` from `client` to its session (made if new); an
    /// earlier stream of the name stops.
    pub fn attach(&self, name: &str, client: Arc<str>) -> Result<Attached, Failure> {
        self.attach_at(name, client, Instant::now())
    }

    fn attach_at(&self, name: &str, client: Arc<str>, now: Instant) -> Result<Attached, Failure> {
        let t = &self.table;
        let stream = Arc::new(Stream::default());
        let mut map = t.map.lock().unwrap();
        let mut gone = t.sweep(&mut map, now);
        let (session, held) = match map.get_mut(name) {
            Some(e) => {
                if let Some(old) = e.owner.upgrade() {
                    old.superseded.store(true, Ordering::SeqCst);
                    old.stop.notify_one();
                }
                e.owner = Arc::downgrade(&stream);
                e.client = client;
                (e.session.clone(), e.held.clone())
            }
            None => {
                let mine = map.values().filter(|e| e.client == client).count();
                if mine >= t.limits.per_client {
                    let out = oldest_idle(&map, |e| e.client == client).ok_or_else(|| {
                        Failure::ResourceExhausted(format!(
                            "{client} has {mine} uploads in progress, the most one client may have at once; retry when some finish"
                        ))
                    })?;
                    gone.extend(map.remove(&out));
                }
                if map.len() >= t.limits.sessions {
                    let out = oldest_idle(&map, |_| true).ok_or_else(|| {
                        Failure::ResourceExhausted(format!(
                            "{} uploads in progress, the most this server takes at once; retry when some finish",
                            map.len()
                        ))
                    })?;
                    gone.extend(map.remove(&out));
                }
                let session = Arc::new(tokio::sync::Mutex::new(Session { upload: None }));
                let held = Arc::new(AtomicU64::new(0));
                map.insert(
                    name.to_string(),
                    Entry {
                        session: session.clone(),
                        client,
                        owner: Arc::downgrade(&stream),
                        since: now,
                        held: held.clone(),
                    },
                );
                (session, held)
            }
        };
        drop(map);
        drop(gone);
        Ok(Attached {
            table: t.clone(),
            name: name.to_string(),
            stream,
            session,
            held,
        })
    }

    pub fn get(&self, name: &str) -> Option<SessionRef> {
        let map = self.table.map.lock().unwrap();
        map.get(name).map(|e| e.session.clone())
    }

    /// Forget `name`'s session (its blob is in the CAS).
    pub fn remove(&self, name: &str) {
        let gone = self.table.map.lock().unwrap().remove(name);
        drop(gone);
    }

    pub fn gauge(&self) -> UploadGauge {
        let (sessions, streams) = {
            let map = self.table.map.lock().unwrap();
            let live = map.values().filter(|e| e.owner.strong_count() > 0).count();
            (map.len(), live)
        };
        let (decoder_bytes, decoders) = self.table.budget.used();
        UploadGauge {
            sessions,
            streams,
            decoders,
            decoder_bytes,
        }
    }
}

impl Table {
    /// Take out the sessions no stream used for their expiry; drop them after the lock.
    fn sweep(&self, map: &mut HashMap<String, Entry>, now: Instant) -> Vec<Entry> {
        let (used, _) = self.budget.used();
        let idle_bytes: u64 = map
            .values()
            .filter(|e| e.owner.strong_count() == 0)
            .map(|e| e.held.load(Ordering::Relaxed))
            .sum();
        let tight = map.len() * 2 >= self.limits.sessions
            || used * 2 >= self.budget.cap()
            || idle_bytes >= self.limits.tight_bytes;
        let limit = if tight {
            self.limits.tight_idle
        } else {
            self.limits.idle
        };
        let expired: Vec<String> = map
            .iter()
            .filter(|(_, e)| e.owner.strong_count() == 0)
            .filter(|(_, e)| now.saturating_duration_since(e.since) >= limit)
            .map(|(k, _)| k.clone())
            .collect();
        expired.iter().filter_map(|k| map.remove(k)).collect()
    }
}

/// The session no stream has used for longest among those `pick` selects.
fn oldest_idle(map: &HashMap<String, Entry>, pick: impl Fn(&Entry) -> bool) -> Option<String> {
    map.iter()
        .filter(|(_, e)| e.owner.strong_count() == 0 && pick(e))
        .min_by_key(|(_, e)| e.since)
        .map(|(k, _)| k.clone())
}

/// A Write stream attached to its session; dropping it (however the stream ends) lets go.
pub(crate) struct Attached {
    table: Arc<Table>,
    name: String,
    stream: Arc<Stream>,
    pub session: SessionRef,
    held: Arc<AtomicU64>,
}

impl Attached {
    /// The session's temp file now holds `bytes` (for the sweep's sum; see `Table::sweep`).
    pub fn holds(&self, bytes: u64) {
        self.held.store(bytes, Ordering::Relaxed);
    }

    /// A later Write of the same name took the session over.
    pub fn superseded(&self) -> bool {
        self.stream.superseded.load(Ordering::SeqCst)
    }

    /// Resolves when a later Write of the same name takes the session over.
    pub async fn stopped(&self) {
        self.stream.stop.notified().await
    }

    /// The upload is done (stored, or beyond repair): forget its session.
    pub fn remove(&self) {
        let mut map = self.table.map.lock().unwrap();
        let mine = map
            .get(&self.name)
            .is_some_and(|e| std::ptr::eq(e.owner.as_ptr(), Arc::as_ptr(&self.stream)));
        let gone = if mine { map.remove(&self.name) } else { None };
        drop(map);
        drop(gone);
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let mut map = self.table.map.lock().unwrap();
        if let Some(e) = map.get_mut(&self.name) {
            if std::ptr::eq(e.owner.as_ptr(), Arc::as_ptr(&self.stream)) {
                e.owner = Weak::new();
                e.since = Instant::now();
            }
        }
    }
}

#[cfg(test)]
#[path = "uploads_tests.rs"]
mod tests;
