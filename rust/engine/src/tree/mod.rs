//! Directory trees as REAPI Merkle trees: `Directory` messages stored in the CAS, encoded
//! exactly as REAPI specifies (entries sorted by name, node properties empty), so a digest
//! computed here equals the one Bazel computes for the same tree. Everything that visits a
//! tree from its root does so through `walk`.

mod ingest;
mod validate;
pub mod walk;

pub use ingest::{ingest_path, ingest_tree, IngestOptions, IngestedTree, MAX_INGEST_DEPTH};
pub use validate::{
    check_output_path, check_symlink_target, validate_directory, validate_name, SymlinkPolicy,
    NAME_MAX, PATH_MAX,
};

use crate::cas::Cache;
use crate::digest::Digest;
use crate::error::{Error, Result};
pub use bazel_remote_apis::build::bazel::remote::execution::v2::{
    Directory, DirectoryNode, FileNode, SymlinkNode,
};
use prost::Message;
use std::collections::HashSet;
use walk::{BadDigest, Order};

/// Serialize a Directory; prost writes fields in field-number order and omits defaults,
/// which is the canonical form REAPI digests are computed over.
pub fn encode(dir: &Directory) -> Vec<u8> {
    dir.encode_to_vec()
}

/// Store a Directory message in the CAS and return its digest.
pub fn put_directory(cache: &Cache, dir: &Directory) -> Result<Digest> {
    cache.put_bytes(&encode(dir), None)
}

/// Load and decode a Directory message. `Ok(None)` if it is not in the cache.
pub fn load_directory(cache: &Cache, d: &Digest, path: &str) -> Result<Option<Directory>> {
    let Some(bytes) = cache.read(d)? else {
        return Ok(None);
    };
    Directory::decode(bytes.as_slice())
        .map(Some)
        .map_err(|e| Error::InvalidTree {
            path: path.to_string(),
            digest: *d,
            reason: format!("not a Directory message: {e}"),
        })
}

/// Call `f` for every digest reachable from `root` (Directory messages and file blobs),
/// skipping directories already in `seen`. Unreadable or missing parts are skipped silently:
/// callers (gc) only want what is there.
pub fn reachable(
    cache: &Cache,
    root: &Digest,
    seen: &mut HashSet<Digest>,
    f: &mut dyn FnMut(Digest),
) {
    // The visitor never fails and bad digests are skipped: the walk cannot fail.
    let _ = walk::walk(root, Order::DepthFirst, BadDigest::Skip, seen, |at| {
        f(at.digest);
        let Ok(Some(dir)) = load_directory(cache, &at.digest, "") else {
            return Ok(None);
        };
        for file in &dir.files {
            if let Ok(fd) = Digest::from_opt_proto(file.digest.as_ref(), "file") {
                f(fd);
            }
        }
        Ok(Some(dir))
    });
}

/// Every digest under `root` that the cache lacks (Directory messages and files), for
/// REAPI's FAILED_PRECONDITION answer. Directories below a missing one cannot be known.
pub fn find_missing(cache: &Cache, root: &Digest) -> Result<Vec<Digest>> {
    let mut missing = Vec::new();
    // Files and Directories together: each digest is looked up once, whichever it names.
    let mut looked_up = HashSet::new();
    walk::walk(
        root,
        Order::DepthFirst,
        BadDigest::Fail,
        &mut HashSet::new(),
        |at| {
            if !looked_up.insert(at.digest) {
                return Ok(None);
            }
            let Some(dir) = load_directory(cache, &at.digest, at.path)? else {
                missing.push(at.digest);
                return Ok(None);
            };
            for file in &dir.files {
                let fd = Digest::from_opt_proto(file.digest.as_ref(), &file.name)?;
                if looked_up.insert(fd) && !cache.contains(&fd) {
                    missing.push(fd);
                }
            }
            Ok(Some(dir))
        },
    )?;
    Ok(missing)
}

/// All Directory messages of the tree at `root`, breadth-first, each once (REAPI GetTree).
pub fn get_tree(cache: &Cache, root: &Digest) -> Result<Vec<Directory>> {
    let mut out = Vec::new();
    walk::walk(
        root,
        Order::BreadthFirst,
        BadDigest::Fail,
        &mut HashSet::new(),
        |at| {
            let dir =
                load_directory(cache, &at.digest, at.path)?.ok_or_else(|| Error::Missing {
                    digests: vec![at.digest],
                    path: at.path.to_string(),
                })?;
            let dir = std::rc::Rc::new(dir);
            out.push(dir.clone());
            Ok(Some(dir))
        },
    )?;
    // The walk has dropped its references: each Directory is moved out, not copied.
    Ok(out
        .into_iter()
        .map(|d| std::rc::Rc::try_unwrap(d).unwrap_or_else(|d| (*d).clone()))
        .collect())
}

pub(crate) fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The encoding is checked byte for byte against a hand-written protobuf encoding of the
    /// REAPI schema (field numbers from remote_execution.proto), not against prost itself.
    #[test]
    fn directory_encoding_matches_reapi_wire_format() {
        let fd = Digest::of_bytes(b"abc");
        let dir = Directory {
            files: vec![FileNode {
                name: "a.txt".into(),
                digest: Some(fd.to_proto()),
                is_executable: true,
                node_properties: None,
            }],
            directories: vec![],
            symlinks: vec![SymlinkNode {
                name: "l".into(),
                target: "a.txt".into(),
                node_properties: None,
            }],
            node_properties: None,
        };
        // Digest { hash = 1 (string), size_bytes = 2 (int64) }
        let mut dig = vec![0x0a, 64];
        dig.extend_from_slice(fd.hex().as_bytes());
        dig.extend_from_slice(&[0x10, 3]);
        // FileNode { name = 1, digest = 2, is_executable = 4 }
        let mut file = vec![0x0a, 5];
        file.extend_from_slice(b"a.txt");
        file.push(0x12);
        file.push(dig.len() as u8);
        file.extend_from_slice(&dig);
        file.extend_from_slice(&[0x20, 1]);
        // SymlinkNode { name = 1, target = 2 }
        let mut sym = vec![0x0a, 1, b'l', 0x12, 5];
        sym.extend_from_slice(b"a.txt");
        // Directory { files = 1, directories = 2, symlinks = 3 }
        let mut want = vec![0x0a, file.len() as u8];
        want.extend_from_slice(&file);
        want.push(0x1a);
        want.push(sym.len() as u8);
        want.extend_from_slice(&sym);
        assert_eq!(encode(&dir), want);
        // The empty Directory encodes to nothing: its digest is the empty blob's.
        assert_eq!(
            Digest::of_bytes(&encode(&Directory::default())),
            Digest::EMPTY
        );
    }
}
