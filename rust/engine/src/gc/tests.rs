//! The collector's behaviour: pins (from any process) and holds keep what they reach, least
//! recently used goes first, dead processes' pins are ignored, pins and gc never deadlock, the
//! record of code blobs and the pool's ready copies follow what was evicted.

use super::{collect, Pooled};
use crate::cas::Cache;
use crate::digest::Digest;
use crate::macho::samples::thin;
use crate::tree::{self, Directory, FileNode};

fn cache() -> (tempfile::TempDir, Cache) {
    let t = tempfile::tempdir().unwrap();
    let c = Cache::open(&t.path().join("c")).unwrap();
    (t, c)
}

/// Collect with no pool in this process and no server holding the cache.
fn gc(c: &Cache, max_bytes: u64) -> crate::error::Result<super::GcReport> {
    collect(c, Pooled::Stale(&|| false), max_bytes)
}

/// One 10,000-byte blob per byte value in `values`.
fn blobs(c: &Cache, values: std::ops::Range<u8>) -> Vec<Digest> {
    values
        .map(|i| c.put_bytes(&vec![i; 10_000], None).unwrap())
        .collect()
}

fn root_with(c: &Cache, blobs: &[Digest]) -> Digest {
    let mut files: Vec<FileNode> = blobs
        .iter()
        .map(|d| FileNode {
            name: d.hex(),
            digest: Some(d.to_proto()),
            is_executable: false,
            node_properties: None,
        })
        .collect();
    files.sort_by(|a, b| a.name.cmp(&b.name));
    tree::put_directory(
        c,
        &Directory {
            files,
            ..Default::default()
        },
    )
    .unwrap()
}

#[test]
fn eviction_never_removes_a_pinned_blob_even_from_another_process() {
    let (t, c) = cache();
    let kept: Vec<Digest> = blobs(&c, 0..5);
    let loose: Vec<Digest> = blobs(&c, 10..15);
    let root = root_with(&c, &kept);
    // A second Cache on the same directory stands for another process: separate pin file, lock.
    let other = Cache::open(&t.path().join("c")).unwrap();
    let pin = other.pin(&root).unwrap();
    let r = gc(&c, 0).unwrap();
    assert_eq!(r.pinned_roots, 1);
    for d in &kept {
        assert!(c.contains(d), "pinned blob {d} evicted");
    }
    assert!(c.contains(&root));
    for d in &loose {
        assert!(!c.contains(d), "unpinned blob {d} kept");
    }
    // Unpinning does not rewrite the pin file (saves a write per stage); the other process's
    // next pin does, and from then on the dropped root is fair game.
    drop(pin);
    let unrelated = c.put_bytes(b"unrelated", None).unwrap();
    let _next = other.pin(&unrelated).unwrap();
    gc(&c, 0).unwrap();
    for d in &kept {
        assert!(!c.contains(d), "unpinned after drop, must go");
    }
}

/// Regression (issue 10's reliability suite, two output bases under `serve --max-size`): a
/// stage pinning a new root took the pin table's mutex, then `gc.lock` shared; the server's own
/// eviction took `gc.lock` exclusively, then the mutex. Both waited forever, and so did Bazel.
#[test]
fn pins_and_gc_in_one_process_never_deadlock() {
    let (_t, c) = cache();
    let c = std::sync::Arc::new(c);
    let roots: Vec<Digest> = (0..400u32)
        .map(|i| {
            let d = c.put_bytes(&i.to_le_bytes(), None).unwrap();
            root_with(&c, &[d])
        })
        .collect();
    let (done, finished) = std::sync::mpsc::channel();
    let mut workers = Vec::new();
    for part in roots.chunks(200) {
        let (c, part, done) = (c.clone(), part.to_vec(), done.clone());
        workers.push(std::thread::spawn(move || {
            for r in &part {
                drop(c.pin(r).unwrap());
            }
            done.send(()).unwrap();
        }));
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gc = {
        let (c, stop, done) = (c.clone(), stop.clone(), done.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                gc(&c, u64::MAX).unwrap();
            }
            done.send(()).unwrap();
        })
    };
    for _ in 0..2 {
        finished
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("pinning threads stuck: a lock-order deadlock with gc");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    finished
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("gc stuck");
    for w in workers {
        w.join().unwrap();
    }
    gc.join().unwrap();
}

#[test]
fn eviction_is_least_recently_used_first() {
    let (_t, c) = cache();
    let old: Vec<Digest> = blobs(&c, 0..4);
    let new: Vec<Digest> = blobs(&c, 4..8);
    let old_root = root_with(&c, &old);
    let new_root = root_with(&c, &new);
    let log = c.root().join("access.log");
    std::fs::write(&log, format!("100 {old_root}\n200 {new_root}\n")).unwrap();
    let total = crate::cas::cache_bytes(&c);
    // Room for roughly the newer half only.
    gc(&c, total / 2 + 1000).unwrap();
    assert!(
        new.iter().all(|d| c.contains(d)),
        "recently used blobs evicted"
    );
    assert!(old.iter().all(|d| !c.contains(d)), "old blobs kept");
}

#[test]
fn a_dead_process_pin_does_not_block_eviction() {
    let (_t, c) = cache();
    let d = c.put_bytes(b"x", None).unwrap();
    let root = root_with(&c, &[d]);
    // A pin file nobody holds a lock on: its owner died.
    std::fs::write(c.root().join("pins/999999-1"), format!("{root}\n")).unwrap();
    gc(&c, 0).unwrap();
    assert!(!c.contains(&d));
    assert!(!c.root().join("pins/999999-1").exists());
}

