//! What a Command declares as outputs, read in the form its API version uses and checked
//! before anything is staged (`OutputSpec::from_command`):
//!
//! - v2.1+ clients (Bazel 7-9) send `output_paths` (and, Bazel 7-9, the deprecated
//!   `output_files` / `output_directories` beside it, which REAPI says a server ignores): each
//!   path is whatever it turns out to be.
//! - v2.0 clients (Bazel 4.2.3) send `output_files` / `output_directories`.
//!
//! A list that repeats a path, names one path as both a file and a directory, or names one
//! output inside another is refused with INVALID_ARGUMENT. REAPI forbids clients to send these
//! (`remote_execution.proto`, `Command.output_files`: "An output file cannot be duplicated, be
//! a parent of another output file, or have the same path as any of the listed output
//! directories"; `output_directories`: "An output directory cannot be duplicated or have the
//! same path as any of the listed output files"; `output_paths`: "MUST be deduplicated") and
//! prescribes no server answer; run as if fine they gave a result naming one directory twice.
//! REAPI does allow an output directory inside another; it is refused here too, because
//! collecting the outer one moves its files into the CAS (rename), leaving the inner one
//! empty, and Bazel never declares one (nested outputs are an analysis error there).
//!
//! `optional` says which declared outputs a result may leave out (`result_check`).

use crate::failure::Failure;
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::tree;
use std::collections::{BTreeSet, HashMap};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Declared {
    /// From `output_paths`: whatever it turns out to be.
    Any,
    File,
    Directory,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct OutputSpec {
    /// Paths relative to the working directory ("" only for a legacy whole-directory output).
    pub paths: Vec<(String, Declared)>,
    pub dir_format: i32,
    /// Declared paths a result may leave out. Bazel 7-9 require of a cached or executed
    /// result every mandatory output except tree artifacts (`RemoteExecutionService.
    /// downloadOutputs`: "mandatory output %s was not created", bazel PR 15051; it skips
    /// `isTreeArtifact()` outputs), and a test spawn has no mandatory output
    /// (`StandaloneTestStrategy.createTestRunnerSpawn`: `mandatoryOutputs=
    /// ImmutableSet.of()`). So: directories (v2.0 `output_directories`; with `output_paths`,
    /// those the deprecated `output_directories` Bazel 7-9 still send also lists), and every
    /// output of a Command that carries `XML_OUTPUT_FILE` in its environment, which Bazel's
    /// `TestRunnerAction` sets for every test spawn and nothing else does.
    pub optional: BTreeSet<String>,
}

/// `a/b` from `a` and `b`, either of which may be "".
pub(crate) fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}/{b}"),
    }
}

fn normalize(p: &str, field: &str) -> Result<String, Failure> {
    tree::check_output_path(p)
        .map(|parts| parts.join("/"))
        .map_err(|e| Failure::InvalidArgument(format!("Command.{field}: {e}")))
}

/// The environment variable Bazel's `TestRunnerAction` gives every test spawn.
const BAZEL_TEST_MARKER: &str = "XML_OUTPUT_FILE";

impl OutputSpec {
    #[allow(deprecated)]
    pub fn from_command(c: &pb::Command) -> Result<OutputSpec, Failure> {
        let mut paths = Vec::new();
        let mut optional = BTreeSet::new();
        if !c.output_paths.is_empty() {
            for p in &c.output_paths {
                paths.push((normalize(p, "output_paths")?, Declared::Any));
            }
            for p in &c.output_directories {
                if let Ok(p) = normalize(p, "output_directories") {
                    optional.insert(p);
                }
            }
        } else {
            for p in &c.output_files {
                paths.push((normalize(p, "output_files")?, Declared::File));
            }
            for p in &c.output_directories {
                let p = if p.is_empty() {
                    String::new()
                } else {
                    normalize(p, "output_directories")?
                };
                optional.insert(p.clone());
                paths.push((p, Declared::Directory));
            }
        }
        check_distinct(&paths)?;
        if c.environment_variables
            .iter()
            .any(|v| v.name == BAZEL_TEST_MARKER)
        {
            optional.extend(paths.iter().map(|(p, _)| p.clone()));
        }
        optional.retain(|p| paths.iter().any(|(q, _)| q == p));
        Ok(OutputSpec {
            paths,
            dir_format: c.output_directory_format,
            optional,
        })
    }

