//! The stager's bookkeeping goes through its ledger: a stage (successful or failed) and
//! `check_inputs` leave stats.json, access.log and devices.json's estimates untouched until the
//! ledger is flushed, and everything is there after.

use super::device::Devices;
use super::*;
use crate::stats::{self, Counters};
use crate::tree::IngestOptions;

fn setup() -> (tempfile::TempDir, Stager, Digest) {
    let t = tempfile::tempdir().unwrap();
    let cache = Arc::new(Cache::open(&t.path().join("cache")).unwrap());
    let src = t.path().join("src");
    std::fs::create_dir_all(src.join("pkg")).unwrap();
    for i in 0..20 {
        std::fs::write(src.join(format!("pkg/f{i}")), format!("file {i}\n")).unwrap();
    }
    let st = Stager::new(cache);
    let d = tree::ingest_path(st.cache(), &src, IngestOptions::default()).unwrap();
    (t, st, d)
}

fn req(root: Digest, dest: PathBuf) -> StageRequest {
    StageRequest {
        root,
        dest,
        method: MethodPreference::Copy,
        ..Default::default()
    }
}

#[test]
fn a_stage_is_on_disk_only_once_its_ledger_is_flushed() {
    let (t, st, d) = setup();
    let cache = st.cache().root().to_path_buf();
    let staged = st.stage(&req(d, t.path().join("a"))).unwrap();
    assert_eq!(staged.counters.copy, 20);
    assert!(st.ledger().is_dirty());
    assert_eq!(stats::load(&cache).unwrap(), Counters::default());
    assert!(!cache.join("access.log").exists());

    st.ledger().flush();
    let c = stats::load(&cache).unwrap();
    assert_eq!((c.stages, c.copy, c.stage_failures), (1, 20, 0));
    let log = std::fs::read_to_string(cache.join("access.log")).unwrap();
    assert_eq!(log.lines().count(), 1);
    assert!(log.trim_end().ends_with(&d.to_string()), "{log}");
}

#[test]
fn a_failed_stage_is_counted_through_the_ledger_alone() {
    let (t, st, d) = setup();
    let cache = st.cache().root().to_path_buf();
    std::fs::create_dir(t.path().join("taken")).unwrap();
    let e = st.stage(&req(d, t.path().join("taken"))).err().unwrap();
    assert!(matches!(e, Error::DestinationExists(_)), "{e}");
    assert!(st.ledger().is_dirty());
    assert!(
        !cache.join("stats.json").exists(),
        "a failed stage wrote stats.json itself"
    );
    st.ledger().flush();
    let c = stats::load(&cache).unwrap();
    assert_eq!((c.stages, c.stage_failures), (0, 1));
    assert!(!cache.join("access.log").exists(), "nothing was staged");
}

#[test]
fn moved_estimates_are_saved_by_the_flush() {
    let (t, st, d) = setup();
    let devices = st.cache().root().join("devices.json");
    // The first stage probes the device and saves its profile (a decision, not bookkeeping).
    let staged = st.stage(&req(d, t.path().join("a"))).unwrap();
    drop(staged);
    let probed = std::fs::read_to_string(&devices).unwrap();
    // Measured costs far from the probe's move the estimates. Due once per interval: either
    // the stage above made them due (its key waits in the ledger) or this does.
    let key = Devices::key(st.cache(), t.path()).unwrap();
    if st.devices.observe(key, Some(1e6), None) {
        st.ledger.staged(d, &Counters::default(), Some(key));
    }
    assert_eq!(std::fs::read_to_string(&devices).unwrap(), probed);
    st.ledger().flush();
    assert_ne!(std::fs::read_to_string(&devices).unwrap(), probed);
}
