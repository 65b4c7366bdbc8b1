//! A Bazel release number, read from what people and tools write: `bazel --version`
//! (`bazel 7.4.1`), `bazel info release` (`release 7.4.1`), `.bazelversion` and
//! `$USE_BAZEL_VERSION` (`7.4.1`, `8.x`, `8.0.0rc2`, `9.0.0-pre.20250101.1`, a fork's
//! `mirror/7.6.1`), or the path of a Bazel binary that names it (Bazelisk's
//! `.../bazel-5.4.1-linux-x86_64/bin/bazel`, Debian's `bazel-4`). Development builds name
//! none (`bazel no_version`, `development version`), nor do Bazelisk's aliases (`latest`,
//! `rolling`, `last_green`): those are `None`, and get no version-specific flag.
//!
//! A part that is not written (`8.x`, `7`) counts as 0, the lowest release it may mean, so a
//! flag added in a minor release is never passed to a Bazel that may predate it.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Version {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Version {
        Version {
            major,
            minor,
            patch,
        }
    }

    /// From a version string (see the module doc); None when it names no release.
    pub fn parse(text: &str) -> Option<Version> {
        let t = text.trim();
        let t = t
            .strip_prefix("bazel ")
            .or_else(|| t.strip_prefix("release "))
            .unwrap_or(t)
            .trim();
        // A fork's `<fork>/<version>` in .bazelversion (Bazelisk's syntax).
        let t = t.rsplit('/').next().unwrap_or(t);
        let (major, rest) = leading_number(t)?;
        if !(rest.is_empty() || rest.starts_with('.')) || major == 0 {
            return None;
        }
        let mut parts = rest.strip_prefix('.').unwrap_or("").splitn(2, '.');
        let minor = parts.next().and_then(leading_number).map_or(0, |(n, _)| n);
        let patch = parts.next().and_then(leading_number).map_or(0, |(n, _)| n);
        Some(Version::new(major, minor, patch))
    }

    /// From the path of a Bazel binary: a component `bazel-<version>...` (Bazelisk's download
    /// directory, Debian's `bazel-4`), else None.
    pub fn from_binary_path(path: &str) -> Option<Version> {
        path.split('/').rev().find_map(|component| {
            let v = component.strip_prefix("bazel-")?;
            // `bazel-5.4.1-linux-x86_64`: the version ends at the platform suffix.
            Version::parse(v.split('-').next()?)
        })
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The decimal number at the start of `s` and what follows it.
fn leading_number(s: &str) -> Option<(u32, &str)> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    Some((s[..end].parse().ok()?, &s[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> Option<(u32, u32, u32)> {
        Version::parse(text).map(|v| (v.major, v.minor, v.patch))
    }

    #[test]
    fn the_forms_bazel_and_people_write() {
        assert_eq!(v("4.2.3"), Some((4, 2, 3)));
        assert_eq!(v("bazel 5.4.1"), Some((5, 4, 1)));
        assert_eq!(v("release 6.0.0"), Some((6, 0, 0)));
        assert_eq!(v("7"), Some((7, 0, 0)));
        assert_eq!(v("8.0.0rc2\n"), Some((8, 0, 0)));
        assert_eq!(v("8.x"), Some((8, 0, 0)));
        assert_eq!(v("7.2"), Some((7, 2, 0)));
        assert_eq!(v("9.0.0-pre.20250101.1"), Some((9, 0, 0)));
        assert_eq!(v("10.1.0"), Some((10, 1, 0)));
        assert_eq!(v("mirror/7.6.1"), Some((7, 6, 1)));
    }

    #[test]
    fn builds_and_aliases_that_name_no_release() {
        for text in [
            "bazel no_version",
            "development version",
            "",
            "7rc",
            "0.29.1",
            "latest",
            "last_green",
            "rolling",
        ] {
            assert_eq!(v(text), None, "{text:?}");
        }
    }

    #[test]
    fn versions_from_binary_paths() {
        let p = |s| Version::from_binary_path(s).map(|v| v.to_string());
        assert_eq!(
            p("/home/u/.cache/bazelisk/downloads/bazelbuild/bazel-5.4.1-linux-x86_64/bin/bazel"),
            Some("5.4.1".into())
        );
        assert_eq!(p("/usr/bin/bazel-4"), Some("4.0.0".into()));
        assert_eq!(p("/tmp/t/bin/bazel-7.4.1"), Some("7.4.1".into()));
        assert_eq!(p("/usr/bin/bazel"), None);
        assert_eq!(p("/usr/bin/bazel-real"), None);
        assert_eq!(
            p("/home/u/.cache/bazelisk/downloads/sha256/0f3e/bin/bazel"),
            None
        );
    }

    #[test]
    fn order_is_numeric() {
        assert!(Version::new(7, 10, 0) > Version::new(7, 2, 0));
        assert!(Version::new(10, 0, 0) > Version::new(9, 9, 9));
    }
}
