//! `--preserve-inodes macho` (`code_links`) on the loop mounts: Mach-O code shares its inode
//! with the cache while every other file is a clone; links are made in a root only where the
//! minimum link age is zero, else only in pooled copies old enough to run; hardlinked code
//! keeps the write-through check; a forged record changes the method, never the contract.
//! Mount points come from `CLONESTAGE_TEST_{XFS,BTRFS}` (`tests::fs_dir`).

use super::tests::fs_dir;
use super::*;
use crate::macho::samples::{fat, thin};
use crate::tree::IngestOptions;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;

const EXE: u32 = 0x2;
const DYLIB: u32 = 0x6;
const BUNDLE: u32 = 0x8;
const OBJECT: u32 = 0x1;

fn write(p: &Path, data: &[u8], exec: bool) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, data).unwrap();
    let mode = if exec { 0o755 } else { 0o644 };
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A SwiftCompile-like root with a few Mach-O files: the worker tool (thin executable), a
/// universal dylib, a macro plugin (bundle); beside them an object file and a Java class file
/// (Mach-O and 0xcafebabe, neither code), and `n` headers.
fn sample(src: &Path, n: usize) {
    write(&src.join("tools/bin/worker"), &thin(EXE, 70_000), true);
    let dylib = fat(&[thin(DYLIB, 9000), thin(DYLIB, 5000)], false);
    write(&src.join("frameworks/libFoo.dylib"), &dylib, false);
    write(&src.join("plugins/Macros"), &thin(BUNDLE, 12_000), true);
    write(&src.join("obj/a.o"), &thin(OBJECT, 3000), false);
    let mut class = vec![0xca, 0xfe, 0xba, 0xbe, 0, 0, 0, 52];
    class.resize(700, 1);
    write(&src.join("obj/A.class"), &class, false);
    for i in 0..n {
        write(
            &src.join(format!("sdk/m{}/f{i}.h", i % 4)),
            format!("header {i}\n").as_bytes(),
            false,
        );
    }
    write(&src.join("pkg/main.swift"), b"print(1)\n", false);
}

const CODE: [&str; 3] = [
    "tools/bin/worker",
    "frameworks/libFoo.dylib",
    "plugins/Macros",
];
const NOT_CODE: [&str; 4] = ["obj/a.o", "obj/A.class", "sdk/m1/f1.h", "pkg/main.swift"];

fn stager(base: &Path, policy: CodePolicy) -> (tempfile::TempDir, Stager, Digest) {
    let t = tempfile::Builder::new()
        .prefix("cs-code-")
        .tempdir_in(base)
        .unwrap();
    let cache = Arc::new(Cache::open(&t.path().join("cache")).unwrap());
    let st = Stager::new(cache).with_code_policy(policy);
    sample(&t.path().join("src"), 40);
    let d = tree::ingest_path(st.cache(), &t.path().join("src"), IngestOptions::default()).unwrap();
    (t, st, d)
}

fn linked_now() -> CodePolicy {
    CodePolicy::new(PreserveInodes::Macho).with_min_link_age(Duration::ZERO)
}

fn stage(st: &Stager, d: Digest, dest: PathBuf) -> StagedRoot {
    st.stage(&StageRequest {
        root: d,
        dest,
        outputs: vec!["pkg/main.o".into()],
        ..Default::default()
    })
    .unwrap()
}

/// The cache inode a staged file `rel` of the sample would be linked from.
fn cache_inode(st: &Stager, src: &Path, rel: &str) -> u64 {
    let data = std::fs::read(src.join(rel)).unwrap();
    let d = Digest::of_bytes(&data);
    let exec = std::fs::metadata(src.join(rel)).unwrap().mode() & 0o111 != 0;
    let p = if exec {
        st.cache().exec_path(&d)
    } else {
        st.cache().blob_path(&d)
    };
    std::fs::metadata(p).unwrap().ino()
}

