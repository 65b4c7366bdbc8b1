//! `<cache>/access.log`: one line `<unix secs> <digest>` per staged root, appended with
//! O_APPEND (atomic for a line this short, across processes); eviction (`gc`) reads it to
//! find the least recently used roots and rewrites it compacted under `gc.lock`. Roots are
//! noted by the engine's ledger when it flushes, never on a stage's timed path.

use super::Cache;
use crate::digest::Digest;

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
    }
}
