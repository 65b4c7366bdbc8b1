//! CAS behaviour: atomic verified writes, the empty blob, verify, eviction and pins.

use super::*;
use crate::tree::{self, Directory, FileNode};
use std::os::unix::fs::PermissionsExt;

/// Move blob `d`'s shard directory away and make it again with the blob back in it (same
/// inode): an fd a process kept on the old shard now names an empty directory.
pub(crate) fn remake_shard_behind_its_back(c: &Cache, d: &Digest) {
    let blob = c.blob_path(d);
    let shard = blob.parent().unwrap().to_path_buf();
    let old = shard.with_extension("old");
    std::fs::rename(&shard, &old).unwrap();
    std::fs::create_dir(&shard).unwrap();
    std::fs::rename(old.join(blob.file_name().unwrap()), &blob).unwrap();
}

fn cache() -> (tempfile::TempDir, Cache) {
    let t = tempfile::tempdir().unwrap();
    let c = Cache::open(&t.path().join("c")).unwrap();
    (t, c)
}

#[test]
fn blobs_are_read_only_verified_and_the_empty_blob_is_never_stored() {
    let (_t, c) = cache();
    let d = c.put_bytes(b"hello", None).unwrap();
    let m = std::fs::metadata(c.blob_path(&d)).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o444);
    assert_eq!(c.read(&d).unwrap().unwrap(), b"hello");
    // A digest that lies is refused and nothing is stored under it.
    let liar = Digest::of_bytes(b"something else");
    assert!(matches!(
        c.put_bytes(b"hello!", Some(&liar)),
        Err(crate::Error::DigestMismatch { .. })
    ));
    assert!(!c.contains(&liar));
    let e = c.put_bytes(b"", None).unwrap();
    assert_eq!(e, Digest::EMPTY);
    assert!(c.contains(&e));
    assert!(!c.blob_path(&e).exists());
    assert_eq!(
        std::fs::read_dir(c.root().join("tmp")).unwrap().count(),
        0,
        "no temp files left"
    );
}

#[test]
fn streamed_upload_is_verified_before_install() {
    let (_t, c) = cache();
    let data = vec![7u8; 300_000];
    let d = Digest::of_bytes(&data);
    let mut up = c.new_upload().unwrap();
    up.write_chunk(&data[..1000]).unwrap();
    up.write_chunk(&data[1000..]).unwrap();
    c.commit_upload(up, &d).unwrap();
    assert!(c.contains(&d));
    let mut bad = c.new_upload().unwrap();
    bad.write_chunk(&data[..10]).unwrap();
    let other = Digest::of_bytes(&data[..11]);
    assert!(c.commit_upload(bad, &other).is_err());
    assert!(!c.contains(&other));
    assert_eq!(std::fs::read_dir(c.root().join("tmp")).unwrap().count(), 0);
}

