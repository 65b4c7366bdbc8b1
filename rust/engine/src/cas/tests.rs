//! CAS behaviour: atomic verified writes, the empty blob, verify, reads.

use super::*;
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
