//! `<cache>/access.log`: one line `<unix secs> <digest>` per use of a digest, appended with
//! O_APPEND (atomic for a line this short, across processes), and read back and rewritten
//! compacted under `gc.lock`. The store only keeps the file: the engine's ledger notes staged
//! roots when it flushes (never on a stage's timed path), and the collector (`crate::gc`)
//! reads them to find the least recently used roots.

use super::{Cache, GcLock};
use crate::digest::Digest;
use crate::error::{IoContext, Result};

impl Cache {
    /// Remember that `root` was used now (for LRU eviction). One O_APPEND write.
    pub fn note_access(&self, root: &Digest) {
        use std::io::Write;
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let p = self.root.join("access.log");
        let r = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p)
            .and_then(|mut f| f.write_all(format!("{secs} {root}\n").as_bytes()));
        if let Err(e) = r {
            tracing::warn!(path = %p.display(), error = %e, "cannot record cache access");
        }
    }

    /// Every `(unix secs, digest)` the log holds, in file order (lines that do not parse are
    /// skipped; no log reads as empty).
    pub fn accesses(&self) -> Vec<(u64, Digest)> {
        let text = std::fs::read_to_string(self.root.join("access.log")).unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                let (t, d) = l.split_once(' ')?;
                Some((t.parse().ok()?, Digest::parse(d).ok()?))
            })
            .collect()
    }

    /// Replace the log with `kept`, in that order (written aside, then renamed over it).
    pub fn rewrite_accesses(&self, _: &GcLock, kept: &[(u64, Digest)]) -> Result<()> {
        let log = self.root.join("access.log");
        let body: String = kept.iter().map(|(t, d)| format!("{t} {d}\n")).collect();
        let tmp = self.root.join("tmp").join(self.tmp_name("access"));
        std::fs::write(&tmp, body).ctx("write", &tmp)?;
        std::fs::rename(&tmp, &log).ctx("rename", &log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_note_appends_one_line_naming_the_root() {
        let c = tempfile::tempdir().unwrap();
        let cache = Cache::open(c.path()).unwrap();
        let (a, b) = (Digest::of_bytes(b"a"), Digest::of_bytes(b"b"));
        cache.note_access(&a);
        cache.note_access(&b);
        let text = std::fs::read_to_string(c.path().join("access.log")).unwrap();
        let roots: Vec<&str> = text.lines().map(|l| l.split_once(' ').unwrap().1).collect();
        assert_eq!(roots, vec![a.to_string(), b.to_string()]);
        let read: Vec<Digest> = cache.accesses().into_iter().map(|(_, d)| d).collect();
        assert_eq!(read, vec![a, b]);
    }

    #[test]
    fn a_rewrite_replaces_the_log_and_skips_lines_that_do_not_parse() {
        let c = tempfile::tempdir().unwrap();
        let cache = Cache::open(c.path()).unwrap();
        let a = Digest::of_bytes(b"a");
        std::fs::write(c.path().join("access.log"), format!("junk\n7 {a}\nx {a}\n")).unwrap();
        assert_eq!(cache.accesses(), vec![(7, a)]);
        cache
            .rewrite_accesses(&cache.lock_gc().unwrap(), &[(9, a)])
            .unwrap();
        assert_eq!(cache.accesses(), vec![(9, a)]);
    }
}
