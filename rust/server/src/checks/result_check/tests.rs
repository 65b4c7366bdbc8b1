//! Unit tests of `result_check`: paths, kinds and presence against a Command, v2.0 lists, Trees.

use super::*;

fn spec(paths: &[&str]) -> OutputSpec {
    OutputSpec::from_command(&pb::Command {
        output_paths: paths.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    })
    .unwrap()
}

fn file(path: &str) -> pb::OutputFile {
    pb::OutputFile {
        path: path.into(),
        digest: Some(Digest::of_bytes(path.as_bytes()).to_proto()),
        ..Default::default()
    }
}

fn with_files(paths: &[&str]) -> pb::ActionResult {
    pb::ActionResult {
        output_files: paths.iter().map(|p| file(p)).collect(),
        ..Default::default()
    }
}

fn refused(s: &OutputSpec, wd: &str, r: &pb::ActionResult) -> String {
    check_result(s, wd, r).expect_err("accepted")
}

#[test]
fn paths_kinds_and_presence() {
    let s = spec(&["a/out", "b"]);
    assert!(check_result(&s, "", &with_files(&["a/out", "b"])).is_ok());
    for (bad, want) in [
        (vec!["a/out", "b", "../../x"], "not allowed"),
        (vec!["a/out", "b", "/abs"], "relative"),
        (vec!["a/out", "b", "a//out"], "empty name"),
        (vec!["a/out", "b", "./b"], "not allowed"),
        (vec!["a/out/", "b"], "not normalized"),
        (vec!["a/out", "b", "b"], "reported twice"),
        (vec!["a/out", "b", "c"], "never declared"),
        (vec!["a/out"], "declared output 'b' is missing"),
    ] {
        let m = refused(&s, "", &with_files(&bad));
        assert!(m.contains(want), "{bad:?}: {m}");
    }
    let failed = pb::ActionResult {
        exit_code: 1,
        ..with_files(&["a/out", "b"])
    };
    assert!(refused(&s, "", &failed).contains("exit code 1"));
}

#[test]
#[allow(deprecated)]
fn v2_0_kinds_and_optional_directories() {
    let s = OutputSpec::from_command(&pb::Command {
        output_files: vec!["f".into()],
        output_directories: vec!["d".into()],
        ..Default::default()
    })
    .unwrap();
    // The directory may be absent (Bazel does not require tree artifacts); the file not.
    assert!(check_result(&s, "", &with_files(&["f"])).is_ok());
    assert!(refused(&s, "", &with_files(&[])).contains("'f' is missing"));
    // A declared directory reported as a file, and the reverse.
    assert!(refused(&s, "", &with_files(&["f", "d"])).contains("declared as an output directory"));
    let dir_as_file = pb::ActionResult {
        output_directories: vec![pb::OutputDirectory {
            path: "f".into(),
            tree_digest: Some(Digest::of_bytes(b"t").to_proto()),
            ..Default::default()
        }],
        ..Default::default()
    };
    assert!(refused(&s, "", &dir_as_file).contains("declared as an output file"));
    // A v2.0 symlink list with a target that climbs out of the root (working dir depth 1).
    let link = |target: &str| pb::ActionResult {
        output_file_symlinks: vec![pb::OutputSymlink {
            path: "f".into(),
            target: target.into(),
            node_properties: None,
        }],
        ..Default::default()
    };
    assert!(check_result(&s, "wd", &link("../x")).is_ok());
    assert!(refused(&s, "wd", &link("../../x")).contains("climbs out"));
    assert!(refused(&s, "", &link("/etc/passwd")).contains("absolute"));
    // A directory without a Tree.
    let no_tree = pb::ActionResult {
        output_directories: vec![pb::OutputDirectory {
            path: "d".into(),
            ..Default::default()
        }],
        ..with_files(&["f"])
    };
    assert!(refused(&s, "", &no_tree).contains("has no Tree"));
}

#[test]
fn trees() {
    let f = |name: &str| pb::FileNode {
        name: name.into(),
        digest: Some(Digest::of_bytes(b"x").to_proto()),
        ..Default::default()
    };
    let sub = pb::Directory {
        files: vec![f("b")],
        symlinks: vec![pb::SymlinkNode {
            name: "up".into(),
            target: "../../../x".into(),
            node_properties: None,
        }],
        ..Default::default()
    };
    let sub_d = Digest::of_bytes(&sub.encode_to_vec());
    let root = |files: Vec<pb::FileNode>| pb::Directory {
        files,
        directories: vec![pb::DirectoryNode {
            name: "s".into(),
            digest: Some(sub_d.to_proto()),
        }],
        ..Default::default()
    };
    let tree = |root, children| pb::Tree {
        root: Some(root),
        children,
    };
    // out/s/up -> ../../../x is the working directory's parent's x: wd "" climbs out.
    assert!(check_tree("w", "out", &tree(root(vec![f("a")]), vec![sub.clone()])).is_ok());
    let m = check_tree("", "out", &tree(root(vec![f("a")]), vec![sub.clone()])).unwrap_err();
    assert!(m.contains("climbs out"), "{m}");
    for (files, want) in [
        (vec![f("../../TREE_ESCAPE")], "contains '/'"),
        (vec![f("..")], "not allowed"),
        (vec![f("")], "empty name"),
        (vec![f("b"), f("a")], "not sorted"),
        (vec![f("a"), f("a")], "duplicate name"),
    ] {
        let m = check_tree("w", "out", &tree(root(files), vec![sub.clone()])).unwrap_err();
        assert!(m.contains(want), "{want}: {m}");
    }
    let m = check_tree("w", "out", &tree(root(vec![]), vec![])).unwrap_err();
    assert!(m.contains("not among the Tree's children"), "{m}");
    let m = check_tree("w", "out", &pb::Tree::default()).unwrap_err();
    assert!(m.contains("no root"), "{m}");
}
