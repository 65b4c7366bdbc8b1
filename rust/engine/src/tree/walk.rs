//! The one walk over a tree's Directory messages, used by everything that visits a tree from
//! its root: the stager's plan, `get_tree` (REAPI GetTree), `find_missing` and gc's
//! `reachable`. It visits each distinct Directory digest once, breadth-first (so at the
//! shallowest depth it occurs) or depth-first, without recursion (a client shapes the tree);
//! the visitor loads the Directory (from the CAS, a memo, ...) and says whether to go on below
//! it. What a Directory lists is the walk's: each subdirectory's digest is parsed here, and one
//! that does not parse fails the walk naming the Directory and path it is listed in.
//!
//! Not walks of this kind, so not using it: the plan's bottom-up count (`stage/plan.rs`,
//! post-order over memoised figures), the symlink resolution of `stage/links.rs` (a chain of
//! directories from the root) and the builder (`stage/fill.rs`, which creates as it goes).

use super::{join, Directory};
use crate::digest::Digest;
use crate::error::{Error, Result};
use std::borrow::Borrow;
use std::collections::{HashSet, VecDeque};

/// Which Directory the walk visits next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Level by level from the root, each level in listing order: a digest is visited at the
    /// shallowest depth it occurs.
    BreadthFirst,
    /// The last-listed subdirectory first, down to the bottom, then back up (a stack).
    DepthFirst,
}

/// What to do with a subdirectory entry whose digest does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadDigest {
    /// Fail the walk (`Error::InvalidTree` naming the Directory that lists it).
    Fail,
    /// Skip the entry and walk on (gc: keep whatever can be reached).
    Skip,
}

/// A Directory the walk reached, the first time it reached its digest.
#[derive(Debug, Clone, Copy)]
pub struct Reached<'a> {
    pub digest: Digest,
    /// From the root ("" for the root itself), through the first path it was reached by.
    pub path: &'a str,
    /// Directories above it (the root: 0).
    pub depth: usize,
}

