//! What an `ActionResult` must be before this server stores or serves it, whoever made it: an
//! action run here (`respond`, before it records the result) or a team's cache
//! (`upstream::read_through`, before it fetches the result's blobs). One set of checks, so the
//! two cannot drift apart (issue 23: results read through from an upstream skipped the path
//! checks Execute applies, and were stored and served with `../../X` in them).
//!
//! Against the Command's declared outputs (`OutputSpec`) and working directory:
//! - exit code 0. REAPI allows caching a failure, but Bazel never uploads one
//!   (`RemoteExecutionService.uploadOutputs`: "shouldn't upload outputs of failed local
//!   action"), and a failure read from someone else's cache must not fail a build without the
//!   action having run here;
//! - every digest well-formed;
//! - every reported path a normalized relative path (no `..`, `.`, empty component, leading or
//!   trailing `/`), reported once across all five output lists, and declared by the Command
//!   (with `output_paths` as any kind; with v2.0 lists as the kind it was declared: a file in
//!   `output_files` or `output_file_symlinks`, a directory in `output_directories` or
//!   `output_directory_symlinks`). Bazel writes what a result names under its exec root
//!   (`parseActionResultMetadata` resolves each path with `outputPathToLocalPath`), and an
//!   ImmutableMap of files built with `buildOrThrow` fails on a repeated path;
//! - every declared output present unless `OutputSpec::optional` (what Bazel 7-9 require; see
//!   there): Bazel fails the build on a cached result without a mandatory output
//!   ("mandatory output %s was not created", bazel issue 22941);
//! - symlink targets (output symlinks, and symlinks inside output Trees) that the stager
//!   would accept as inputs: relative, not climbing above the input root, no NUL
//!   (`tree::check_symlink_target` with the default policy; Capabilities says
//!   `symlink_absolute_path_strategy: DISALLOWED`);
//! - each output directory with a Tree (unless the client asked for `DIRECTORY_ONLY`), whose
//!   Directories are valid as REAPI requires of any Directory (names not empty, `.`, `..`, no
//!   `/` or NUL, each kind sorted and unique: `tree::validate_directory`) and whose every
//!   DirectoryNode names one of its children (Bazel's `parseDirectory` looks each up with
//!   `checkNotNull`).

use super::output_spec::{join, Declared, OutputSpec};
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::tree::{self, SymlinkPolicy};
use clonestage_engine::{Cache, Digest};
use pb::command::OutputDirectoryFormat;
use prost::Message;
use std::collections::{HashMap, HashSet, VecDeque};

/// Why a result may not be stored or served.
pub(crate) type Refused = String;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    File,
    Directory,
    /// `output_symlinks` (v2.1): a symlink to either.
    Symlink,
    FileSymlink,
    DirectorySymlink,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::File => "an output file",
            Kind::Directory => "an output directory",
            Kind::Symlink => "an output symlink",
            Kind::FileSymlink => "an output file symlink",
            Kind::DirectorySymlink => "an output directory symlink",
        }
    }

    fn fits(self, declared: Declared) -> bool {
        match declared {
            Declared::Any => true,
            Declared::File => matches!(self, Kind::File | Kind::FileSymlink | Kind::Symlink),
            Declared::Directory => {
                matches!(
                    self,
                    Kind::Directory | Kind::DirectorySymlink | Kind::Symlink
                )
            }
        }
    }
}

fn components(p: &str) -> usize {
    if p.is_empty() {
        0
    } else {
        p.split('/').count()
    }
}

/// Everything but the contents of the output Trees (`check_tree`), which need fetching first.
pub(crate) fn check_result(
    spec: &OutputSpec,
    wd: &str,
    r: &pb::ActionResult,
) -> Result<(), Refused> {
    if r.exit_code != 0 {
        return Err(format!(
            "exit code {}: only a successful result is stored or served",
            r.exit_code
        ));
    }
    check_lists(r)?;
    let declared: HashMap<&str, Declared> =
        spec.paths.iter().map(|(p, d)| (p.as_str(), *d)).collect();
    let mut reported: HashSet<&str> = HashSet::new();
    for (path, kind, target) in entries(r) {
        check_declared(path, kind, &declared)?;
        reported.insert(path);
        if let Some(target) = target {
            // The symlink's directory, counted from the input root.
            let depth = (components(wd) + components(path)).saturating_sub(1);
            tree::check_symlink_target(target, depth, SymlinkPolicy::default())
                .map_err(|e| format!("{} '{path}' -> '{target}': {e}", kind.name()))?;
        }
    }
    let want_tree = spec.dir_format != OutputDirectoryFormat::DirectoryOnly as i32;
    if let Some(d) = r
        .output_directories
        .iter()
        .find(|d| want_tree && d.tree_digest.is_none())
    {
        return Err(format!("output directory '{}' has no Tree", d.path));
    }
    if let Some((p, _)) = spec
        .paths
        .iter()
        .find(|(p, _)| !spec.optional.contains(p) && !reported.contains(p.as_str()))
    {
        let p = if p.is_empty() { "." } else { p };
        return Err(format!("declared output '{p}' is missing"));
    }
    Ok(())
}

