//! Where macOS keeps the Apple tools and Xcode bundles: /usr/bin's `xcrun`, `xcode-select`,
//! `mdfind` and `plutil` (the shims every macOS has, as Bazel calls /usr/bin/xcrun), and
//! /Applications.

use super::tools::{pinned_from_env, Tools, TOOL_TIMEOUT};
use std::path::PathBuf;

pub(super) fn tools() -> Option<Tools> {
    Some(Tools {
        xcrun: PathBuf::from("/usr/bin/xcrun"),
        xcode_select: PathBuf::from("/usr/bin/xcode-select"),
        mdfind: PathBuf::from("/usr/bin/mdfind"),
        plutil: PathBuf::from("/usr/bin/plutil"),
        applications: vec![PathBuf::from("/Applications")],
        pinned_developer_dir: pinned_from_env(),
        timeout: TOOL_TIMEOUT,
    })
}
