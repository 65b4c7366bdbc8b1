//! The digests an `ActionResult` names itself (stdout, stderr, output files, each output
//! directory's Tree and root Directory), and which of them are Trees, whose files it names in
//! turn. One reading for every user: the action cache's completeness check (`ac_store`), the
//! upstream's read-through and its uploads.

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::Digest;

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
