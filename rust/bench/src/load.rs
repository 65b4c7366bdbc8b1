//! Background write load for the `*_loaded` methods, shaped like a build writing its outputs:
//! a thread keeps creating new 64 KiB files on the measured filesystem (never fsync'ed) and
//! removes the oldest, so `--load-mib` MiB of them exist at a time (64 MiB: 1,024 files), at
//! `--load-rate` MiB/s (64: 1,024 files a second). A btrfs snapshot commits the filesystem
//! transaction, so it waits for the metadata these creations and removals leave pending.
//!
//! Measured while choosing this (btrfs, large_flat subtree snapshot, median): quiet 2.4 ms;
//! 1 MiB files rewritten in place at 128 MiB/s 9 ms; new 1 MiB files at 128 MiB/s 5 ms; new
//! 64 KiB files at 16 / 64 / 128 MiB/s 4.7 / 20 / 28 ms. Data alone barely matters; file
//! creation (metadata) does, which is what builds do.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub const FILE_SIZE: usize = 64 * 1024;

pub struct Load {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<std::io::Result<u64>>>,
    dir: PathBuf,
}

impl Load {
    /// Start writing into `dir` (created fresh; removed by `stop`).
    pub fn start(dir: &Path, mib: u64, rate_mib_s: u64) -> Result<Load> {
        std::fs::create_dir(dir).with_context(|| format!("mkdir {}", dir.display()))?;
        let live = (mib.max(1) as usize * (1 << 20)) / FILE_SIZE;
        let files_per_s = rate_mib_s as f64 * ((1 << 20) / FILE_SIZE) as f64;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let d = dir.to_path_buf();
        let handle = std::thread::Builder::new()
            .name("bench-load".into())
            .spawn(move || {
                let mut buf = vec![0u8; FILE_SIZE];
                let t0 = Instant::now();
                let mut n = 0usize;
                while !flag.load(Ordering::Relaxed) {
                    if files_per_s > 0.0 {
                        let due = Duration::from_secs_f64(n as f64 / files_per_s);
                        if let Some(wait) = due.checked_sub(t0.elapsed()) {
                            std::thread::sleep(wait.min(Duration::from_millis(10)));
                            continue;
                        }
                    }
                    buf[..8].copy_from_slice(&(n as u64).to_le_bytes());
                    std::fs::File::create_new(d.join(format!("o{n}")))?.write_all(&buf)?;
                    if n >= live {
                        std::fs::remove_file(d.join(format!("o{}", n - live)))?;
                    }
                    n += 1;
                }
                Ok(n as u64 * FILE_SIZE as u64)
            })?;
        Ok(Load {
            stop,
            handle: Some(handle),
            dir: dir.to_path_buf(),
        })
    }

    /// Stop the writer and remove its files; returns the bytes it wrote.
    pub fn stop(mut self) -> Result<u64> {
        self.finish()
    }

    fn finish(&mut self) -> Result<u64> {
        self.stop.store(true, Ordering::Relaxed);
        let n = match self.handle.take() {
            Some(h) => h
                .join()
                .expect("load thread panicked")
                .context("background write load")?,
            None => return Ok(0),
        };
        clonestage_engine::remove::remove_tree(&self.dir)?;
        Ok(n)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}