#[test]
fn verify_catches_a_flipped_byte_and_quarantines_it() {
    let (_t, c) = cache();
    let good = c.put_bytes(b"good blob", None).unwrap();
    let bad = c.put_bytes(b"soon to be corrupt", None).unwrap();
    let p = c.blob_path(&bad);
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut bytes = std::fs::read(&p).unwrap();
    bytes[3] ^= 0x01;
    std::fs::write(&p, bytes).unwrap();
    let (checked, corrupt) = c.verify().unwrap();
    assert_eq!(checked, 2);
    assert_eq!(corrupt.len(), 1);
    assert_eq!(corrupt[0].digest, bad);
    assert!(!c.contains(&bad), "corrupt blob must not be served");
    assert!(c.contains(&good));
    assert_eq!(
        std::fs::read_dir(c.root().join("quarantine"))
            .unwrap()
            .count(),
        1
    );
    assert_eq!(c.verify().unwrap().1.len(), 0);
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
    let kept: Vec<Digest> = (0..5)
        .map(|i| c.put_bytes(&vec![i; 10_000], None).unwrap())
        .collect();
    let loose: Vec<Digest> = (10..15)
        .map(|i| c.put_bytes(&vec![i; 10_000], None).unwrap())
        .collect();
    let root = root_with(&c, &kept);
    // A second Cache on the same directory stands for another process: separate pin file, lock.
    let other = Cache::open(&t.path().join("c")).unwrap();
    let pin = other.pin(&root).unwrap();
    let r = c.gc(0).unwrap();
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
    c.gc(0).unwrap();
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
                c.gc(u64::MAX).unwrap();
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
    let old: Vec<Digest> = (0..4)
        .map(|i| c.put_bytes(&vec![i; 10_000], None).unwrap())
        .collect();
    let new: Vec<Digest> = (4..8)
        .map(|i| c.put_bytes(&vec![i; 10_000], None).unwrap())
        .collect();
    let old_root = root_with(&c, &old);
    let new_root = root_with(&c, &new);
    let log = c.root().join("access.log");
    std::fs::write(&log, format!("100 {old_root}\n200 {new_root}\n")).unwrap();
    let total = crate::cas::cache_bytes(&c);
    // Room for roughly the newer half only.
    c.gc(total / 2 + 1000).unwrap();
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
    c.gc(0).unwrap();
    assert!(!c.contains(&d));
    assert!(!c.root().join("pins/999999-1").exists());
}

#[test]
fn read_finds_a_blob_whose_shard_was_made_again_behind_its_back() {
    let (_t, c) = cache();
    let d = c.put_bytes(b"directory bytes", None).unwrap();
    assert_eq!(c.read(&d).unwrap().unwrap(), b"directory bytes"); // keeps the shard fd
    remake_shard_behind_its_back(&c, &d);
    assert_eq!(c.read(&d).unwrap().unwrap(), b"directory bytes");
    let absent = Digest::of_bytes(b"never stored");
    assert!(c.read(&absent).unwrap().is_none());
}

#[test]
fn read_refuses_a_blob_file_longer_or_shorter_than_its_digest() {
    let (_t, c) = cache();
    // Larger than one page, so a short first read would be visible too.
    let data = vec![7u8; 10_000];
    let d = c.put_bytes(&data, None).unwrap();
    assert_eq!(c.read(&d).unwrap().unwrap(), data);
    let p = c.blob_path(&d);
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    for len in [10_001u64, 9_999, 0] {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(len)
            .unwrap();
        match c.read(&d) {
            Err(crate::Error::DigestMismatch { expected, .. }) => assert_eq!(expected, d),
            other => panic!("a {len}-byte file read as {d}: {other:?}"),
        }
    }
}

/// Run `sh -c script` as uid/gid 65534 with no groups; its exit status.
fn as_nobody(script: &str) -> std::process::ExitStatus {
    std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .stderr(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run setpriv")
}

/// Issue 10, finding 7: another local user can neither list nor read anything in the cache,
/// whether clonestage made the directory or it existed with wider modes (tightened at open).
#[test]
fn another_user_can_neither_list_nor_read_the_cache() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: switching to uid 65534 needs root");
        return;
    }
    // A world-traversable parent, as a home or /var directory is.
    let t = tempfile::tempdir().unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let existing = t.path().join("existing");
    std::fs::create_dir(&existing).unwrap();
    std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o755)).unwrap();
    for root in [t.path().join("fresh"), existing] {
        let c = Cache::open(&root).unwrap();
        let d = c.put_bytes(b"secret source\n", None).unwrap();
        let mode = std::fs::metadata(&root).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700, "{}", root.display());
        // The control: the same commands as root do succeed.
        let blob = c.blob_path(&d);
        let list = format!("ls {r} && ls {r}/blobs", r = root.display());
        let read = format!("cat {}", blob.display());
        assert!(std::process::Command::new("sh")
            .args(["-c", &list])
            .status()
            .unwrap()
            .success());
        assert!(
            !as_nobody(&list).success(),
            "uid 65534 listed {}",
            root.display()
        );
        assert!(
            !as_nobody(&read).success(),
            "uid 65534 read {}",
            blob.display()
        );
    }
}
