//! Which Bazel release is about to run, from the cheapest source that names one:
//! `$USE_BAZEL_VERSION`, else the workspace's `.bazelversion` (Bazelisk reads them in that
//! order, so a set `USE_BAZEL_VERSION` decides even when it names no release, e.g. `latest`),
//! else the path of the real Bazel (Bazelisk's download directory names the version), and only
//! then `bazel --version`, which the Bazel client answers without starting a server. Debian's
//! 4.2.3 answers `bazel no_version`: unknown, which gets no version-specific flag.

use crate::bazel::Version;
use crate::dirs::Env;
use std::path::Path;

/// The version, or None when no source names a release.
pub fn detect(env: Env, workspace: &Path, real_bazel: &Path) -> Option<Version> {
    let declared = env("USE_BAZEL_VERSION")
        .filter(|v| !v.is_empty())
        .map(|v| v.to_string_lossy().into_owned())
        .or_else(|| first_line(&workspace.join(".bazelversion")));
    if let Some(v) = declared.as_deref().and_then(Version::parse) {
        return Some(v);
    }
    if let Some(v) = Version::from_binary_path(&real_bazel.to_string_lossy()) {
        return Some(v);
    }
    let out = std::process::Command::new(real_bazel)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    Version::parse(String::from_utf8_lossy(&out.stdout).lines().next()?)
}

fn first_line(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    Some(text.lines().next()?.trim().to_string()).filter(|l| !l.is_empty())
}
