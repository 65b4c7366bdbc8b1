//! One `--shared-dir` pattern: an action-relative path whose components are names or `*`
//! (any one directory name, in any configuration), the last a plain name. Checked once when
//! the server starts: relative, no empty, `.` or `..` component, no other wildcard, at most
//! PATH_MAX bytes.

use crate::error::{Error, Result};
use crate::tree;

/// The default list: rules_swift's global module cache and Bazel's objc module cache, in any
/// configuration (docs/module-cache.md cites where each comes from). With Bazel's default
/// `--incompatible_merge_genfiles_directory`, `genfiles_dir` is `bin`; the `genfiles` one is
/// for builds that turn it off.
pub const DEFAULT_PATTERNS: [&str; 3] = [
    "bazel-out/*/bin/_swift_module_cache",
    "bazel-out/*/bin/_objc_module_cache",
    "bazel-out/*/genfiles/_objc_module_cache",
];

/// One component of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Name(String),
    /// Any one directory name.
    Any,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    parts: Vec<Part>,
}

impl Pattern {
    pub fn parse(text: &str) -> Result<Pattern> {
        let bad = |why: &str| Error::InvalidArgument(format!("shared dir pattern '{text}': {why}"));
        if text.is_empty() || text.starts_with('/') {
            return Err(bad("must be a relative path"));
        }
        let mut parts = Vec::new();
        for c in text.trim_end_matches('/').split('/') {
            if c == "*" {
                parts.push(Part::Any);
            } else if c.contains('*') {
                return Err(bad(
                    "a component is either a name or `*` (any one directory)",
                ));
            } else {
                // The same rules as an output path's names: no empty, `.`, `..` or NUL.
                tree::check_output_path(c).map_err(|e| bad(&e.to_string()))?;
                parts.push(Part::Name(c.to_string()));
            }
        }
        if !matches!(parts.last(), Some(Part::Name(_))) {
            return Err(bad(
                "the last component must be a name, the directory to share",
            ));
        }
        if text.len() >= 4096 {
            return Err(bad("longer than PATH_MAX"));
        }
        Ok(Pattern {
            text: text.trim_end_matches('/').to_string(),
            parts,
        })
    }

    /// The list `serve` uses: `none` alone turns sharing off; nothing given is the default.
    pub fn parse_list<S: AsRef<str>>(given: &[S]) -> Result<Vec<Pattern>> {
        let given: Vec<&str> = given
            .iter()
            .map(|s| s.as_ref().trim())
            .filter(|s| !s.is_empty())
            .collect();
        if given.is_empty() {
            return DEFAULT_PATTERNS.iter().map(|p| Pattern::parse(p)).collect();
        }
        if given.contains(&"none") {
            if given.len() > 1 {
                return Err(Error::InvalidArgument(
                    "shared dirs: `none` turns sharing off and cannot be combined with patterns"
                        .into(),
                ));
            }
            return Ok(Vec::new());
        }
        let mut out: Vec<Pattern> = Vec::new();
        for g in given {
            let p = Pattern::parse(g)?;
            if !out.contains(&p) {
                out.push(p);
            }
        }
        Ok(out)
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// Whether the concrete relative path `rel` matches.
    pub fn matches(&self, rel: &str) -> bool {
        let comps: Vec<&str> = rel.split('/').collect();
        comps.len() == self.parts.len()
            && self.parts.iter().zip(&comps).all(|(p, c)| match p {
                Part::Any => !c.is_empty() && *c != "." && *c != "..",
                Part::Name(n) => n == c,
            })
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_checked_and_match_one_component_per_star() {
        let p = Pattern::parse("bazel-out/*/bin/_swift_module_cache").unwrap();
        assert!(p.matches("bazel-out/k8-fastbuild/bin/_swift_module_cache"));
        assert!(p.matches("bazel-out/darwin_arm64-opt-exec-ST-1/bin/_swift_module_cache"));
        assert!(!p.matches("bazel-out/a/b/bin/_swift_module_cache"));
        assert!(!p.matches("bazel-out/k8/bin/_objc_module_cache"));
        for bad in [
            "",
            "/abs/cache",
            "a/../b",
            "a/./b",
            "a//b",
            "bazel-out/k8*/bin/x",
            "bazel-out/*",
            "a/**/b",
        ] {
            assert!(Pattern::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_list_defaults_to_the_module_caches_and_none_turns_it_off() {
        let empty: [&str; 0] = [];
        let d = Pattern::parse_list(&empty).unwrap();
        let texts: Vec<&str> = d.iter().map(|p| p.as_str()).collect();
        assert_eq!(texts, DEFAULT_PATTERNS);
        assert!(Pattern::parse_list(&["none"]).unwrap().is_empty());
        assert!(Pattern::parse_list(&["none", "a/b"]).is_err());
        let two = Pattern::parse_list(&["a/*/c", "a/*/c/", "x"]).unwrap();
        assert_eq!(two.len(), 2);
    }
}
