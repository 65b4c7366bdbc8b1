//! The pool through the stager: a hot subtree is built ahead, taken by one rename, returned
//! when untouched; every way an action (running as root) can change a lent copy gets it
//! discarded and never lent again, on ext4 (hardlinks), XFS (reflinks) and btrfs via the loop
//! mounts (`CLONESTAGE_TEST_*`; a missing one fails under `CLONESTAGE_REQUIRE_FS=1`).

use crate::stage::tests::fs_dir;
use crate::stage::{PoolBounds, StageRequest, StagedRoot, Stager};
use crate::tree::{self, IngestOptions};
use crate::{Cache, Digest};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

fn write(p: &Path, data: &[u8]) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, data).unwrap();
}

/// sdk/include/ (24 headers), sdk/deep/x/y/z.h, sdk/empty, sdk/link -> include/f0.h, main.c.
fn sample(src: &Path) {
    for i in 0..24 {
        write(
            &src.join(format!("sdk/include/f{i}.h")),
            format!("header {i}\n").as_bytes(),
        );
    }
    write(&src.join("sdk/deep/x/y/z.h"), b"deep\n");
    write(&src.join("sdk/empty"), b"");
    std::os::unix::fs::symlink("include/f0.h", src.join("sdk/link")).unwrap();
    write(&src.join("main.c"), b"int main(){}\n");
}

struct Fx {
    _t: tempfile::TempDir,
    base: PathBuf,
    st: Stager,
    root: Digest,
    n: u32,
}

impl Fx {
    fn new(fs: &Path) -> Fx {
        let t = tempfile::Builder::new()
            .prefix("cs-pool-")
            .tempdir_in(fs)
            .unwrap();
        let cache = Arc::new(Cache::open(&t.path().join("cache")).unwrap());
        let st = Stager::new(cache).with_pool(PoolBounds::default()).unwrap();
        let src = t.path().join("src");
        sample(&src);
        let root = tree::ingest_path(st.cache(), &src, IngestOptions::default()).unwrap();
        let base = t.path().join("work");
        std::fs::create_dir(&base).unwrap();
        let mut fx = Fx {
            base,
            _t: t,
            st,
            root,
            n: 0,
        };
        // Two sightings make sdk/ hot; then its copy is built ahead.
        for _ in 0..2 {
            let s = fx.stage(&[]);
            assert_eq!(s.counters.pool_hits, 0);
        }
        fx.refill();
        fx
    }

    fn stage(&mut self, outputs: &[&str]) -> StagedRoot {
        self.n += 1;
        let dest = self.base.join(format!("r{}", self.n));
        self.st
            .stage(&StageRequest {
                root: self.root,
                dest,
                outputs: outputs.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            })
            .unwrap()
    }

    /// Blobs a tamper check quarantined come back as an upload would bring them.
    fn reingest(&self) {
        tree::ingest_path(
            self.st.cache(),
            &self._t.path().join("src"),
            IngestOptions::default(),
        )
        .unwrap();
    }

    fn refill(&self) {
        let pool = self.st.pool().unwrap();
        while pool.wanted() > 0 {
            self.st.build_pooled().unwrap();
        }
        assert!(self.st.pool().unwrap().ready() > 0, "no copy was built");
        // A fresh copy is lent once it is older than a clock tick.
        std::thread::sleep(Duration::from_millis(120));
    }

    /// A stage that takes sdk/ from the pool.
    fn hit(&mut self) -> StagedRoot {
        let s = self.stage(&[]);
        assert_eq!(s.counters.pool_hits, 1, "sdk/ was not taken from the pool");
        assert_eq!(s.pooled(), 1);
        assert_eq!(s.loans[0].rel, Path::new("sdk"));
        s
    }

    /// Take sdk/ (checking the contract), return it untouched, take it again: the very copy
    /// comes back. Returns the root holding it the second time.
    fn round_trip(&mut self) -> StagedRoot {
        let s = self.hit();
        check_contract(&s.dest.join("sdk"));
        let first = ino(&s.dest.join("sdk"));
        self.recycle(s).expect("an untouched copy is recycled");
        let s = self.hit();
        assert_eq!(
            ino(&s.dest.join("sdk")),
            first,
            "the recycled copy was not lent again"
        );
        s
    }

    fn recycle(&self, mut s: StagedRoot) -> Result<(), crate::stage::Discard> {
        let tainted = s.check_inputs();
        let mut r = Ok(());
        for l in s.take_loans() {
            r = r.and(self.st.pool().unwrap().recycle(self.st.cache(), &s.dest, l));
        }
        if r.is_ok() {
            assert!(
                tainted.is_empty(),
                "recycled a copy whose hardlinks were written: {tainted:?}"
            );
        }
        r
    }
}

