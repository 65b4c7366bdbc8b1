//! Per-device choice of staging method: probed once by trying the real operations (a cache
//! and a destination on one btrfs filesystem can still differ in st_dev, and reflinks work
//! across filesystems' subvolumes while hardlinks do not), remembered in memory and in
//! `<cache>/devices.json`, downgraded on the first runtime failure with a warning, once.
//!
//! It also keeps the two costs that decide when cloning a whole subtree pays: the running
//! average cost of placing one file, and of one tree clone (a btrfs snapshot commits the
//! filesystem transaction, so it costs 3 ms on a quiet volume and 10x that under write load;
//! measuring it as it happens is what keeps the choice right under real build load).

use crate::cas::Cache;
use crate::platform::{self, cstr, Dir, TreeClone};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

/// How single files are placed, in order of preference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileMethod {
    /// clonefile (macOS) or FICLONE (Linux): a private copy-on-write inode.
    Clone,
    /// The cache's own inode (never chmod'ed, utime'd or opened for writing).
    Hardlink,
    Copy,
}

/// What the caller asks for; `Auto` uses the probed method of the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MethodPreference {
    #[default]
    Auto,
    Clone,
    Hardlink,
    Copy,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeviceProfile {
    pub file_method: FileMethod,
    pub tree_clone: Option<TreeClone>,
    /// Running averages in microseconds.
    pub file_us: f64,
    pub tree_clone_us: f64,
    /// Fallback reasons already warned about.
    #[serde(default)]
    pub warned: BTreeSet<String>,
}

#[derive(Default)]
pub(crate) struct Devices {
    map: Mutex<HashMap<(u64, u64), DeviceProfile>>,
    /// When cost estimates were last saved: at most every `SAVE_ESTIMATES_EVERY` (a rename
    /// per stage showed up at 10-40 ms on a busy ext4 volume).
    last_saved: Mutex<Option<Instant>>,
}

const SAVE_ESTIMATES_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

fn key_str(k: (u64, u64)) -> String {
    format!("{}:{}", k.0, k.1)
}

impl Devices {
    pub(crate) fn key(cache: &Cache, dest_parent: &Path) -> std::io::Result<(u64, u64)> {
        Ok((cache.dev(), std::fs::metadata(dest_parent)?.dev()))
    }

    /// `key` for a destination parent this process has open.
    pub(crate) fn key_of(
        cache: &Cache,
        dest_parent: &crate::platform::Dir,
    ) -> std::io::Result<(u64, u64)> {
        #[allow(clippy::unnecessary_cast)] // dev_t is i32 on macOS
        let dev = dest_parent.stat()?.st_dev as u64;
        Ok((cache.dev(), dev))
    }

    /// The profile for (cache, destination parent), probing it if neither this process nor
    /// an earlier one has.
    pub(crate) fn get(&self, cache: &Cache, key: (u64, u64), dest_parent: &Path) -> DeviceProfile {
        if let Some(p) = self.map.lock().unwrap().get(&key) {
            return p.clone();
        }
        let persisted = load_all(cache).remove(&key_str(key));
        let p = persisted.unwrap_or_else(|| {
            let p = probe(cache, dest_parent);
            tracing::info!(device = %key_str(key), method = ?p.file_method, tree = ?p.tree_clone, "probed staging method");
            p
        });
        self.map.lock().unwrap().insert(key, p.clone());
        self.persist(cache, key);
        p
    }

    /// Record a runtime fallback: downgrade the device and warn if this reason is new.
    pub(crate) fn fallback(
        &self,
        cache: &Cache,
        key: (u64, u64),
        from: FileMethod,
        to: FileMethod,
        reason: &str,
    ) {
        let mut map = self.map.lock().unwrap();
        let Some(p) = map.get_mut(&key) else { return };
        if p.file_method < to {
            p.file_method = to;
        }
        let new = p.warned.insert(format!("{from:?}->{to:?}:{reason}"));
        drop(map);
        if new {
            tracing::warn!(device = %key_str(key), ?from, ?to, reason, "staging falls back to a slower method on this device");
            self.persist(cache, key);
        }
    }

    pub(crate) fn no_tree_clone(&self, cache: &Cache, key: (u64, u64), reason: &str) {
        if let Some(p) = self.map.lock().unwrap().get_mut(&key) {
            p.tree_clone = None;
            p.warned.insert(format!("tree:{reason}"));
        }
        tracing::warn!(device = %key_str(key), reason, "whole-tree clones fail on this device; staging per file");
        self.persist(cache, key);
    }

    /// Fold measured costs into the running averages. True when they moved by >25% and the
    /// last save is old enough: the caller then hands the key to the ledger, whose flush
    /// `persist`s (a read, a write and a rename of devices.json: no business of the timed
    /// path).
    pub(crate) fn observe(
        &self,
        key: (u64, u64),
        file_us: Option<f64>,
        tree_us: Option<f64>,
    ) -> bool {
        let mut map = self.map.lock().unwrap();
        let Some(p) = map.get_mut(&key) else {
            return false;
        };
        let (f0, t0) = (p.file_us, p.tree_clone_us);
        if let Some(f) = file_us {
            p.file_us = 0.7 * p.file_us + 0.3 * f;
        }
        if let Some(t) = tree_us {
            p.tree_clone_us = 0.7 * p.tree_clone_us + 0.3 * t;
        }
        let moved = (p.file_us - f0).abs() > 0.25 * f0 || (p.tree_clone_us - t0).abs() > 0.25 * t0;
        drop(map);
        if moved {
            let mut last = self.last_saved.lock().unwrap();
            if !matches!(*last, Some(t) if t.elapsed() < SAVE_ESTIMATES_EVERY) {
                *last = Some(Instant::now());
                return true;
            }
        }
        false
    }