/// Whether the staged `rel` under `root` is one of the cache's inodes for its digest (the
/// blob, or its exec twin if one was made).
fn is_cache_inode(st: &Stager, root: &Path, rel: &str) -> bool {
    let d = Digest::of_bytes(&std::fs::read(root.join(rel)).unwrap());
    let staged = ino(&root.join(rel));
    [st.cache().blob_path(&d), st.cache().exec_path(&d)]
        .iter()
        .any(|p| std::fs::metadata(p).is_ok_and(|m| m.ino() == staged))
}

fn ino(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().ino()
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// Issue 24's done-when: on XFS, a staged Mach-O input shares its inode with the cache blob
/// while every other file is a clone; the modes are the contract's, and a write through a
/// linked code file is caught after the action. Under `none` nothing is linked.
#[test]
fn xfs_preserve_macho_links_code_and_reflinks_everything_else() {
    let Some(xfs) = fs_dir("CLONESTAGE_TEST_XFS") else {
        return;
    };
    let (t, st, d) = stager(&xfs, linked_now());
    let src = t.path().join("src");
    let s = stage(&st, d, t.path().join("root"));
    let c = &s.counters;
    assert_eq!(
        (c.code_linked, c.hardlink, c.code_cloned),
        (3, 3, 0),
        "{c:?}"
    );
    assert_eq!(
        c.reflink,
        40 + 3,
        "headers, main.swift, a.o, A.class: {c:?}"
    );
    assert_eq!((c.copy, c.fallbacks), (0, 0), "{c:?}");
    let root = t.path().join("root");
    for rel in CODE {
        assert_eq!(
            ino(&root.join(rel)),
            cache_inode(&st, &src, rel),
            "{rel} is the cache's inode"
        );
        assert_eq!(
            std::fs::read(root.join(rel)).unwrap(),
            std::fs::read(src.join(rel)).unwrap()
        );
    }
    for rel in NOT_CODE {
        assert!(!is_cache_inode(&st, &root, rel), "{rel} is a clone");
    }
    assert_eq!(mode(&root.join("tools/bin/worker")), 0o555);
    assert_eq!(mode(&root.join("frameworks/libFoo.dylib")), 0o444);
    assert_eq!(mode(&root.join("frameworks")), 0o555);
    assert_eq!(mode(&root.join("obj/a.o")), 0o444);
    assert!(
        s.check_inputs().is_empty(),
        "untouched code reported as tampered"
    );
    assert_eq!(s.hardlinked_inodes(), 3);

    // Root (CI) can write through a linked code file: the check after the action sees it.
    let victim = root.join("plugins/Macros");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&victim)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"x"))
        .unwrap();
    let plugin = Digest::of_bytes(&std::fs::read(src.join("plugins/Macros")).unwrap());
    assert_eq!(s.check_inputs(), vec![plugin]);
    assert!(
        !st.cache().exec_path(&plugin).exists(),
        "quarantined, never linked again"
    );

    // The same tree under `none`: every file a clone.
    let none = Stager::new(st.cache().clone());
    let s = stage(&none, d, t.path().join("plain"));
    assert_eq!(
        (s.counters.hardlink, s.counters.code_linked),
        (0, 0),
        "{:?}",
        s.counters
    );
    for rel in ["tools/bin/worker", "frameworks/libFoo.dylib"] {
        assert!(
            !is_cache_inode(&none, &t.path().join("plain"), rel),
            "{rel}"
        );
    }
}

/// Where a link must be older than this moment (macOS's default), a root never gets a fresh
/// one: without a pooled copy its code is cloned, and counted.
#[test]
fn with_a_minimum_link_age_a_fresh_root_clones_its_code_and_counts_it() {
    let Some(xfs) = fs_dir("CLONESTAGE_TEST_XFS") else {
        return;
    };
    let policy = CodePolicy::new(PreserveInodes::Macho).with_min_link_age(Duration::from_secs(60));
    let (t, st, d) = stager(&xfs, policy);
    let s = stage(&st, d, t.path().join("root"));
    let c = &s.counters;
    assert_eq!(
        (c.code_linked, c.code_cloned, c.hardlink),
        (0, 3, 0),
        "{c:?}"
    );
    for rel in CODE {
        assert!(!is_cache_inode(&st, &t.path().join("root"), rel), "{rel}");
    }
}