fn ino(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).unwrap().ino()
}

fn check_contract(sdk: &Path) {
    let m = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(m(sdk), 0o555);
    assert_eq!(m(&sdk.join("include")), 0o555);
    assert_eq!(m(&sdk.join("include/f3.h")), 0o444);
    assert_eq!(
        std::fs::read(sdk.join("include/f3.h")).unwrap(),
        b"header 3\n"
    );
    assert_eq!(std::fs::read(sdk.join("deep/x/y/z.h")).unwrap(), b"deep\n");
    assert_eq!(
        std::fs::read_link(sdk.join("link")).unwrap(),
        Path::new("include/f0.h")
    );
}

type Tamper = fn(&Path, bool);

fn set_mtime(p: &Path, t: std::time::SystemTime) {
    let f = std::fs::File::options().write(true).open(p).unwrap();
    f.set_times(std::fs::FileTimes::new().set_modified(t))
        .unwrap();
}

/// Every tamper, applied to a root's `sdk/` as root. `private` says whether files are the
/// copy's own inodes (clones) or the cache's (hardlinks).
fn tampers() -> Vec<(&'static str, Tamper)> {
    vec![
        ("append", |s, _| {
            use std::io::Write;
            let mut f = std::fs::File::options()
                .append(true)
                .open(s.join("include/f1.h"))
                .unwrap();
            f.write_all(b"more").unwrap();
        }),
        ("truncate", |s, _| {
            std::fs::File::options()
                .write(true)
                .open(s.join("include/f1.h"))
                .unwrap()
                .set_len(2)
                .unwrap();
        }),
        ("in-place write, mtime restored", |s, private| {
            use std::os::unix::fs::FileExt;
            // Through a hardlink this is the cache's own inode, the documented limit
            // (docs/permissions.md); the empty file is private on every device.
            if private {
                let p = s.join("include/f1.h");
                let before = std::fs::metadata(&p).unwrap().modified().unwrap();
                let f = std::fs::File::options().write(true).open(&p).unwrap();
                f.write_at(b"HEADER", 0).unwrap();
                drop(f);
                set_mtime(&p, before);
            } else {
                let p = s.join("empty");
                let before = std::fs::metadata(&p).unwrap().modified().unwrap();
                std::fs::write(&p, b"x").unwrap();
                std::fs::File::options()
                    .write(true)
                    .open(&p)
                    .unwrap()
                    .set_len(0)
                    .unwrap();
                set_mtime(&p, before);
            }
        }),
        ("chmod", |s, _| {
            std::fs::set_permissions(
                s.join("include/f1.h"),
                std::fs::Permissions::from_mode(0o644),
            )
            .unwrap();
        }),
        ("chmod a directory and back", |s, _| {
            let d = s.join("deep/x");
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o555)).unwrap();
        }),
        ("rename inside", |s, _| {
            std::fs::rename(s.join("include/f1.h"), s.join("include/g1.h")).unwrap();
        }),
        ("rename and back", |s, _| {
            std::fs::rename(s.join("include/f1.h"), s.join("deep/f1.h")).unwrap();
            std::fs::rename(s.join("deep/f1.h"), s.join("include/f1.h")).unwrap();
        }),
        ("add", |s, _| write(&s.join("include/new.h"), b"new")),
        ("remove", |s, _| {
            std::fs::remove_file(s.join("include/f2.h")).unwrap()
        }),
        ("replace a file by a symlink", |s, _| {
            std::fs::remove_file(s.join("include/f3.h")).unwrap();
            std::os::unix::fs::symlink("f0.h", s.join("include/f3.h")).unwrap();
        }),
        ("replace a symlink's target", |s, _| {
            std::fs::remove_file(s.join("link")).unwrap();
            std::os::unix::fs::symlink("include/f1.h", s.join("link")).unwrap();
        }),
        ("hardlink a file out", |s, private| {
            // A hardlinked file is the cache's inode, linked out of any root alike; the
            // empty file is the copy's own.
            let f = if private { "include/f4.h" } else { "empty" };
            std::fs::hard_link(s.join(f), s.parent().unwrap().join("out")).unwrap();
        }),
        ("hardlink a file in (same name, other inode)", |s, _| {
            std::fs::remove_file(s.join("include/f5.h")).unwrap();
            std::fs::hard_link(s.join("include/f6.h"), s.join("include/f5.h")).unwrap();
        }),
        ("write to a deep directory", |s, _| {
            write(&s.join("deep/x/y/new"), b"n")
        }),
        ("replace a directory by a symlink", |s, _| {
            std::fs::rename(s.join("deep"), s.parent().unwrap().join("deep-moved")).unwrap();
            std::os::unix::fs::symlink("include", s.join("deep")).unwrap();
        }),
    ]
}

