//! The ready work dirs: a few `work/<pid>-<n>/` dirs made ahead of time (by the janitor
//! thread, `janitor`), each with its empty stdout and stderr files. An action that takes one
//! creates no inode before staging, and the wrapper opens its two files instead of creating
//! them (three inode creations, ~0.6 ms per action on this project's CI ext4, were on every
//! action's critical path). Each is filled in a sibling directory (`<cache>/work-making/`)
//! and renamed into `<cache>/work/` whole, so no reader of `work/` (a test looking for
//! leftovers, `sweep`) ever sees half of one. Shutdown removes them (`clear`).

use super::workdir::{fresh_name, remove, WorkDir, STD_STREAMS};
use crate::failure::Failure;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Work dirs made ahead of time, each holding empty `stdout` and `stderr` files.
pub(crate) struct ReadyDirs {
    base: PathBuf,
    /// Where one is filled before it is renamed into `base` (same filesystem).
    making: PathBuf,
    target: usize,
    /// The ready dirs, and whether `clear` closed the store (shutdown).
    dirs: Mutex<(Vec<PathBuf>, bool)>,
    /// Making one failed once (`prepare_one`): actions make their own from then on.
    failed: AtomicBool,
}

impl ReadyDirs {
    /// Keep `target` ready in `base`, each made in `making` first.
    pub fn new(base: PathBuf, making: PathBuf, target: usize) -> ReadyDirs {
        ReadyDirs {
            base,
            making,
            target,
            dirs: Mutex::new((Vec::new(), false)),
            failed: AtomicBool::new(false),
        }
    }

    /// A ready one if there is one, else a new one.
    pub fn take(&self) -> Result<WorkDir, Failure> {
        match self.dirs.lock().unwrap().0.pop() {
            Some(path) => Ok(WorkDir { path }),
            None => WorkDir::create(&self.base),
        }
    }

    /// Fewer than the target are ready (and making them has not failed).
    pub fn wanted(&self) -> bool {
        let d = self.dirs.lock().unwrap();
        !d.1 && d.0.len() < self.target && !self.failed.load(Ordering::SeqCst)
    }

    /// Make one more for the janitor; after a failure (logged) no more are wanted.
    pub fn prepare_one(&self) {
        if let Err(e) = self.make_one() {
            tracing::warn!(error = %e, "cannot make a work dir ahead of time; actions make their own");
            self.failed.store(true, Ordering::SeqCst);
        }
    }

    /// Make one more: filled under `making`, then renamed into `base` whole.
    pub fn make_one(&self) -> std::io::Result<()> {
        let name = fresh_name();
        let (new, path) = (self.making.join(&name), self.base.join(&name));
        let with = |op: &str, p: &Path, e: std::io::Error| {
            std::io::Error::new(e.kind(), format!("{op} {}: {e}", p.display()))
        };
        std::fs::create_dir(&new).map_err(|e| with("mkdir", &new, e))?;
        let made = STD_STREAMS.iter().try_for_each(|f| {
            let p = new.join(f);
            std::fs::File::create(&p)
                .map(drop)
                .map_err(|e| with("create", &p, e))
        });
        // The final name is this process's own (pid and sequence): nothing else makes it.
        let made =
            made.and_then(|()| std::fs::rename(&new, &path).map_err(|e| with("rename", &new, e)));
        if let Err(e) = made {
            let _ = remove(&new);
            return Err(e);
        }
        let mut d = self.dirs.lock().unwrap();
        if d.1 {
            // Closed while this one was made.
            drop(d);
            return remove(&path).map_err(std::io::Error::other);
        }
        d.0.push(path);
        Ok(())
    }

    /// Remove the ready ones and make no more (shutdown).
    pub fn clear(&self) {
        let ready = {
            let mut d = self.dirs.lock().unwrap();
            d.1 = true;
            std::mem::take(&mut d.0)
        };
        for p in ready {
            if let Err(e) = remove(&p) {
                tracing::warn!(path = %p.display(), error = %e, "cannot remove a ready work dir");
            }
        }
    }
}

/// Whether `dir` is a work dir made ahead of time (`ReadyDirs`) and not used yet: it holds
/// exactly the empty `STD_STREAMS` files. The server's tests tell leftovers from these with it.
pub fn is_ready_work_dir(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut names = Vec::new();
    for e in entries {
        match e {
            Ok(e) if e.metadata().is_ok_and(|m| m.is_file() && m.len() == 0) => {
                names.push(e.file_name())
            }
            _ => return false,
        }
    }
    names.sort();
    let mut want: Vec<std::ffi::OsString> = STD_STREAMS.iter().map(Into::into).collect();
    want.sort();
    names == want
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `ReadyDirs` keeping `n` in `<d>/work`, made in `<d>/work-making`.
    pub(crate) fn ready_in(d: &Path, n: usize) -> ReadyDirs {
        let (base, making) = (d.join("work"), d.join("work-making"));
        std::fs::create_dir_all(&base).unwrap();
        std::fs::create_dir_all(&making).unwrap();
        ReadyDirs::new(base, making, n)
    }

    /// CI under load (issue 23 item 7): a test that listed `work/` while the janitor was
    /// making a ready dir saw it half made (no files yet) and called it a leftover. Ready dirs
    /// are filled elsewhere and renamed in whole, so a reader of `work/` sees none half made.
    #[test]
    fn a_reader_of_the_work_dir_never_sees_a_ready_dir_half_made() {
        use std::sync::atomic::AtomicBool;
        let d = tempfile::tempdir().unwrap();
        let ready = ready_in(d.path(), 1_000);
        let base = d.path().join("work");
        let done = AtomicBool::new(false);
        let (seen, half) = std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let (mut seen, mut half) = (0usize, Vec::new());
                while !done.load(Ordering::SeqCst) {
                    for e in std::fs::read_dir(&base).unwrap().flatten() {
                        seen += 1;
                        if !is_ready_work_dir(&e.path()) {
                            half.push(e.file_name());
                        }
                    }
                }
                (seen, half)
            });
            for _ in 0..300 {
                ready.make_one().unwrap();
            }
            done.store(true, Ordering::SeqCst);
            reader.join().unwrap()
        });
        assert!(seen > 0, "the reader never looked");
        assert!(half.is_empty(), "half-made ready dirs seen: {half:?}");
        ready.clear();
        assert_eq!(std::fs::read_dir(&base).unwrap().count(), 0);
        assert_eq!(
            std::fs::read_dir(d.path().join("work-making"))
                .unwrap()
                .count(),
            0
        );
    }

    #[test]
    fn ready_dirs_hold_empty_streams_and_are_taken_before_new_ones_are_made() {
        let d = tempfile::tempdir().unwrap();
        let ready = ready_in(d.path(), 2);
        assert!(ready.wanted());
        ready.make_one().unwrap();
        ready.make_one().unwrap();
        assert!(!ready.wanted());
        let w = ready.take().unwrap();
        for f in STD_STREAMS {
            assert_eq!(std::fs::read(w.file(f)).unwrap(), b"", "{f}");
        }
        assert!(ready.wanted());
        let _second = ready.take().unwrap();
        // None ready: a new, empty one.
        let third = ready.take().unwrap();
        assert_eq!(std::fs::read_dir(&third.path).unwrap().count(), 0);
        ready.make_one().unwrap();
        ready.clear();
        assert!(!ready.wanted(), "closed");
        ready.make_one().unwrap();
        drop((w, _second, third));
        for sub in ["work", "work-making"] {
            assert_eq!(
                std::fs::read_dir(d.path().join(sub)).unwrap().count(),
                0,
                "all removed from {sub}"
            );
        }
    }
}