/// On btrfs a snapshot is a subvolume, and link(2) into it fails with EXDEV: where roots link
/// code, a subtree that holds code is filled per file so its code can be linked, while a
/// subtree without code is still snapshotted whole once it is warm. The same cache under
/// `none` snapshots the subtree with code too (so the first half is the option's doing).
#[test]
fn btrfs_a_subtree_holding_code_is_filled_per_file_and_the_rest_is_still_snapshotted() {
    let Some(btrfs) = fs_dir("CLONESTAGE_TEST_BTRFS") else {
        return;
    };
    let (t, st, _) = stager(&btrfs, linked_now());
    // sdk/ and tools/ big enough that a snapshot pays (as in the contract's btrfs test).
    let src = t.path().join("src");
    for i in 0..1200 {
        write(
            &src.join(format!("sdk/bulk/b{i}.h")),
            format!("b{i}").as_bytes(),
            false,
        );
        write(
            &src.join(format!("tools/share/h{i}.txt")),
            format!("h{i}").as_bytes(),
            false,
        );
    }
    let d = tree::ingest_path(st.cache(), &src, IngestOptions::default()).unwrap();
    let dev = |p: &Path| std::fs::metadata(p).unwrap().dev();
    let warm = |st: &Stager, name: &str| {
        for i in 0..3 {
            let dest = t.path().join(format!("{name}{i}"));
            let s = stage(st, d, dest.clone());
            if i == 2 {
                return (s, dest);
            }
            drop(s);
            crate::remove::remove_tree(&dest).unwrap();
        }
        unreachable!()
    };
    let (s, root) = warm(&st, "link");
    let c = &s.counters;
    assert_eq!(c.code_linked, 3, "{c:?}");
    assert!(
        c.snapshot >= 1,
        "sdk/ (no code) is still snapshotted: {c:?}"
    );
    assert_eq!(
        ino(&root.join("tools/bin/worker")),
        cache_inode(&st, &src, "tools/bin/worker")
    );
    assert_ne!(
        dev(&root.join("sdk/m1/f1.h")),
        dev(&root),
        "sdk/ is a snapshot"
    );
    assert_eq!(
        dev(&root.join("tools/bin/worker")),
        dev(&root),
        "tools/ was filled per file"
    );
    assert_ne!(
        dev(&root.join("tools/share/h1.txt")),
        dev(&root),
        "tools/share (no code) is still a snapshot"
    );
    drop(s);
    crate::remove::remove_tree(&root).unwrap();

    let none = Stager::new(st.cache().clone());
    let (s, root) = warm(&none, "none");
    assert_eq!(s.counters.code_linked, 0);
    assert_ne!(
        dev(&root.join("tools/bin/worker")),
        dev(&root),
        "under none tools/ is a snapshot, code and all"
    );
    drop(s);
    crate::remove::remove_tree(&root).unwrap();
}