fn tamper_suite(var: &str, private_files: bool) {
    let Some(fs) = fs_dir(var) else { return };
    let mut fx = Fx::new(&fs);

    // Untouched: recycled, and the very copy is lent again.
    let s = fx.round_trip();
    let sdk_digest = s.loans[0].digest();
    assert_eq!(
        std::fs::symlink_metadata(s.dest.join("sdk/include/f3.h"))
            .unwrap()
            .nlink()
            > 1,
        !private_files
    );
    fx.recycle(s).unwrap();

    let mut tampered: Vec<(String, PathBuf)> = Vec::new();
    for (what, tamper) in tampers() {
        let s = fx.hit();
        let sdk = s.dest.join("sdk");
        for (w, p) in &tampered {
            assert_ne!(
                ino(&sdk),
                ino(p),
                "the copy tampered by '{w}' was lent again"
            );
        }
        tamper(&sdk, private_files);
        let dest = s.dest.clone();
        let r = fx.recycle(s);
        assert!(r.is_err(), "{var}: a copy changed by '{what}' was recycled");
        // Kept (not removed) so its inode cannot be reused while later stages are compared.
        tampered.push((what.to_string(), dest.join("sdk")));
        fx.reingest();
        assert_eq!(
            fx.st.pool().unwrap().ready_of(&sdk_digest),
            0,
            "'{what}': a discarded copy is ready"
        );
        let s = fx.stage(&[]);
        assert!(
            s.loans.iter().all(|l| l.rel != Path::new("sdk")),
            "'{what}': sdk/ was lent after the discard"
        );
        drop(s);
        fx.refill();
    }
    fx.st.ledger().flush();
    let c = crate::stats::load(fx.st.cache().root()).unwrap();
    assert!(c.pool_discarded >= tampers().len() as u64, "{c:?}");
    assert!(
        c.pool_recycled >= 2 && c.pool_hits >= 2 && c.pool_built >= 1,
        "{c:?}"
    );
}

#[test]
fn tampered_copies_are_never_lent_again_ext4() {
    tamper_suite("CLONESTAGE_TEST_EXT4", false);
}

#[test]
fn tampered_copies_are_never_lent_again_xfs() {
    tamper_suite("CLONESTAGE_TEST_XFS", true);
}

#[test]
fn tampered_copies_are_never_lent_again_btrfs() {
    tamper_suite("CLONESTAGE_TEST_BTRFS", true);
}

