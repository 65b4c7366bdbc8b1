//! Which blobs are Mach-O code (`macho::is_code`), recorded once, when the blob enters the
//! cache (the ingest hashes every byte anyway; the sniffer rides on that pass), so that
//! staging with `--preserve-inodes macho` decides per file by a lookup in memory, never by
//! reading the file again.
//!
//! Where it lives: `<cache>/code`, one digest (`<sha256>/<size>`) per line, appended by
//! whichever process installs such a blob (one `write` of one line, O_APPEND), and in each
//! process a set loaded on first use and topped up from the file's tail once per stage
//! (`refresh`: one stat when nothing changed). It survives restarts with the cache; blobs that
//! entered before it existed are recorded when they are sent again or by `clonestage verify`,
//! which re-hashes every blob. `gc` rewrites it without the evicted digests.
//!
//! Why a forged or stale record cannot break the contract: the record only chooses between two
//! methods the permission contract already covers for every input. A digest listed wrongly is
//! hardlinked to the cache's inode for that very digest, which the cache verified when it
//! installed it; hardlinked inputs are never chmod'ed or written, and are checked for writes
//! after the action (docs/permissions.md rule 5, "Running as root"). A digest missing from the
//! record is cloned, as without the option. No entry names a path or an inode, so none can
//! point a link anywhere but at the cache's own blob. The file sits in the cache's 0o700 top
//! directory; what it may cost a forger is memory, so at most `MAX_BYTES` of it are read.

use crate::digest::Digest;
use std::collections::HashSet;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

/// The record's file name in the cache.
pub const FILE: &str = "code";

/// At most this many bytes of the record are read (~700,000 digests).
const MAX_BYTES: u64 = 64 << 20;

#[derive(Default)]
struct Known {
    set: HashSet<Digest>,
    /// How far the file was read (complete lines only), and which inode it was.
    read: u64,
    ino: u64,
    loaded: bool,
}

pub(crate) struct CodeRecord {
    path: PathBuf,
    known: RwLock<Known>,
    /// Bumped whenever a digest is learned: what was concluded from the record before may be
    /// stale (`stage::plan`'s memo of which subtrees hold code).
    generation: AtomicU64,
}

