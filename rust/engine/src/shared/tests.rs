//! The registry of shared directories: leases against clears and eviction, and what an action
//! may leave in a directory (symlinks out of it, a symlink in its place, more bytes than
//! allowed) never making clonestage touch anything outside it.

use super::*;
use std::time::Duration;

fn setup() -> (tempfile::TempDir, SharedDirs) {
    let t = tempfile::Builder::new()
        .prefix("cs-shared-reg-")
        .tempdir()
        .unwrap();
    let cache = Cache::open(&t.path().join("cache")).unwrap();
    let s = SharedDirs::open(&cache, Pattern::parse_list(&[] as &[&str]).unwrap()).unwrap();
    (t, s)
}

const REL: &str = "bazel-out/k8-fastbuild/bin/_swift_module_cache";

/// A directory outside the cache with a file that must survive everything.
fn victim(t: &Path) -> PathBuf {
    let v = t.join("victim");
    std::fs::create_dir_all(v.join("sub")).unwrap();
    std::fs::write(v.join("sub/keep.txt"), b"keep").unwrap();
    v
}

fn victim_intact(v: &Path) {
    assert_eq!(std::fs::read(v.join("sub/keep.txt")).unwrap(), b"keep");
}

#[test]
fn a_clear_waits_for_the_roots_holding_the_directory_and_empties_it() {
    let (_t, s) = setup();
    let s = Arc::new(s);
    let lease = s.lease(&[REL.to_string()]).unwrap();
    let dir = lease.dirs()[0].1.clone();
    assert_eq!(dir, s.path_for(REL));
    std::fs::write(dir.join("Foundation-1.pcm"), vec![1u8; 1000]).unwrap();
    let s2 = s.clone();
    let clear = std::thread::spawn(move || s2.clear(REL).unwrap());
    std::thread::sleep(Duration::from_millis(100));
    assert!(!clear.is_finished(), "cleared under a running action");
    assert!(dir.join("Foundation-1.pcm").exists());
    drop(lease);
    assert_eq!(clear.join().unwrap(), 1000);
    assert!(dir.is_dir(), "an empty directory is left in place");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    // No trash left behind.
    let names: Vec<String> = std::fs::read_dir(s.base())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec![dir_name(REL)]);
}

#[test]
fn eviction_clears_only_directories_no_root_holds() {
    let (_t, s) = setup();
    let other = "bazel-out/k8-opt/bin/_swift_module_cache";
    let held = s.lease(&[REL.to_string()]).unwrap();
    std::fs::write(held.dirs()[0].1.join("a.pcm"), vec![0u8; 500]).unwrap();
    let free = s.lease(&[other.to_string()]).unwrap();
    std::fs::write(free.dirs()[0].1.join("b.pcm"), vec![0u8; 700]).unwrap();
    drop(free);
    assert_eq!(s.bytes(), 1200);
    let e = s.evict_idle(u64::MAX);
    assert_eq!((e.dirs, e.bytes, e.held), (1, 700, 1));
    assert!(held.dirs()[0].1.join("a.pcm").exists());
    assert_eq!(s.bytes(), 500);
    drop(held);
    assert_eq!(s.evict_idle(1).bytes, 500);
    assert_eq!(s.bytes(), 0);
}

#[test]
fn eviction_stops_once_enough_is_freed_least_recently_leased_first() {
    let (_t, s) = setup();
    let (a, b) = (
        "bazel-out/a/bin/_swift_module_cache",
        "bazel-out/b/bin/_swift_module_cache",
    );
    for rel in [a, b] {
        let l = s.lease(&[rel.to_string()]).unwrap();
        std::fs::write(l.dirs()[0].1.join("m.pcm"), vec![0u8; 100]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    let e = s.evict_idle(50);
    assert_eq!((e.dirs, e.bytes), (1, 100));
    assert!(
        !s.path_for(a).join("m.pcm").exists(),
        "the older one goes first"
    );
    assert!(s.path_for(b).join("m.pcm").exists());
}

#[test]
fn symlinks_an_action_leaves_in_the_directory_are_removed_never_followed() {
    let (t, s) = setup();
    let v = victim(t.path());
    let l = s.lease(&[REL.to_string()]).unwrap();
    let dir = l.dirs()[0].1.clone();
    std::os::unix::fs::symlink(&v, dir.join("out")).unwrap();
    std::os::unix::fs::symlink(v.join("sub/keep.txt"), dir.join("file")).unwrap();
    std::fs::create_dir(dir.join("H")).unwrap();
    std::os::unix::fs::symlink("../../../../victim", dir.join("H/up")).unwrap();
    drop(l);
    assert_eq!(s.bytes(), 0, "sizes are not read through links");
    s.clear(REL).unwrap();
    victim_intact(&v);
    std::os::unix::fs::symlink(&v, dir.join("again")).unwrap();
    std::fs::write(dir.join("x"), b"x").unwrap();
    assert_eq!(s.evict_idle(u64::MAX).dirs, 1);
    victim_intact(&v);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

#[test]
fn a_symlink_put_in_place_of_the_directory_is_replaced_not_followed() {
    let (t, s) = setup();
    let v = victim(t.path());
    let dir = s.path_for(REL);
    // What `cd bazel-out/.../_swift_module_cache/.. && rm -r X && ln -s victim X` leaves.
    std::os::unix::fs::symlink(&v, &dir).unwrap();
    let l = s.lease(&[REL.to_string()]).unwrap();
    assert!(std::fs::symlink_metadata(&dir).unwrap().is_dir());
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    drop(l);
    victim_intact(&v);
    std::fs::remove_dir(&dir).unwrap();
    std::os::unix::fs::symlink(&v, &dir).unwrap();
    assert_eq!(s.bytes(), 0);
    s.evict_idle(u64::MAX);
    s.clear(REL).unwrap();
    victim_intact(&v);
}

#[test]
fn a_directory_too_deep_to_measure_is_evicted_first() {
    let (_t, s) = setup();
    let l = s.lease(&[REL.to_string()]).unwrap();
    let dir = l.dirs()[0].1.clone();
    drop(l);
    // Deeper than PATH_MAX allows to walk by path.
    let mut d = crate::platform::Dir::open(&dir).unwrap();
    let name =
        crate::platform::cstr("dddddddddddddddddddddddddddddddddddddddddddddddddddddddd").unwrap();
    for _ in 0..100 {
        d = d.mkdir_at(&name, 0o755).unwrap();
    }
    let u = s.usage();
    assert!(!u[0].1.complete, "{u:?}");
    assert_eq!(s.evict_idle(1).dirs, 1);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

#[test]
fn trash_an_earlier_process_left_is_removed_at_open() {
    let (t, s) = setup();
    let trash = s.base().join(".trash-1-1");
    std::fs::create_dir_all(trash.join("x")).unwrap();
    drop(s);
    let cache = Cache::open(&t.path().join("cache")).unwrap();
    let s = SharedDirs::open(&cache, Vec::new()).unwrap();
    assert!(!trash.exists());
    assert!(s.patterns().is_empty());
}