    /// Refuse an output the filesystem cannot hold once under the work dir (`prefix` bytes in
    /// front of the root, `wd` within it): PATH_MAX counts the whole path. The working
    /// directory may resolve to a longer path through a symlink; that is caught, with the
    /// same message, when the output is collected. (NAME_MAX is checked with each path.)
    pub fn check_lengths(&self, wd: &str, prefix: usize) -> Result<(), Failure> {
        for (p, _) in &self.paths {
            let len = prefix + join(wd, p).len();
            if len >= tree::PATH_MAX {
                return Err(Failure::InvalidArgument(format!(
                    "output path '{}...' would be {len} bytes under the work dir, longer than PATH_MAX allows ({})",
                    p.chars().take(32).collect::<String>(),
                    tree::PATH_MAX - 1
                )));
            }
        }
        Ok(())
    }

    /// Output paths relative to the input root, for the stager (whose parents it makes writable).
    pub fn stage_paths(&self, wd: &str) -> Vec<String> {
        self.paths
            .iter()
            .map(|(p, _)| join(wd, p))
            .filter(|p| !p.is_empty())
            .collect()
    }
}

fn field(d: Declared) -> &'static str {
    match d {
        Declared::Any => "output_paths",
        Declared::File => "output_files",
        Declared::Directory => "output_directories",
    }
}

