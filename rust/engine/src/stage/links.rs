//! Symlinks resolved through the tree being staged, never through the host filesystem.
//!
//! A lexical check of each target (`tree::validate`) cannot see chains: with `sub/up -> ..`,
//! `x -> sub/up/sub/up/../../../MARK` never climbs above the root when its `..`s are counted,
//! yet resolves outside it. So after the plan, every symlink of the tree is resolved the way
//! the kernel would resolve it in the staged root: component by component from the link's own
//! directory, following the tree's own symlinks (at most `MAX_HOPS` in a chain, like Linux's
//! MAXSYMLINKS), and a `..` at the root is an escape. A link that dangles inside the tree is
//! kept (the kernel answers ENOENT), but what follows a missing component, or a file, is walked
//! on as if it were a directory (an action may create the missing name, or replace the file,
//! where it may write): names below it are taken as they are, and once `..`s climb back into
//! the tree the walk resolves through it again, so a link cannot dangle outside the root either. Chains longer than `MAX_HOPS` (loops)
//! are refused too.
//!
//! Work is bounded without recursion: the walk over the tree is an explicit stack that only
//! enters directories holding symlinks, each walk is bounded by the hop limit and PATH_MAX-long
//! targets, and a stage has a step budget. A subtree whose links all resolve within itself is
//! remembered (`Memo::links_contained`) and skipped wherever it occurs again.
//!
//! The same walk resolves a command's working directory (`resolve_dir`).

use super::plan::Plan;
use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::tree::{self, Directory, SymlinkPolicy};
use std::path::Path;
use std::sync::Arc;

/// Symlinks followed in one resolution, as Linux's MAXSYMLINKS.
pub const MAX_HOPS: u32 = 40;

/// Path components walked per stage, plus `STEPS_PER_LINK` per symlink in the expanded tree.
const STEPS_BASE: u64 = 1 << 20;
const STEPS_PER_LINK: u64 = 256;

/// Where a walk ended.
enum End {
    /// At a directory of the tree: the names from the root.
    Dir(Vec<String>),
    /// At a file (or through one: ENOTDIR), or at an absolute link the policy allows.
    NotDir,
    /// Dangling inside the tree: `missing` components (already checked to stay inside) that
    /// the tree lacks below the directory `at`.
    Missing {
        at: Vec<String>,
        missing: Vec<String>,
    },
}

struct Walker<'a> {
    plan: &'a Plan<'a>,
    policy: SymlinkPolicy,
    steps_left: u64,
}

/// One level of the chain from the root to where a walk is.
#[derive(Clone)]
struct Level {
    dir: Arc<Directory>,
    name: String,
}

impl Walker<'_> {
    /// Resolve `target` from the directory `chain` ends at. Returns the end, the shallowest
    /// level (root = 0) the walk passed through, and whether it went below a name the tree
    /// lacks (or a file) and came back up through it.
    fn walk(
        &mut self,
        chain: &[Level],
        target: &str,
    ) -> std::result::Result<(End, usize, bool), String> {
        let mut at: Vec<Level> = chain.to_vec();
        let mut shallowest = at.len() - 1;
        // Components still to walk, last first.
        let mut todo: Vec<String> = target.rsplit('/').map(str::to_string).collect();
        // Names walked below a name the tree lacks, or below a file: the kernel answers ENOENT
        // or ENOTDIR today, but an action may create the missing name, or replace the file, where
        // it can write (the root, an output's parent). So they are kept as they are, a `..`
        // takes one back off, and once none is left the walk is back in the tree and resolves
        // through it again (following the tree's own symlinks) as the kernel then would.
        let mut virt: Vec<String> = Vec::new();
        let (mut through_virt, mut came_back) = (false, false);
        let mut hops = 1u32;
        while let Some(c) = todo.pop() {
            if self.steps_left == 0 {
                return Err("resolving the tree's symlinks takes too many steps".into());
            }
            self.steps_left -= 1;
            match c.as_str() {
                "" | "." => {}
                ".." => {
                    if virt.pop().is_some() {
                        came_back = true;
                        continue;
                    }
                    if at.len() == 1 {
                        return Err(if through_virt {
                            "dangles outside the root (it leaves the root once what is missing, or a file on its way, is a directory)"
                        } else {
                            "resolves, through the tree's own symlinks, to a path that leaves the root"
                        }
                        .into());
                    }
                    at.pop();
                    shallowest = shallowest.min(at.len() - 1);
                }
                name if !virt.is_empty() => virt.push(name.to_string()),
                name => {
                    let here = at.last().expect("the root stays").dir.clone();
                    if let Ok(i) = here
                        .directories
                        .binary_search_by(|d| d.name.as_str().cmp(name))
                    {
                        let node = &here.directories[i];
                        let d = Digest::from_opt_proto(node.digest.as_ref(), &node.name)
                            .map_err(|e| e.to_string())?;
                        let dir = self
                            .plan
                            .dir(&d, Path::new(name))
                            .map_err(|e| e.to_string())?;
                        at.push(Level {
                            dir,
                            name: name.to_string(),
                        });
                    } else if let Ok(i) = here
                        .symlinks
                        .binary_search_by(|s| s.name.as_str().cmp(name))
                    {
                        hops += 1;
                        if hops > MAX_HOPS {
                            return Err(format!(
                                "more than {MAX_HOPS} symlinks in one chain (a loop?)"
                            ));
                        }
                        let t = &here.symlinks[i].target;
                        if t.starts_with('/') {
                            if self.policy.allow_absolute {
                                return Ok((End::NotDir, shallowest, came_back));
                            }
                            return Err(format!("goes through '{name}', an absolute symlink"));
                        }
                        todo.extend(t.rsplit('/').map(str::to_string));
                    } else {
                        let is_file = here
                            .files
                            .binary_search_by(|f| f.name.as_str().cmp(name))
                            .is_ok();
                        if is_file && todo.iter().all(|c| c.is_empty() || c == ".") {
                            return Ok((End::NotDir, shallowest, came_back));
                        }
                        through_virt = true;
                        virt.push(name.to_string());
                    }
                }
            }
        }
        let names = at.iter().skip(1).map(|l| l.name.clone()).collect();
        let end = if virt.is_empty() {
            End::Dir(names)
        } else {
            End::Missing {
                at: names,
                missing: virt,
            }
        };
        Ok((end, shallowest, came_back))
    }
}