impl CodeRecord {
    pub(crate) fn new(root: &Path) -> CodeRecord {
        CodeRecord {
            path: root.join(FILE),
            known: RwLock::new(Known::default()),
            generation: AtomicU64::new(0),
        }
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// Whether `d` is recorded as Mach-O code (the record is loaded on the first call).
    pub(crate) fn contains(&self, d: &Digest) -> bool {
        {
            let k = self.known.read().unwrap();
            if k.loaded {
                return k.set.contains(d);
            }
        }
        self.refresh();
        self.known.read().unwrap().set.contains(d)
    }

    /// Read what other processes appended since the last look (all of it on the first call,
    /// or when `gc` replaced the file).
    pub(crate) fn refresh(&self) {
        let Ok(m) = std::fs::metadata(&self.path) else {
            self.known.write().unwrap().loaded = true;
            return;
        };
        {
            let k = self.known.read().unwrap();
            if k.loaded && k.ino == m.ino() && k.read >= m.len() {
                return;
            }
        }
        let mut k = self.known.write().unwrap();
        if k.ino != m.ino() {
            k.read = 0;
            k.ino = m.ino();
        }
        let before = k.set.len();
        if let Err(e) = self.read_tail(&mut k) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot read the record of Mach-O code blobs; those not known yet are cloned");
        }
        k.loaded = true;
        if k.set.len() != before {
            self.generation.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn read_tail(&self, k: &mut Known) -> std::io::Result<()> {
        if k.read >= MAX_BYTES {
            return Ok(());
        }
        let mut f = std::fs::File::open(&self.path)?;
        f.seek(std::io::SeekFrom::Start(k.read))?;
        let mut buf = Vec::new();
        f.take(MAX_BYTES - k.read).read_to_end(&mut buf)?;
        // Complete lines only: a line being appended right now is read next time.
        let Some(end) = buf.iter().rposition(|&b| b == b'\n') else {
            return Ok(());
        };
        for line in buf[..end].split(|&b| b == b'\n') {
            if let Some(d) = std::str::from_utf8(line)
                .ok()
                .and_then(|l| Digest::parse(l.trim()).ok())
                .filter(|d| !d.is_empty())
            {
                k.set.insert(d);
            }
        }
        k.read += end as u64 + 1;
        if k.read >= MAX_BYTES {
            tracing::warn!(path = %self.path.display(), bytes = MAX_BYTES, "the record of Mach-O code blobs is larger than clonestage reads; the rest is ignored (gc rewrites it)");
        }
        Ok(())
    }

    /// Record `d` as code: appended for every process, and known here at once.
    pub(crate) fn record(&self, d: &Digest) {
        if d.is_empty() || self.contains(d) {
            return;
        }
        let line = format!("{d}\n");
        let r = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = r {
            // Then it is cloned like any other file: the record only ever adds links.
            tracing::warn!(path = %self.path.display(), digest = %d, error = %e, "cannot record a Mach-O code blob");
        }
        if self.known.write().unwrap().set.insert(*d) {
            self.generation.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Rewrite the file with only the digests `keep` says are still in the cache (gc; the
    /// caller holds `gc.lock`). A line another process appends to the old file meanwhile is
    /// lost: that blob is cloned until it is recorded again.
    pub(crate) fn compact(&self, tmp: &Path, keep: impl Fn(&Digest) -> bool) {
        self.refresh();
        let kept: Vec<Digest> = {
            let k = self.known.read().unwrap();
            k.set.iter().filter(|d| keep(d)).copied().collect()
        };
        let text: String = kept.iter().map(|d| format!("{d}\n")).collect();
        let r = std::fs::write(tmp, text).and_then(|_| std::fs::rename(tmp, &self.path));
        if let Err(e) = r {
            let _ = std::fs::remove_file(tmp);
            tracing::warn!(path = %self.path.display(), error = %e, "cannot rewrite the record of Mach-O code blobs");
            return;
        }
        let mut k = self.known.write().unwrap();
        k.set = kept.into_iter().collect();
        k.ino = std::fs::metadata(&self.path).map(|m| m.ino()).unwrap_or(0);
        k.read = std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0);
        self.generation.fetch_add(1, Ordering::Relaxed);
    }
}

impl super::Cache {
    /// Whether blob `d` is Mach-O code (`macho::is_code`), as recorded when it entered the
    /// cache: a lookup in memory (the record is read on the first call).
    pub fn is_code(&self, d: &Digest) -> bool {
        self.code.contains(d)
    }

    /// Learn the code blobs other processes recorded since the last look (one stat when none).
    pub fn refresh_code_record(&self) {
        self.code.refresh()
    }

    /// Changes whenever a code digest is learned (see `code_record::CodeRecord::generation`).
    pub(crate) fn code_generation(&self) -> u64 {
        self.code.generation()
    }

    /// Record blob `d` as Mach-O code (its bytes were sniffed as they entered).
    pub(crate) fn note_code(&self, d: &Digest) {
        self.code.record(d)
    }
}

#[cfg(test)]
mod tests {
    use crate::cas::{Cache, PutFile};
    use crate::macho::samples::{fat, thin};
    use crate::Digest;

    fn lines(c: &Cache) -> usize {
        std::fs::read_to_string(c.root().join(super::FILE))
            .unwrap_or_default()
            .lines()
            .count()
    }

    #[test]
    fn code_blobs_are_recorded_by_every_way_in_and_survive_a_restart() {
        let t = tempfile::tempdir().unwrap();
        let c = Cache::open(&t.path().join("c")).unwrap();
        let exe = c.put_bytes(&thin(0x2, 5000), None).unwrap();
        let dylib_src = t.path().join("libA.dylib");
        std::fs::write(&dylib_src, thin(0x6, 7000)).unwrap();
        let dylib = c.put_file(&dylib_src, PutFile::CloneOrCopy, None).unwrap();
        let bundle_src = t.path().join("Macros");
        std::fs::write(&bundle_src, thin(0x8, 6000)).unwrap();
        let bundle = c.put_file(&bundle_src, PutFile::Move, None).unwrap();
        let universal = fat(&[thin(0x2, 9000), thin(0x2, 4000)], true);
        let mut up = c.new_upload().unwrap();
        for chunk in universal.chunks(1000) {
            up.write_chunk(chunk).unwrap();
        }
        let fat_exe = Digest::of_bytes(&universal);
        c.commit_upload(up, &fat_exe).unwrap();
        let object = c.put_bytes(&thin(0x1, 5000), None).unwrap();
        let mut class = vec![0xca, 0xfe, 0xba, 0xbe, 0, 0, 0, 61];
        class.resize(300, 7);
        let class = c.put_bytes(&class, None).unwrap();
        let text = c.put_bytes(b"hello", None).unwrap();
        let code = [exe, dylib, bundle, fat_exe];
        for d in code {
            assert!(c.is_code(&d), "{d}");
        }
        for d in [object, class, text] {
            assert!(!c.is_code(&d), "{d}");
        }
        // Offered again: known already, no second line.
        c.put_bytes(&thin(0x2, 5000), None).unwrap();
        assert_eq!(lines(&c), 4);
        // A restart reads the record.
        let again = Cache::open(c.root()).unwrap();
        for d in code {
            assert!(again.is_code(&d), "{d} after a restart");
        }
        assert!(!again.is_code(&object) && !again.is_code(&text));
    }

    #[test]
    fn another_process_records_are_learned_at_the_next_refresh() {
        let t = tempfile::tempdir().unwrap();
        let a = Cache::open(&t.path().join("c")).unwrap();
        let b = Cache::open(a.root()).unwrap();
        let d = Digest::of_bytes(&thin(0x6, 3000));
        assert!(!b.is_code(&d));
        let gen = b.code_generation();
        a.put_bytes(&thin(0x6, 3000), None).unwrap();
        assert!(!b.is_code(&d), "b has not looked yet");
        b.refresh_code_record();
        assert!(b.is_code(&d));
        assert_ne!(
            b.code_generation(),
            gen,
            "what was concluded before may be stale"
        );
    }

    #[test]
    fn verify_records_code_that_entered_before_the_record_existed() {
        let t = tempfile::tempdir().unwrap();
        let c = Cache::open(&t.path().join("c")).unwrap();
        let d = c.put_bytes(&thin(0x2, 4000), None).unwrap();
        std::fs::remove_file(c.root().join(super::FILE)).unwrap();
        let old = Cache::open(c.root()).unwrap();
        assert!(
            !old.is_code(&d),
            "a cache from before the record knows nothing"
        );
        let (checked, bad) = old.verify().unwrap();
        assert!(checked >= 1 && bad.is_empty());
        assert!(old.is_code(&d));
        assert!(
            Cache::open(c.root()).unwrap().is_code(&d),
            "and it is on disk"
        );
    }
}