/// No path twice (whatever its kind) and none inside another; the message quotes the rule of
/// `remote_execution.proto` the list breaks.
fn check_distinct(paths: &[(String, Declared)]) -> Result<(), Failure> {
    let mut seen: HashMap<&str, Declared> = HashMap::with_capacity(paths.len());
    for (p, d) in paths {
        if let Some(first) = seen.insert(p.as_str(), *d) {
            let rule = match (first, *d) {
                (Declared::Any, _) => "\"output paths MUST be deduplicated\"",
                (Declared::File, Declared::File) => "\"An output file cannot be duplicated\"",
                (Declared::Directory, Declared::Directory) => {
                    "\"An output directory cannot be duplicated\""
                }
                _ => "\"An output file cannot ... have the same path as any of the listed output directories\"",
            };
            let how = if first == *d {
                format!("is listed twice in Command.{}", field(*d))
            } else {
                format!(
                    "is listed in both Command.{} and Command.{}",
                    field(first),
                    field(*d)
                )
            };
            return Err(Failure::InvalidArgument(format!(
                "output path '{p}' {how} (remote_execution.proto: {rule})"
            )));
        }
    }
    for (p, d) in paths {
        let parents = std::iter::once("").chain(
            p.match_indices('/')
                .map(|(i, _)| &p[..i])
                .filter(|q| !q.is_empty()),
        );
        for q in parents.filter(|q| *q != p.as_str()) {
            if let Some(outer) = seen.get(q) {
                let outer_name = if q.is_empty() {
                    "the working directory"
                } else {
                    q
                };
                return Err(Failure::InvalidArgument(format!(
                    "output '{p}' (Command.{}) is inside output '{outer_name}' (Command.{}): one output may not be the parent of another \
                     (remote_execution.proto: \"An output file cannot be ... a parent of another output file\"; clonestage refuses \
                     nested output directories too, which it cannot collect without emptying the inner one)",
                    field(*d),
                    field(*outer)
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(files: &[&str], dirs: &[&str], paths: &[&str]) -> pb::Command {
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        #[allow(deprecated)]
        pb::Command {
            output_files: s(files),
            output_directories: s(dirs),
            output_paths: s(paths),
            ..Default::default()
        }
    }

    fn refused(c: pb::Command) -> String {
        match OutputSpec::from_command(&c) {
            Err(Failure::InvalidArgument(m)) => m,
            other => panic!("accepted or wrong failure: {other:?}"),
        }
    }

    #[test]
    fn spec_by_api_version() {
        let s = OutputSpec::from_command(&cmd(&["ignored"], &[], &["out/a"])).unwrap();
        assert_eq!(s.paths, vec![("out/a".to_string(), Declared::Any)]);
        assert_eq!(s.stage_paths("wd"), vec!["wd/out/a".to_string()]);
        let s = OutputSpec::from_command(&cmd(&["f"], &["d", ""], &[])).unwrap_err();
        assert!(
            s.message()
                .contains("inside output 'the working directory'"),
            "{}",
            s.message()
        );
        let s = OutputSpec::from_command(&cmd(&["f"], &["d"], &[])).unwrap();
        assert_eq!(s.paths.len(), 2);
        assert_eq!(s.stage_paths(""), vec!["f".to_string(), "d".to_string()]);
        assert_eq!(s.optional.iter().collect::<Vec<_>>(), vec!["d"]);
        assert!(OutputSpec::from_command(&cmd(&[], &[], &["../x"])).is_err());
        // The whole working directory alone is still a legacy output.
        assert_eq!(
            OutputSpec::from_command(&cmd(&[], &[""], &[]))
                .unwrap()
                .paths
                .len(),
            1
        );
    }

    #[test]
    fn repeated_and_nested_outputs_are_refused_quoting_reapi() {
        let m = refused(cmd(&["a", "a"], &[], &[]));
        assert!(
            m.contains("'a' is listed twice in Command.output_files")
                && m.contains("cannot be duplicated"),
            "{m}"
        );
        let m = refused(cmd(&["a/b", "a/b/"], &[], &[]));
        assert!(m.contains("listed twice"), "{m}");
        let m = refused(cmd(&["a"], &["a"], &[]));
        assert!(
            m.contains("both Command.output_files and Command.output_directories")
                && m.contains("same path"),
            "{m}"
        );
        let m = refused(cmd(&[], &["d", "d"], &[]));
        assert!(
            m.contains("An output directory cannot be duplicated"),
            "{m}"
        );
        let m = refused(cmd(&["a", "a/b"], &[], &[]));
        assert!(
            m.contains("'a/b' (Command.output_files) is inside output 'a'")
                && m.contains("parent of another"),
            "{m}"
        );
        let m = refused(cmd(&["d/x"], &["d"], &[]));
        assert!(m.contains("inside output 'd'"), "{m}");
        let m = refused(cmd(&[], &["d", "d/e"], &[]));
        assert!(
            m.contains("'d/e' (Command.output_directories) is inside output 'd'"),
            "{m}"
        );
        let m = refused(cmd(&[], &[], &["p", "p"]));
        assert!(m.contains("MUST be deduplicated"), "{m}");
        // Bazel 7-9 send the deprecated lists beside output_paths: a repeat is refused all the same.
        let m = refused(cmd(&["p"], &[], &["p", "p"]));
        assert!(m.contains("listed twice in Command.output_paths"), "{m}");
        let m = refused(cmd(&[], &[], &["p", "p/q"]));
        assert!(m.contains("inside output 'p'"), "{m}");
        // Siblings that share a prefix are not nested.
        assert!(OutputSpec::from_command(&cmd(&["a", "a-b", "ab/c"], &["a.d"], &[])).is_ok());
    }

    #[test]
    fn what_a_result_may_leave_out() {
        let s = OutputSpec::from_command(&cmd(&["f"], &["d", "x"], &["f", "d"])).unwrap();
        // `x` is not an output_path: it is no output at all.
        assert_eq!(s.optional.iter().collect::<Vec<_>>(), vec!["d"]);
        let mut test = cmd(&["t.xml", "log"], &[], &[]);
        test.environment_variables
            .push(pb::command::EnvironmentVariable {
                name: "XML_OUTPUT_FILE".into(),
                value: "t.xml".into(),
            });
        let s = OutputSpec::from_command(&test).unwrap();
        assert_eq!(s.optional.len(), 2, "a test spawn has no mandatory output");
    }
}
