//! Where a root gets its shared cache directories (`crate::shared`): each pattern is expanded
//! against the directories the root will have, those of the input tree (never through one of
//! its symlinks) and those on the way to a declared output, and a match becomes a symlink to
//! the persistent directory, made after the root is filled.
//!
//! A match is left alone, and counted, when the action declares that path itself: an entry of
//! the input tree at it (`shared_dirs_declared`), or a declared output at it, below it or above
//! it (an output directory holding it would carry the link into the action's result). At most
//! `MAX_PER_PATTERN` matches per pattern and root: a tree with thousands of configurations
//! must not make thousands of directories (the rest are counted as `shared_dirs_over_limit`).
//! The chain from the root to each match's parent is made writable, as for an output (rule 4
//! of docs/permissions.md), so that the link can be made there by a server that is not root.

use super::plan::Plan;
use crate::digest::Digest;
use crate::error::{Error, IoContext, Result};
use crate::platform::{cstr, Dir};
use crate::shared::pattern::{Part, Pattern};
use crate::tree::Directory;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

/// Matches of one pattern in one root beyond which the rest are skipped.
pub const MAX_PER_PATTERN: usize = 16;

/// What the expansion found.
#[derive(Debug, Default)]
pub(crate) struct Matches {
    /// Action-relative paths to link, sorted, distinct.
    pub rels: Vec<String>,
    /// Matches the action declares itself (an input, or an output at, below or above it).
    pub declared: u64,
    pub over_limit: u64,
}

/// A directory the root will have: from the tree (with its Directory) or only on the way to
/// an output.
struct Node {
    path: Vec<String>,
    dir: Option<Arc<Directory>>,
}

pub(crate) fn expand(
    plan: &Plan,
    root: &Digest,
    patterns: &[Pattern],
    outputs: &[Vec<&str>],
) -> Result<Matches> {
    let mut m = Matches::default();
    let mut rels = BTreeSet::new();
    let root_dir = plan.dir(root, Path::new(""))?;
    for p in patterns {
        let parts = p.parts();
        let (last, parents) = parts.split_last().expect("a pattern has a last name");
        let Part::Name(last) = last else {
            unreachable!("a pattern ends in a name")
        };
        let mut frontier = vec![Node {
            path: Vec::new(),
            dir: Some(root_dir.clone()),
        }];
        for part in parents {
            let mut next = Vec::new();
            for n in &frontier {
                for name in candidates(n, part, outputs) {
                    if let Some(child) = child_dir(plan, n, &name, outputs)? {
                        next.push(child);
                    }
                }
            }
            frontier = next;
        }
        let mut found = 0usize;
        for n in frontier {
            let mut rel_parts = n.path.clone();
            rel_parts.push(last.clone());
            let in_tree = n.dir.as_ref().is_some_and(|d| has_entry(d, last));
            let by_output = outputs.iter().any(|o| related(o, &rel_parts));
            if in_tree || by_output {
                m.declared += 1;
                continue;
            }
            if found == MAX_PER_PATTERN {
                m.over_limit += 1;
                continue;
            }
            found += 1;
            rels.insert(rel_parts.join("/"));
        }
    }
    m.rels = rels.into_iter().collect();
    Ok(m)
}

/// Names a pattern part may take below `n`.
fn candidates(n: &Node, part: &Part, outputs: &[Vec<&str>]) -> Vec<String> {
    match part {
        Part::Name(name) => vec![name.clone()],
        Part::Any => {
            let mut names: BTreeSet<String> = BTreeSet::new();
            if let Some(d) = &n.dir {
                names.extend(d.directories.iter().map(|x| x.name.clone()));
            }
            // Directories on the way to an output: every component but the output's own.
            for o in outputs {
                if o.len() > n.path.len() + 1 && o[..n.path.len()] == n.path[..] {
                    names.insert(o[n.path.len()].to_string());
                }
            }
            names.into_iter().collect()
        }
    }
}

/// `name` below `n` if the root will have it as a real directory (never a symlink of the tree).
fn child_dir(plan: &Plan, n: &Node, name: &str, outputs: &[Vec<&str>]) -> Result<Option<Node>> {
    let mut path = n.path.clone();
    path.push(name.to_string());
    if let Some(d) = &n.dir {
        if let Some(sub) = d.directories.iter().find(|x| x.name == name) {
            let digest = Digest::from_opt_proto(sub.digest.as_ref(), &sub.name)?;
            let dir = plan.dir(&digest, Path::new(&path.join("/")))?;
            return Ok(Some(Node {
                path,
                dir: Some(dir),
            }));
        }
        if has_entry(d, name) {
            // A file or a symlink of the tree: never linked through.
            return Ok(None);
        }
    }
    let on_output_chain = outputs
        .iter()
        .any(|o| o.len() > path.len() && o[..path.len()] == path[..]);
    Ok(on_output_chain.then_some(Node { path, dir: None }))
}

fn has_entry(d: &Directory, name: &str) -> bool {
    d.files.iter().any(|f| f.name == name)
        || d.directories.iter().any(|x| x.name == name)
        || d.symlinks.iter().any(|s| s.name == name)
}

/// Whether output `o` is `rel`, lies below it, or holds it.
fn related(o: &[&str], rel: &[String]) -> bool {
    let n = o.len().min(rel.len());
    o[..n].iter().zip(&rel[..n]).all(|(a, b)| *a == b.as_str())
}

/// Make the links in the filled root: `rel` -> `target` for each pair. The parent of each
/// exists and is a real directory (the stage made it writable as for an output).
pub(crate) fn link(
    root: &Dir,
    root_path: &Path,
    dirs: &[(String, std::path::PathBuf)],
) -> Result<()> {
    for (rel, target) in dirs {
        let parts: Vec<&str> = rel.split('/').collect();
        let (last, parents) = parts.split_last().expect("a relative path has a name");
        let mut here: Option<Dir> = None;
        for (i, c) in parents.iter().enumerate() {
            let at = root_path.join(parents[..=i].join("/"));
            let d = here.as_ref().unwrap_or(root);
            here = Some(d.open_at(&cstr(c).ctx("name", &at)?).ctx("open", &at)?);
        }
        let at = root_path.join(rel);
        let target_c = cstr(target).ctx("name", target)?;
        here.as_ref()
            .unwrap_or(root)
            .symlink_at(&target_c, &cstr(last).ctx("name", &at)?)
            .map_err(|e| Error::io("symlink", &at, e))?;
    }
    Ok(())
}