/// Visit every distinct Directory digest reachable from `root` once, in `order`, skipping the
/// ones already in `seen` (and adding each visited one). `visit` answers with the decoded
/// Directory to walk on into its subdirectories, or None to go no further below it (missing,
/// or known already); its error stops the walk.
pub fn walk<D: Borrow<Directory>>(
    root: &Digest,
    order: Order,
    bad: BadDigest,
    seen: &mut HashSet<Digest>,
    mut visit: impl FnMut(Reached<'_>) -> Result<Option<D>>,
) -> Result<()> {
    let mut todo = VecDeque::from([(*root, String::new(), 0usize)]);
    loop {
        let next = match order {
            Order::BreadthFirst => todo.pop_front(),
            Order::DepthFirst => todo.pop_back(),
        };
        let Some((digest, path, depth)) = next else {
            return Ok(());
        };
        if !seen.insert(digest) {
            continue;
        }
        let reached = Reached {
            digest,
            path: &path,
            depth,
        };
        let Some(dir) = visit(reached)? else {
            continue;
        };
        for sub in &dir.borrow().directories {
            let sd = match Digest::from_opt_proto(sub.digest.as_ref(), &sub.name) {
                Ok(sd) => sd,
                Err(_) if bad == BadDigest::Skip => continue,
                Err(e) => {
                    return Err(Error::InvalidTree {
                        path: path.clone(),
                        digest,
                        reason: e.to_string(),
                    })
                }
            };
            if !seen.contains(&sd) {
                todo.push_back((sd, join(&path, &sub.name), depth + 1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{encode, DirectoryNode};

    fn node(name: &str, d: &Directory) -> DirectoryNode {
        DirectoryNode {
            name: name.into(),
            digest: Some(Digest::of_bytes(&encode(d)).to_proto()),
        }
    }

    fn dir(subs: Vec<DirectoryNode>) -> Directory {
        Directory {
            directories: subs,
            ..Default::default()
        }
    }

    /// root -> {a -> {c}, b -> {c}}: c is listed twice, at depth 2 both times.
    fn sample() -> (Digest, Vec<(Digest, Directory)>) {
        let leaf = dir(vec![]);
        let leaf = Directory {
            files: vec![crate::tree::FileNode {
                name: "f".into(),
                digest: Some(Digest::of_bytes(b"x").to_proto()),
                ..Default::default()
            }],
            ..leaf
        };
        let a = dir(vec![node("c", &leaf)]);
        let b = Directory {
            symlinks: vec![crate::tree::SymlinkNode {
                name: "l".into(),
                target: "x".into(),
                node_properties: None,
            }],
            ..dir(vec![node("c", &leaf)])
        };
        let root = dir(vec![node("a", &a), node("b", &b)]);
        let all: Vec<(Digest, Directory)> = [root, a, b, leaf]
            .into_iter()
            .map(|d| (Digest::of_bytes(&encode(&d)), d))
            .collect();
        (all[0].0, all)
    }

    fn visits(order: Order) -> Vec<(String, usize)> {
        let (root, all) = sample();
        let mut got = Vec::new();
        walk(
            &root,
            order,
            BadDigest::Fail,
            &mut HashSet::new(),
            |at: Reached| {
                got.push((at.path.to_string(), at.depth));
                Ok(all
                    .iter()
                    .find(|(d, _)| *d == at.digest)
                    .map(|(_, d)| d.clone()))
            },
        )
        .unwrap();
        got
    }

    #[test]
    fn each_directory_once_in_the_stated_order() {
        let bfs: Vec<(String, usize)> = [("", 0), ("a", 1), ("b", 1), ("a/c", 2)]
            .iter()
            .map(|(p, d)| (p.to_string(), *d))
            .collect();
        assert_eq!(visits(Order::BreadthFirst), bfs);
        let dfs: Vec<(String, usize)> = [("", 0), ("b", 1), ("b/c", 2), ("a", 1)]
            .iter()
            .map(|(p, d)| (p.to_string(), *d))
            .collect();
        assert_eq!(visits(Order::DepthFirst), dfs);
    }

    #[test]
    fn a_visitor_stops_the_walk_below_a_directory_and_seen_ones_are_skipped() {
        let (root, all) = sample();
        let a = all[1].0;
        let mut seen = HashSet::from([all[2].0]); // b, as if walked from another root
        let mut got = Vec::new();
        walk(
            &root,
            Order::BreadthFirst,
            BadDigest::Fail,
            &mut seen,
            |at| {
                got.push(at.path.to_string());
                // Not below a.
                Ok(all
                    .iter()
                    .find(|(d, _)| *d == at.digest && *d != a)
                    .map(|(_, d)| d.clone()))
            },
        )
        .unwrap();
        assert_eq!(got, vec!["", "a"]);
        assert!(seen.contains(&a) && seen.contains(&root));
    }

    #[test]
    fn a_subdirectory_without_a_digest_names_the_directory_listing_it() {
        let bad = dir(vec![DirectoryNode {
            name: "nodigest".into(),
            digest: None,
        }]);
        let root = dir(vec![node("sub", &bad)]);
        let (rd, bd) = (
            Digest::of_bytes(&encode(&root)),
            Digest::of_bytes(&encode(&bad)),
        );
        let find = |d: &Digest| {
            if *d == rd {
                Some(root.clone())
            } else if *d == bd {
                Some(bad.clone())
            } else {
                None
            }
        };
        let e = walk(
            &rd,
            Order::BreadthFirst,
            BadDigest::Fail,
            &mut HashSet::new(),
            |at| Ok(find(&at.digest)),
        )
        .unwrap_err();
        match &e {
            Error::InvalidTree { path, digest, .. } => {
                assert_eq!((path.as_str(), *digest), ("sub", bd), "{e}")
            }
            _ => panic!("{e}"),
        }
        assert!(e.to_string().contains("nodigest"), "{e}");
        // Skipped, the walk visits both and ends.
        let mut n = 0;
        walk(
            &rd,
            Order::BreadthFirst,
            BadDigest::Skip,
            &mut HashSet::new(),
            |at| {
                n += 1;
                Ok(find(&at.digest))
            },
        )
        .unwrap();
        assert_eq!(n, 2);
    }
}