/// Links made ahead: a small directory holding code is pooled, and its copy is lent only once
/// its links are older than the minimum age; before that the root clones the code. The lent
/// copy's code is the cache's inode, checked after the action, and goes back to the pool.
#[test]
fn pooled_copies_lend_code_links_only_once_they_are_old_enough() {
    let Some(xfs) = fs_dir("CLONESTAGE_TEST_XFS") else {
        return;
    };
    let age = Duration::from_millis(400);
    let policy = CodePolicy::new(PreserveInodes::Macho).with_min_link_age(age);
    let (t, st, d) = stager(&xfs, policy);
    let st = st.with_pool(PoolBounds::default()).unwrap();
    let src = t.path().join("src");
    let mut n = 0;
    let mut next = |st: &Stager| {
        n += 1;
        stage(st, d, t.path().join(format!("r{n}")))
    };
    // Two sightings make the code directories hot; their copies are built ahead.
    for _ in 0..2 {
        let s = next(&st);
        assert_eq!(
            (s.counters.pool_hits, s.counters.code_cloned),
            (0, 3),
            "{:?}",
            s.counters
        );
    }
    let pool = st.pool().unwrap().clone();
    while pool.wanted() > 0 {
        st.build_pooled().unwrap();
    }
    assert!(
        pool.ready() >= 3,
        "tools/bin, frameworks, plugins: {}",
        pool.ready()
    );
    let young = next(&st);
    assert_eq!(
        young.counters.code_linked, 0,
        "links younger than {age:?} were lent: {:?}",
        young.counters
    );
    assert_eq!(young.counters.code_cloned, 3);
    std::thread::sleep(age + Duration::from_millis(100));
    let mut aged = next(&st);
    let c = aged.counters.clone();
    assert_eq!((c.code_linked, c.code_cloned), (3, 0), "{c:?}");
    assert!(c.pool_hits >= 3, "{c:?}");
    for rel in CODE {
        assert_eq!(
            ino(&aged.dest.join(rel)),
            cache_inode(&st, &src, rel),
            "{rel}"
        );
    }
    assert!(aged.check_inputs().is_empty());
    let dest = aged.dest.clone();
    for loan in aged.take_loans() {
        pool.recycle(st.cache(), &dest, loan)
            .expect("an untouched copy goes back");
    }
}

/// The record is the cache's file: a forger (an action of the same user) can list any digest
/// or drop one. That changes which of two contract-keeping methods is used, nothing else: a
/// listed non-code file is the cache's own verified inode, still checked for writes; a code
/// file dropped from the record is cloned; junk lines are ignored.
#[test]
fn a_forged_record_changes_the_method_never_the_contract() {
    let Some(xfs) = fs_dir("CLONESTAGE_TEST_XFS") else {
        return;
    };
    let (t, st, d) = stager(&xfs, linked_now());
    let src = t.path().join("src");
    let main = Digest::of_bytes(b"print(1)\n");
    let worker = Digest::of_bytes(&std::fs::read(src.join("tools/bin/worker")).unwrap());
    let record = st.cache().root().join(crate::cas::code_record::FILE);
    let text = std::fs::read_to_string(&record).unwrap();
    let forged: String = text
        .lines()
        .filter(|l| !l.contains(&worker.hex()))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(
        &record,
        format!("{forged}not a digest\n../../etc/passwd\n{main}\n"),
    )
    .unwrap();
    // A fresh process reads the forged file.
    let st = Stager::new(Arc::new(Cache::open(st.cache().root()).unwrap()))
        .with_code_policy(linked_now());
    let s = stage(&st, d, t.path().join("root"));
    let root = t.path().join("root");
    assert_eq!(
        s.counters.code_linked, 3,
        "libFoo, Macros and the forged main.swift: {:?}",
        s.counters
    );
    assert_eq!(
        ino(&root.join("pkg/main.swift")),
        ino(&st.cache().blob_path(&main))
    );
    assert!(
        !is_cache_inode(&st, &root, "tools/bin/worker"),
        "dropped from the record: cloned"
    );
    assert_eq!(mode(&root.join("pkg/main.swift")), 0o444);
    assert_eq!(mode(&root.join("tools/bin/worker")), 0o555);
    assert_eq!(
        std::fs::read(root.join("pkg/main.swift")).unwrap(),
        b"print(1)\n"
    );
    std::fs::set_permissions(
        root.join("pkg/main.swift"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::fs::write(root.join("pkg/main.swift"), b"tampered\n").unwrap();
    assert_eq!(s.check_inputs(), vec![main]);
}
