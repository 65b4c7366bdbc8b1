//! Upload sessions, so an interrupted ByteStream Write can resume: each session is keyed by
//! its resource name (which holds the client's upload uuid) and keeps the engine `Upload`
//! (a temp file in `<cache>/tmp/`) and how many bytes it holds. A Write at offset 0 starts
//! over; one at the committed size continues; QueryWriteStatus reports the committed size.
//! For a compressed upload the session also keeps the zstd decoder, and the committed size
//! counts compressed bytes received: that is the offset Bazel's uploader resumes at (its
//! Chunker seeks its compressed stream; see `zstd`).
//! Sessions idle longer than `IDLE_LIMIT` are dropped (their temp file goes with them).

use crate::zstd::Decompressor;
use clonestage_engine::cas::Upload;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const IDLE_LIMIT: Duration = Duration::from_secs(15 * 60);

pub(crate) struct Session {
    pub upload: Option<Upload>,
    /// Present for a compressed upload in progress.
    pub zstd: Option<Decompressor>,
    pub last_used: Instant,
}

impl Session {
    /// Bytes received: uncompressed bytes, or compressed ones for a compressed upload.
    pub fn committed(&self) -> u64 {
        match (&self.upload, &self.zstd) {
            (Some(_), Some(z)) => z.consumed(),
            (Some(u), None) => u.written,
            (None, _) => 0,
        }
    }

    /// Forget what was received (the temp file goes with the upload).
    pub fn clear(&mut self) {
        self.upload = None;
        self.zstd = None;
    }
}

pub(crate) type SessionRef = Arc<tokio::sync::Mutex<Session>>;

#[derive(Default, Clone)]
pub(crate) struct Uploads {
    map: Arc<Mutex<HashMap<String, SessionRef>>>,
}

/// What the upload sessions hold now (`ServerHandle::uploads`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UploadGauge {
    pub sessions: usize,
    /// zstd decoders alive (of compressed uploads; a session a stream holds counts as one).
    pub decoders: usize,
}

impl Uploads {
    /// The session for `name`, created empty if new.
    pub fn get_or_create(&self, name: &str) -> SessionRef {
        let mut map = self.map.lock().unwrap();
        let now = Instant::now();
        map.retain(|_, s| {
            s.try_lock()
                .map_or(true, |s| now.duration_since(s.last_used) < IDLE_LIMIT)
        });
        map.entry(name.to_string())
            .or_insert_with(|| {
                Arc::new(tokio::sync::Mutex::new(Session {
                    upload: None,
                    zstd: None,
                    last_used: now,
                }))
            })
            .clone()
    }

    pub fn get(&self, name: &str) -> Option<SessionRef> {
        self.map.lock().unwrap().get(name).cloned()
    }

    pub fn gauge(&self) -> UploadGauge {
        let map = self.map.lock().unwrap();
        UploadGauge {
            sessions: map.len(),
            decoders: map
                .values()
                .filter(|s| s.try_lock().map_or(true, |s| s.zstd.is_some()))
                .count(),
        }
    }

    pub fn remove(&self, name: &str) {
        self.map.lock().unwrap().remove(name);
    }
}