#[test]
fn a_subtree_on_an_output_path_is_never_taken() {
    let d = tempfile::tempdir().unwrap();
    let mut fx = Fx::new(d.path());
    let s = fx.stage(&["sdk/include/out.o"]);
    assert_eq!(s.counters.pool_hits, 0);
    // The chain to the output is writable, as the contract says; no copy was made writable.
    let m = std::fs::metadata(s.dest.join("sdk/include"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(m & 0o777, 0o755);
    // Neither sdk/ nor sdk/include/ was lent.
    assert_eq!(fx.st.pool().unwrap().ready(), 2);
    let s = fx.hit();
    fx.recycle(s).unwrap();
}

#[test]
fn a_root_dropped_with_its_loans_frees_their_place() {
    let d = tempfile::tempdir().unwrap();
    let mut fx = Fx::new(d.path());
    let copies = fx.st.pool().unwrap().copies();
    let s = fx.hit();
    assert_eq!(fx.st.pool().unwrap().copies(), copies);
    drop(s);
    assert_eq!(fx.st.pool().unwrap().copies(), copies - 1);
}

#[test]
fn a_new_pool_empties_a_stale_one() {
    let d = tempfile::tempdir().unwrap();
    let cache = Arc::new(Cache::open(&d.path().join("cache")).unwrap());
    let stale = cache.root().join("pool/abc.0/x");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::set_permissions(
        stale.parent().unwrap(),
        std::fs::Permissions::from_mode(0o555),
    )
    .unwrap();
    let st = Stager::new(cache.clone())
        .with_pool(PoolBounds::default())
        .unwrap();
    assert_eq!(
        std::fs::read_dir(cache.root().join("pool"))
            .unwrap()
            .count(),
        0
    );
    assert_eq!(st.pool().unwrap().ready(), 0);
}

#[test]
fn gc_empties_a_stale_pool_only_when_no_server_holds_the_cache() {
    let d = tempfile::tempdir().unwrap();
    let cache = Cache::open(&d.path().join("cache")).unwrap();
    let stale = cache.root().join("pool/abc.0");
    std::fs::create_dir_all(&stale).unwrap();
    assert_eq!(super::empty_stale(&cache, || true).unwrap(), None);
    assert!(stale.exists(), "a running server's pool was emptied");
    assert_eq!(super::empty_stale(&cache, || false).unwrap(), Some(1));
    assert!(!stale.exists());
}

/// A quarantine by another process (`clonestage verify`: another `Cache` on the same
/// directory, whose in-memory record this stager never sees) reaches the pool through the
/// shared quarantine count: a lent copy holding the inode is discarded at its return, a ready
/// one at the next take, and neither is lent again.
#[test]
fn a_quarantine_by_another_process_keeps_copies_holding_the_inode_from_being_lent() {
    let d = tempfile::tempdir().unwrap();
    let mut fx = Fx::new(d.path());
    let other = Cache::open(fx.st.cache().root()).unwrap();
    let inode_of = |i: u32| other.blob_path(&Digest::of_bytes(format!("header {i}\n").as_bytes()));

    // Lent: the copy comes back holding an inode the cache no longer serves.
    let s = fx.hit();
    let lent = ino(&s.dest.join("sdk"));
    let sdk_digest = s.loans[0].digest();
    other.quarantine(&inode_of(3));
    let r = fx.recycle(s);
    assert_eq!(r.map_err(|d| d.reason), Err("quarantined"));
    fx.reingest();
    drop(fx.stage(&[])); // misses sdk/: a copy is wanted
    fx.refill();

    // Ready: quarantined while it waits in the pool.
    assert!(fx.st.pool().unwrap().ready_of(&sdk_digest) > 0);
    other.quarantine(&inode_of(5));
    fx.reingest();
    let s = fx.stage(&[]);
    assert_eq!(
        s.counters.pool_hits, 0,
        "a copy holding a quarantined inode was lent"
    );
    assert!(s.loans.iter().all(|l| l.rel != Path::new("sdk")));
    assert_ne!(ino(&s.dest.join("sdk")), lent);
    drop(s);
    fx.st.ledger().flush();
    let c = crate::stats::load(fx.st.cache().root()).unwrap();
    assert!(c.pool_discarded >= 2, "{c:?}");

    // After a proof against the cache the count is trusted again: an untouched copy is recycled.
    drop(fx.stage(&[]));
    fx.refill();
    let s = fx.hit();
    fx.recycle(s).expect("an untouched copy is recycled");
}

/// The pool as a server that is not root runs it: moving a 0o555 copy to another parent
/// needs write permission on it (its `..` changes), so the pool makes it 0o755 around each
/// move (`chmod_to_move`). Run as root (CI), the test runs itself again as uid 65534 in a
/// directory that uid owns; run as another user, it runs directly.
#[test]
fn a_server_that_is_not_root_takes_and_returns_copies() {
    const CHILD: &str = "CLONESTAGE_TEST_POOL_NOT_ROOT";
    if let Some(dir) = std::env::var_os(CHILD) {
        return not_root_cycle(Path::new(&dir));
    }
    if unsafe { libc::geteuid() } != 0 {
        let d = tempfile::tempdir().unwrap();
        return not_root_cycle(d.path());
    }
    use std::os::unix::process::CommandExt;
    let d = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(d.path(), Some(65534), Some(65534)).unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "stage::pool::tests::a_server_that_is_not_root_takes_and_returns_copies",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, d.path())
        .current_dir(d.path())
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "as uid 65534: {text}");
    assert!(text.contains("1 passed"), "the child ran no test: {text}");
}

fn not_root_cycle(dir: &Path) {
    assert_ne!(
        unsafe { libc::geteuid() },
        0,
        "meant to run as another user"
    );
    let mut fx = Fx::new(dir);
    let s = fx.round_trip();
    check_contract(&s.dest.join("sdk"));
    // What this user can do to its own copy: make a directory writable, add a file, put the
    // mode back.
    let inc = s.dest.join("sdk/include");
    std::fs::set_permissions(&inc, std::fs::Permissions::from_mode(0o755)).unwrap();
    write(&inc.join("new.h"), b"new");
    std::fs::set_permissions(&inc, std::fs::Permissions::from_mode(0o555)).unwrap();
    assert!(fx.recycle(s).is_err(), "a changed copy was recycled");
    let s = fx.stage(&[]);
    assert!(s.loans.iter().all(|l| l.rel != Path::new("sdk")));
    assert!(!s.dest.join("sdk/include/new.h").exists());
}
