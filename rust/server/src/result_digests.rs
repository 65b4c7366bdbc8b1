//! The digests an `ActionResult` names itself (stdout, stderr, output files, each output
//! directory's Tree and root Directory), and which of them are Trees, whose files it names in
//! turn. One reading for every user: the action cache's completeness check (`ac_store`), the
//! upstream's read-through and its uploads, and the grace a just-answered result gets
//! (`answer_grace`).

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::{Cache, Digest};
use prost::Message;

/// What one result names, in the order above.
pub(crate) struct Named {
    pub direct: Vec<Digest>,
    /// The output directories' Tree digests (also in `direct`).
    pub trees: Vec<Digest>,
    /// The first digest that does not parse, if any (it is in neither list).
    pub bad: Option<String>,
}

pub(crate) fn named(r: &pb::ActionResult) -> Named {
    let mut n = Named {
        direct: Vec::new(),
        trees: Vec::new(),
        bad: None,
    };
    let push = |n: &mut Named, d: Option<&pb::Digest>| match d.map(Digest::from_proto) {
        None => None,
        Some(Ok(d)) => {
            n.direct.push(d);
            Some(d)
        }
        Some(Err(e)) => {
            n.bad.get_or_insert(e.to_string());
            None
        }
    };
    push(&mut n, r.stdout_digest.as_ref());
    push(&mut n, r.stderr_digest.as_ref());
    for f in &r.output_files {
        push(&mut n, f.digest.as_ref());
    }
    for d in &r.output_directories {
        if let Some(t) = push(&mut n, d.tree_digest.as_ref()) {
            n.trees.push(t);
        }
        push(&mut n, d.root_directory_digest.as_ref());
    }
    n
}

/// The Tree stored under `t`, if it is there and decodes.
pub(crate) fn read_tree(cache: &Cache, t: &Digest) -> Option<pb::Tree> {
    let bytes = cache.read(t).ok().flatten()?;
    pb::Tree::decode(bytes.as_slice()).ok()
}

/// The file blobs a Tree lists (root and children); Err names a digest that does not parse.
pub(crate) fn tree_files(t: &pb::Tree) -> Result<Vec<Digest>, String> {
    let mut out = Vec::new();
    for dir in t.root.iter().chain(t.children.iter()) {
        for f in &dir.files {
            out.push(
                Digest::from_opt_proto(f.digest.as_ref(), &f.name).map_err(|e| e.to_string())?,
            );
        }
    }
    Ok(out)
}

/// Every blob `r` names, the files of its output Trees included (read from `cache`; a Tree
/// that is not there or does not decode adds only itself), sorted, once each, without the
/// empty blob (which is never stored).
pub(crate) fn all_blobs(cache: &Cache, r: &pb::ActionResult) -> Vec<Digest> {
    let Named {
        mut direct, trees, ..
    } = named(r);
    for t in trees {
        if let Some(tree) = read_tree(cache, &t) {
            direct.extend(tree_files(&tree).unwrap_or_default());
        }
    }
    direct.retain(|d| !d.is_empty());
    direct.sort_by_key(|d| (d.hash, d.size));
    direct.dedup();
    direct
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pd(b: &[u8]) -> pb::Digest {
        Digest::of_bytes(b).to_proto()
    }

    #[test]
    fn names_every_output_and_remembers_a_bad_digest() {
        let r = pb::ActionResult {
            stdout_digest: Some(pd(b"out")),
            output_files: vec![pb::OutputFile {
                digest: Some(pd(b"file")),
                ..Default::default()
            }],
            output_directories: vec![pb::OutputDirectory {
                tree_digest: Some(pd(b"tree")),
                root_directory_digest: Some(pb::Digest {
                    hash: "zz".into(),
                    size_bytes: 1,
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        let n = named(&r);
        assert_eq!(
            n.direct,
            vec![
                Digest::of_bytes(b"out"),
                Digest::of_bytes(b"file"),
                Digest::of_bytes(b"tree")
            ]
        );
        assert_eq!(n.trees, vec![Digest::of_bytes(b"tree")]);
        assert!(n.bad.is_some());
    }
}
