//! Shared cache directories in staged roots (`shared_map`, `crate::shared`): where a pattern
//! matches, in which configurations, what the action declares itself and is left alone, the
//! chain made writable, the tree's own symlinks never linked through, and two roots seeing one
//! directory.

use super::*;
use crate::shared::{Pattern, SharedDirs};
use crate::tree::IngestOptions;
use std::os::unix::fs::PermissionsExt;

fn setup() -> (tempfile::TempDir, Stager, Arc<SharedDirs>) {
    let t = tempfile::Builder::new()
        .prefix("cs-shared-")
        .tempdir()
        .unwrap();
    let cache = Arc::new(Cache::open(&t.path().join("cache")).unwrap());
    let patterns = Pattern::parse_list(&[] as &[&str]).unwrap();
    let shared = Arc::new(SharedDirs::open(&cache, patterns).unwrap());
    (t, Stager::new(cache), shared)
}

fn write(p: &Path, data: &[u8]) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, data).unwrap();
}

fn ingest(st: &Stager, src: &Path) -> Digest {
    tree::ingest_path(st.cache(), src, IngestOptions::default()).unwrap()
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

fn stage(
    st: &Stager,
    shared: &Arc<SharedDirs>,
    root: Digest,
    dest: PathBuf,
    outputs: &[&str],
) -> StagedRoot {
    st.stage(&StageRequest {
        root,
        dest,
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
        shared: Some(shared.clone()),
        ..Default::default()
    })
    .unwrap()
}

const SWIFT: &str = "bazel-out/k8-fastbuild/bin/_swift_module_cache";

#[test]
fn the_module_cache_path_of_a_compile_is_a_link_to_one_persistent_directory() {
    let (t, st, shared) = setup();
    let src = t.path().join("src");
    write(&src.join("pkg/a.swift"), b"import Foundation\n");
    // The exec configuration's bin holds an input (a tool): it gets its own directory.
    write(
        &src.join("bazel-out/k8-opt-exec-1/bin/tools/worker"),
        b"tool",
    );
    let d = ingest(&st, &src);
    let outs = ["bazel-out/k8-fastbuild/bin/pkg/A.swiftmodule"];
    let a = stage(&st, &shared, d, t.path().join("a"), &outs);
    let link = t.path().join("a").join(SWIFT);
    let target = std::fs::read_link(&link).expect("the module cache path is a symlink");
    assert_eq!(target, shared.path_for(SWIFT));
    assert!(target.is_absolute() && target.starts_with(st.cache().root().join("shared")));
    assert!(target.is_dir());
    // Every configuration present in the root, each with its own directory.
    let exec = "bazel-out/k8-opt-exec-1/bin/_swift_module_cache";
    let rels: Vec<&str> = a.shared_dirs().iter().map(|(r, _)| r.as_str()).collect();
    assert!(rels.contains(&SWIFT) && rels.contains(&exec), "{rels:?}");
    assert_ne!(shared.path_for(SWIFT), shared.path_for(exec));
    // The objc cache has the same parent: linked too (the default list).
    assert!(rels.contains(&"bazel-out/k8-fastbuild/bin/_objc_module_cache"));
    // The chain to it is writable, as for an output; inputs stay as they are.
    assert_eq!(mode(&t.path().join("a/bazel-out/k8-fastbuild/bin")), 0o755);
    assert_eq!(mode(&t.path().join("a/bazel-out/k8-opt-exec-1/bin")), 0o755);
    assert_eq!(mode(&t.path().join("a/pkg")), 0o555);
    assert_eq!(a.counters.extra.get("shared_dirs_linked"), Some(&4));

    // A module written through one root is there in the next root.
    std::fs::create_dir(link.join("H1")).unwrap();
    std::fs::write(link.join("H1/Foundation-1A2B.pcm"), b"pcm").unwrap();
    let b = stage(&st, &shared, d, t.path().join("b"), &outs);
    assert_eq!(
        std::fs::read(
            t.path()
                .join("b")
                .join(SWIFT)
                .join("H1/Foundation-1A2B.pcm")
        )
        .unwrap(),
        b"pcm"
    );
    drop((a, b));
}

#[test]
fn a_path_the_action_declares_is_never_linked() {
    let (t, st, shared) = setup();
    let src = t.path().join("src");
    // As an input: staged from the tree as usual.
    write(&src.join(SWIFT).join("given.pcm"), b"input");
    write(&src.join("bazel-out/cfg2/bin/x"), b"");
    let d = ingest(&st, &src);
    let r = stage(
        &st,
        &shared,
        d,
        t.path().join("a"),
        // As an output (here a directory) of cfg2's cache path, and an output directory
        // holding cfg3's.
        &[
            "bazel-out/cfg2/bin/_swift_module_cache",
            "bazel-out/cfg3/bin",
        ],
    );
    let root = t.path().join("a");
    assert!(!std::fs::symlink_metadata(root.join(SWIFT))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(
        std::fs::read(root.join(SWIFT).join("given.pcm")).unwrap(),
        b"input"
    );
    assert!(!root.join("bazel-out/cfg2/bin/_swift_module_cache").exists());
    assert!(
        std::fs::symlink_metadata(root.join("bazel-out/cfg3/bin/_swift_module_cache")).is_err()
    );
    let rels: Vec<&str> = r.shared_dirs().iter().map(|(r, _)| r.as_str()).collect();
    assert!(
        !rels.iter().any(|r| r.ends_with("_swift_module_cache")),
        "{rels:?}"
    );
    assert_eq!(r.counters.extra.get("shared_dirs_declared"), Some(&2));
}

#[test]
fn a_symlink_of_the_tree_is_never_linked_through_and_nothing_is_made_outside() {
    let (t, st, shared) = setup();
    let src = t.path().join("src");
    let outside = t.path().join("outside");
    std::fs::create_dir_all(outside.join("bin")).unwrap();
    write(&src.join("pkg/a.swift"), b"");
    std::fs::create_dir_all(src.join("bazel-out")).unwrap();
    // bazel-out/evil -> a directory outside the root (allowed by the policy for this test).
    std::os::unix::fs::symlink(&outside, src.join("bazel-out/evil")).unwrap();
    let d = tree::ingest_path(st.cache(), &src, IngestOptions::default()).unwrap();
    let r = st
        .stage(&StageRequest {
            root: d,
            dest: t.path().join("a"),
            shared: Some(shared.clone()),
            symlinks: crate::tree::SymlinkPolicy {
                allow_absolute: true,
                allow_escaping: true,
            },
            ..Default::default()
        })
        .unwrap();
    assert!(r.shared_dirs().is_empty());
    assert_eq!(std::fs::read_dir(outside.join("bin")).unwrap().count(), 0);
}

#[test]
fn no_more_than_the_limit_of_configurations_per_pattern_and_root() {
    let (t, st, shared) = setup();
    let src = t.path().join("src");
    for i in 0..40 {
        write(&src.join(format!("bazel-out/c{i:02}/bin/f")), b"");
    }
    let d = ingest(&st, &src);
    let r = stage(&st, &shared, d, t.path().join("a"), &[]);
    let swift = r
        .shared_dirs()
        .iter()
        .filter(|(rel, _)| rel.ends_with("_swift_module_cache"))
        .count();
    assert_eq!(swift, SHARED_MAX_PER_PATTERN);
    assert_eq!(
        r.counters.extra.get("shared_dirs_over_limit"),
        Some(&(2 * (40 - SHARED_MAX_PER_PATTERN as u64)))
    );
}

#[test]
fn without_shared_dirs_the_path_stays_absent_as_before() {
    let (t, st, _shared) = setup();
    let src = t.path().join("src");
    write(&src.join("pkg/a.swift"), b"");
    let d = ingest(&st, &src);
    st.stage(&StageRequest {
        root: d,
        dest: t.path().join("a"),
        outputs: vec!["bazel-out/k8-fastbuild/bin/pkg/A.o".into()],
        ..Default::default()
    })
    .unwrap();
    assert!(std::fs::symlink_metadata(t.path().join("a").join(SWIFT)).is_err());
}