    pub(crate) fn persist(&self, cache: &Cache, key: (u64, u64)) {
        let Some(p) = self.map.lock().unwrap().get(&key).cloned() else {
            return;
        };
        let mut all = load_all(cache);
        all.insert(key_str(key), p);
        let path = cache.root().join("devices.json");
        let tmp = cache.root().join("tmp").join(cache.tmp_name("devices"));
        let body = serde_json::to_vec_pretty(&all).expect("profiles serialize");
        if let Err(e) = std::fs::write(&tmp, body).and_then(|_| std::fs::rename(&tmp, &path)) {
            tracing::warn!(path = %path.display(), error = %e, "cannot save device profile");
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

impl crate::ledger::EstimateStore for Devices {
    fn persist_estimates(&self, cache: &Cache, key: crate::ledger::DeviceKey) {
        self.persist(cache, key);
    }
}

fn load_all(cache: &Cache) -> BTreeMap<String, DeviceProfile> {
    std::fs::read(cache.root().join("devices.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Try clone, then hardlink, from the cache into `dest_parent`; and a tree clone.
fn probe(cache: &Cache, dest_parent: &Path) -> DeviceProfile {
    let src_name = cache.tmp_name("probe");
    let src = cache.root().join("tmp").join(&src_name);
    let mut prof = DeviceProfile {
        file_method: FileMethod::Copy,
        tree_clone: None,
        file_us: 50.0,
        tree_clone_us: 1e9,
        warned: BTreeSet::new(),
    };
    let Ok(dst) = Dir::open(dest_parent) else {
        return prof;
    };
    if std::fs::write(&src, b"clonestage probe").is_err() {
        return prof;
    }
    let dst_name = cstr(format!(".clonestage-probe-{src_name}")).expect("no NUL");
    let t = Instant::now();
    if platform::clone_file(&src, &dst, &dst_name, 0o444).is_ok() {
        prof.file_method = FileMethod::Clone;
    } else if platform::hardlink(&src, &dst, &dst_name).is_ok() {
        prof.file_method = FileMethod::Hardlink;
    }
    prof.file_us = (t.elapsed().as_secs_f64() * 1e6).max(5.0);
    let _ = dst.unlink_at(&dst_name, false);
    let _ = std::fs::remove_file(&src);
    if prof.file_method == FileMethod::Clone {
        prof.tree_clone = probe_tree_clone(cache, &dst, dest_parent).map(|(kind, us)| {
            prof.tree_clone_us = us;
            kind
        });
    }
    prof
}

/// Make a tree container in the cache and clone it into the destination; returns the kind
/// and what the clone cost.
fn probe_tree_clone(cache: &Cache, dst: &Dir, dest_parent: &Path) -> Option<(TreeClone, f64)> {
    let kind = platform::tree_clone_kind(cache.root())?;
    let name = cache.tmp_name("probe-tree");
    let src = cache.root().join("tmp").join(&name);
    let cname = cstr(&name).ok()?;
    platform::new_tree_container(cache.tmp_dir(), &cname).ok()?;
    // Two clones, keep the cheaper: the first also pays for committing the probe's own writes.
    let mut best: Option<f64> = None;
    for i in 0..2 {
        let dst_name = cstr(format!(".clonestage-probe-{name}-{i}")).ok()?;
        let t = Instant::now();
        let ok = platform::clone_tree(&src, dst, &dst_name).is_ok();
        let us = t.elapsed().as_secs_f64() * 1e6;
        if !ok {
            break;
        }
        let _ = crate::remove::remove_tree(&dest_parent.join(dst_name.to_str().unwrap_or("")));
        best = Some(best.map_or(us, |b: f64| b.min(us)));
    }
    let _ = crate::remove::remove_tree(&src);
    best.map(|us| (kind, us))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moved_estimates_fall_due_once_per_interval_and_only_persist_writes_them() {
        let t = tempfile::tempdir().unwrap();
        let cache = Cache::open(&t.path().join("cache")).unwrap();
        let devices = Devices::default();
        let parent = Dir::open(t.path()).unwrap();
        let key = Devices::key_of(&cache, &parent).unwrap();
        let f0 = devices.get(&cache, key, t.path()).file_us;
        let saved = cache.root().join("devices.json");
        std::fs::remove_file(&saved).unwrap(); // written by the first sight (the probe)
        assert!(!devices.observe(key, Some(f0), None), "unmoved");
        assert!(devices.observe(key, Some(f0 * 10.0 + 100.0), None), "moved");
        assert!(!saved.exists(), "observe itself writes nothing");
        assert!(
            !devices.observe(key, Some(f0 * 1000.0 + 1e5), None),
            "due at most every {SAVE_ESTIMATES_EVERY:?}"
        );
        devices.persist(&cache, key);
        let all = load_all(&cache);
        let p = &all[&key_str(key)];
        assert!(p.file_us > f0 * 2.0, "{} vs {f0}", p.file_us);
    }
}