/// Resolve every symlink of the tree at `root` in place; refuse any that leaves the root.
pub(crate) fn check(plan: &Plan, root: &Digest, policy: SymlinkPolicy) -> Result<()> {
    if policy.allow_escaping {
        return Ok(());
    }
    let top = plan.facts(root, Path::new(""))?;
    // No symlink, or a root whose links were all resolved before (a root's never leave it).
    if top.links == 0 || plan.links_contained(root, policy) {
        return Ok(());
    }
    let mut w = Walker {
        plan,
        policy,
        steps_left: STEPS_BASE.saturating_add(top.links.saturating_mul(STEPS_PER_LINK)),
    };
    // The chain from the root to the directory being checked, and per level: its digest, the
    // next subdirectory to enter, and the shallowest level any walk from inside it reached.
    let mut chain: Vec<Level> = Vec::new();
    let mut frames: Vec<(Digest, usize, usize)> = Vec::new();
    let enter = |w: &mut Walker,
                 chain: &mut Vec<Level>,
                 frames: &mut Vec<(Digest, usize, usize)>,
                 d: Digest,
                 dir: Arc<Directory>,
                 name: String|
     -> Result<()> {
        chain.push(Level {
            dir: dir.clone(),
            name,
        });
        let depth = chain.len() - 1;
        let mut shallowest = depth;
        for s in &dir.symlinks {
            if s.target.starts_with('/') {
                // Allowed by the policy (or refused already by the lexical check).
                continue;
            }
            let (_, reached, _) = w.walk(chain, &s.target).map_err(|r| {
                let path: Vec<&str> = chain.iter().skip(1).map(|l| l.name.as_str()).collect();
                let path = path.join("/");
                Error::InvalidTree {
                    digest: d,
                    reason: format!(
                        "symlink '{}' -> '{}': {r}",
                        tree::join(&path, &s.name),
                        s.target
                    ),
                    path,
                }
            })?;
            shallowest = shallowest.min(reached);
        }
        frames.push((d, 0, shallowest));
        Ok(())
    };
    let root_dir = plan.dir(root, Path::new(""))?;
    enter(
        &mut w,
        &mut chain,
        &mut frames,
        *root,
        root_dir,
        String::new(),
    )?;
    while let Some(&mut (d, ref mut next, _)) = frames.last_mut() {
        let dir = chain.last().expect("one level per frame").dir.clone();
        if let Some(sub) = dir.directories.get(*next) {
            *next += 1;
            let sd = Digest::from_opt_proto(sub.digest.as_ref(), &sub.name)?;
            let p = Path::new(&sub.name);
            if plan.facts(&sd, p)?.links == 0 || plan.links_contained(&sd, policy) {
                continue;
            }
            let sub_dir = plan.dir(&sd, p)?;
            enter(
                &mut w,
                &mut chain,
                &mut frames,
                sd,
                sub_dir,
                sub.name.clone(),
            )?;
            continue;
        }
        // Done with `d`: its links stayed inside it if no walk reached above its level.
        let (_, _, shallowest) = frames.pop().expect("non-empty");
        let depth = chain.len() - 1;
        chain.pop();
        if shallowest >= depth {
            plan.note_links_contained(&d, policy);
        }
        if let Some(parent) = frames.last_mut() {
            parent.2 = parent.2.min(shallowest);
        }
    }
    Ok(())
}

/// `rel` (a normalized relative path, "" for the root) resolved through the tree: the real
/// directories it names from the root, following the tree's own symlinks. Components the
/// tree does not hold are kept as they are (they will be created, e.g. as output parents).
/// Refused with INVALID_ARGUMENT if it leaves the root or ends at a file.
pub(crate) fn resolve_dir(plan: &Plan, root: &Digest, rel: &str, what: &str) -> Result<String> {
    if rel.is_empty() {
        return Ok(String::new());
    }
    let mut w = Walker {
        plan,
        policy: SymlinkPolicy::default(),
        steps_left: STEPS_BASE,
    };
    let root_dir = plan.dir(root, Path::new(""))?;
    let chain = [Level {
        dir: root_dir,
        name: String::new(),
    }];
    let bad = |r: String| Error::InvalidArgument(format!("{what} '{rel}': {r}"));
    let (end, _, came_back) = w.walk(&chain, rel).map_err(bad)?;
    if came_back {
        // The parts the tree lacks are created (as output parents): a `..` among them would
        // climb back through a directory that does not exist yet.
        return Err(bad(
            "goes through a path the input tree does not hold and back".into(),
        ));
    }
    match end {
        End::Dir(names) => Ok(names.join("/")),
        End::NotDir => Err(bad("is not a directory of the input tree".into())),
        End::Missing { mut at, missing } => {
            at.extend(missing);
            Ok(at.join("/"))
        }
    }
}