#[test]
fn gc_drops_evicted_code_from_the_record() {
    let t = tempfile::tempdir().unwrap();
    let c = Cache::open(&t.path().join("c")).unwrap();
    let kept_size = thin(0x2, 4000);
    let a = c.put_bytes(&kept_size, None).unwrap();
    let b = c.put_bytes(&thin(0x6, 4000), None).unwrap();
    assert_eq!(lines(&c), 2);
    let r = gc(&c, 0).unwrap();
    assert_eq!(r.blobs_evicted, 2);
    assert_eq!(lines(&c), 0);
    assert!(!c.is_code(&a) && !c.is_code(&b));
    // Entering again records it again.
    c.put_bytes(&kept_size, None).unwrap();
    assert!(Cache::open(c.root()).unwrap().is_code(&a));
}

fn lines(c: &Cache) -> usize {
    std::fs::read_to_string(c.root().join(crate::cas::code_record::FILE))
        .unwrap_or_default()
        .lines()
        .count()
}

/// The eviction order's first step: a pooled copy pins every blob it links, so the pool's
/// ready copies are drained before anything is chosen (the server's eviction relied on
/// calling the pool itself before `Cache::gc`; the order now lives here).
#[test]
fn the_pools_ready_copies_go_before_eviction() {
    use crate::stage::{PoolBounds, StageRequest, Stager};
    let t = tempfile::tempdir().unwrap();
    let cache = std::sync::Arc::new(Cache::open(&t.path().join("cache")).unwrap());
    let st = Stager::new(cache.clone())
        .with_pool(PoolBounds::default())
        .unwrap();
    let src = t.path().join("src");
    for i in 0..20 {
        let p = src.join(format!("sdk/f{i}.h"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, format!("header {i}\n")).unwrap();
    }
    let root = tree::ingest_path(&cache, &src, tree::IngestOptions::default()).unwrap();
    // Two sightings make sdk/ hot; then its copy is built ahead. The roots are dropped.
    for n in 0..2 {
        let dest = t.path().join(format!("r{n}"));
        let req = StageRequest {
            root,
            dest,
            ..Default::default()
        };
        drop(st.stage(&req).unwrap());
    }
    let pool = st.pool().unwrap();
    while pool.wanted() > 0 {
        st.build_pooled().unwrap();
    }
    assert_eq!(pool.ready(), 1);

    // Without the pool's copies dropped, the headers they link stay.
    let kept = collect(&cache, Pooled::Mine(None), 0).unwrap();
    assert_eq!(kept.pooled_dropped, Some(0));
    assert!(kept.kept_pinned >= 20, "{kept:?}");
    let r = collect(&cache, Pooled::Mine(Some(pool)), 0).unwrap();
    assert_eq!(r.pooled_dropped, Some(1));
    assert_eq!(pool.ready(), 0);
    assert_eq!((r.kept_pinned, r.bytes_after), (0, 0), "{r:?}");
}

/// Holds (`Cache::hold`, and `put_*_held`, which holds before it asks the cache for the blob)
/// keep exactly their blobs until their time, in this process's eviction; an expired one keeps
/// nothing, and the table's sweep of expired holds drops no live one.
#[test]
fn held_blobs_outlive_eviction_until_their_time() {
    let (t, c) = cache();
    let later = std::time::Instant::now() + std::time::Duration::from_secs(600);
    let loose = blobs(&c, 0..3);
    // Already in the cache: the held put finds it there and holds it all the same.
    let found = c
        .put_bytes_held(&vec![0u8; 10_000], None, Some(later))
        .unwrap();
    assert_eq!(found, loose[0]);
    let new = c
        .put_bytes_held(&vec![7u8; 10_000], None, Some(later))
        .unwrap();
    let src = t.path().join("out");
    std::fs::write(&src, vec![8u8; 10_000]).unwrap();
    let moved = c
        .put_file_held(&src, crate::cas::PutFile::Move, None, Some(later))
        .unwrap();
    // More expired holds than the table's first sweep size: swept, none of the live ones.
    let expired: Vec<Digest> = (0..1500u32)
        .map(|i| Digest::of_bytes(&i.to_le_bytes()))
        .collect();
    c.hold(&expired, std::time::Instant::now()).unwrap();
    c.hold(&[loose[1]], std::time::Instant::now()).unwrap();
    c.hold(&[Digest::of_bytes(b"after the sweep")], later)
        .unwrap();
    gc(&c, 0).unwrap();
    for d in [found, new, moved] {
        assert!(c.contains(&d), "held blob {d} was evicted");
    }
    assert!(!c.contains(&loose[1]), "an expired hold kept its blob");
    assert!(!c.contains(&loose[2]));
    c.release_holds();
    gc(&c, 0).unwrap();
    assert!(![found, new, moved].iter().any(|d| c.contains(d)));
}

/// `ingest_tree` with `hold_until` holds every file and Directory blob it writes (an output
/// directory the server is about to name in an answer).
#[test]
fn an_ingest_with_a_hold_keeps_its_files_and_directories() {
    let (t, c) = cache();
    let dir = t.path().join("out");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("a"), b"a file").unwrap();
    std::fs::write(dir.join("sub/b"), b"another file").unwrap();
    let later = std::time::Instant::now() + std::time::Duration::from_secs(600);
    let opts = tree::IngestOptions {
        move_files: true,
        hold_until: Some(later),
        ..Default::default()
    };
    let ingested = tree::ingest_tree(&c, &dir, opts).unwrap();
    gc(&c, 0).unwrap();
    let mut kept = 0;
    for d in ingested.directories() {
        for f in &d.files {
            assert!(c.contains(&Digest::from_proto(f.digest.as_ref().unwrap()).unwrap()));
            kept += 1;
        }
    }
    assert_eq!(kept, 2);
    assert!(c.contains(&ingested.root), "the root Directory was evicted");
}