/// What a result must be whatever Command it answers: every digest well-formed, every
/// reported path a normalized relative path, reported once across the five output lists.
/// UpdateActionResult refuses a result that fails it with INVALID_ARGUMENT (the Command it
/// answers need not be in the CAS then); `check_result` begins with it.
pub(crate) fn check_lists(r: &pb::ActionResult) -> Result<(), Refused> {
    if let Some(e) = crate::result_digests::named(r).bad {
        return Err(format!("it names a bad digest: {e}"));
    }
    let mut reported: HashSet<&str> = HashSet::new();
    for (path, _, _) in entries(r) {
        if !path.is_empty() {
            let parts = tree::check_output_path(path).map_err(|e| e.to_string())?;
            if parts.len() != components(path) {
                return Err(format!("output path '{path}' is not normalized"));
            }
        }
        if !reported.insert(path) {
            return Err(format!("output path '{path}' is reported twice"));
        }
    }
    Ok(())
}

/// Every reported output: path, kind, and a symlink's target.
#[allow(deprecated)] // v2.0 clients read output_file_symlinks / output_directory_symlinks
fn entries(r: &pb::ActionResult) -> impl Iterator<Item = (&str, Kind, Option<&str>)> {
    fn links(v: &[pb::OutputSymlink], k: Kind) -> impl Iterator<Item = (&str, Kind, Option<&str>)> {
        v.iter()
            .map(move |s| (s.path.as_str(), k, Some(s.target.as_str())))
    }
    r.output_files
        .iter()
        .map(|f| (f.path.as_str(), Kind::File, None))
        .chain(
            r.output_directories
                .iter()
                .map(|d| (d.path.as_str(), Kind::Directory, None)),
        )
        .chain(links(&r.output_symlinks, Kind::Symlink))
        .chain(links(&r.output_file_symlinks, Kind::FileSymlink))
        .chain(links(&r.output_directory_symlinks, Kind::DirectorySymlink))
}

/// One reported output path (well-formed: `check_lists`): declared as a kind it may be.
fn check_declared(
    path: &str,
    kind: Kind,
    declared: &HashMap<&str, Declared>,
) -> Result<(), Refused> {
    match declared.get(path) {
        // "" is the legacy whole-working-directory output, declared or refused like any.
        None => Err(format!(
            "{} '{path}' was never declared by the Command",
            kind.name()
        )),
        Some(d) if !kind.fits(*d) => Err(format!(
            "'{path}' is declared as {} but reported as {}",
            if *d == Declared::File {
                "an output file"
            } else {
                "an output directory"
            },
            kind.name()
        )),
        Some(_) => Ok(()),
    }
}

/// The Tree of the output directory at `path` (relative to the working directory `wd`):
/// every Directory valid at its place under the input root, every DirectoryNode one of the
/// Tree's children. Each distinct Directory is checked once, at the shallowest place it
/// occurs (where a relative symlink target climbs furthest), so a Tree that repeats a
/// subdirectory costs its size, not its expansion.
pub(crate) fn check_tree(wd: &str, path: &str, t: &pb::Tree) -> Result<(), Refused> {
    let Some(root) = &t.root else {
        return Err(format!("output tree '{path}' has no root"));
    };
    let children: HashMap<Digest, &pb::Directory> = t
        .children
        .iter()
        .map(|c| (Digest::of_bytes(&c.encode_to_vec()), c))
        .collect();
    let root_digest = Digest::of_bytes(&root.encode_to_vec());
    let mut seen = HashSet::from([root_digest]);
    let mut queue = VecDeque::from([(root, join(wd, path), root_digest)]);
    while let Some((dir, at, digest)) = queue.pop_front() {
        tree::validate_directory(dir, &at, &digest, SymlinkPolicy::default())
            .map_err(|e| format!("output tree '{path}': {e}"))?;
        for n in &dir.directories {
            let d = Digest::from_opt_proto(n.digest.as_ref(), &n.name)
                .map_err(|e| format!("output tree '{path}': {e}"))?;
            let Some(child) = children.get(&d) else {
                return Err(format!(
                    "output tree '{path}': directory '{}' names {d}, which is not among the Tree's children",
                    join(&at, &n.name)
                ));
            };
            if seen.insert(d) {
                queue.push_back((child, join(&at, &n.name), d));
            }
        }
    }
    Ok(())
}

/// `check_result`, then every output Tree as stored in `cache` (a result made here).
pub(crate) fn check_stored(
    cache: &Cache,
    spec: &OutputSpec,
    wd: &str,
    r: &pb::ActionResult,
) -> Result<(), Refused> {
    check_result(spec, wd, r)?;
    for d in &r.output_directories {
        let Some(td) = d.tree_digest.as_ref() else {
            continue;
        };
        let td = Digest::from_proto(td).map_err(|e| e.to_string())?;
        let t = cache
            .read(&td)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("output tree {td} is not in the cache"))?;
        let t = pb::Tree::decode(t.as_slice()).map_err(|e| format!("output tree {td}: {e}"))?;
        check_tree(wd, &d.path, &t)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
