//! The SDK an Apple action is built against: `SDKROOT` from `xcrun --sdk <sdk> --show-sdk-path`,
//! run with the action's developer dir. Which `<sdk>` depends on the Bazel version:
//! - Bazel 4.2.3 asks for the platform lowercased followed by `APPLE_SDK_VERSION_OVERRIDE`
//!   (`iphoneos17.2`; `XcodeLocalEnvProvider.java:105-107,132` of its release source:
//!   `appleSdkPlatform.toLowerCase() + sdkVersion`);
//! - current Bazel asks for the platform alone (`iphoneos`; bazelbuild/bazel commit 01d06be8,
//!   `XcodeLocalEnvProvider.java:98-100,123`: `Ascii.toLowerCase(appleSdkPlatform)`). The
//!   version was dropped by commit 0af1cbae of 2024-01-22 (after Bazel 7.0.0 was released,
//!   before 8.0 was branched), so Bazel 8 and 9 ask this way; apple_support still sets the
//!   variable. Whether 7.1-7.x took the change was not read.
//!
//! The versioned form is asked first (it names exactly the SDK `xcode_config` expects), then,
//! if xcrun refuses it, the platform alone: a pinned `--ios_sdk_version` that the Xcode does not
//! have exactly builds locally under Bazel 8-9, so it builds here too. A hung or missing xcrun
//! is not asked twice.

use super::{precondition, Tools, SDK_PLATFORM, SDK_VERSION};
use crate::failure::Failure;

/// The SDK's path from xcrun with developer dir `dd`: `<platform><version>` (Bazel 4.2.3 to
/// 7.0), and, if xcrun refuses that, `<platform>` (Bazel 8 and 9).
pub(super) fn root(
    t: &Tools,
    dd: Option<&str>,
    platform: &str,
    version: Option<&str>,
) -> Result<String, Failure> {
    let plain = platform.to_ascii_lowercase();
    let mut tried = Vec::new();
    if let Some(v) = version.filter(|v| !v.is_empty()) {
        let versioned = format!("{plain}{v}");
        match t.sdk_path(dd, &versioned) {
            Ok(p) => return Ok(p),
            // Asking again would hang or fail the same way.
            Err(e) if !e.refused => tried.push((versioned, e)),
            Err(e) => {
                tracing::info!(sdk = %versioned, error = %e, fallback = %plain, "xcrun has no SDK of that exact version; asking for the platform alone, as Bazel 8-9 do");
                tried.push((versioned, e));
            }
        }
    }
    if tried.iter().all(|(_, e)| e.refused) {
        match t.sdk_path(dd, &plain) {
            Ok(p) => return Ok(p),
            Err(e) => tried.push((plain, e)),
        }
    }
    let asked: Vec<String> = tried.iter().map(|(s, e)| format!("'{s}': {e}")).collect();
    Err(precondition(format!(
        "cannot find the Apple SDK ({SDK_PLATFORM}={platform}{}) in DEVELOPER_DIR={}; asked xcrun for {}",
        version
            .map(|v| format!(", {SDK_VERSION}={v}"))
            .unwrap_or_default(),
        dd.unwrap_or("(xcode-select's default)"),
        asked.join("; then ")
    )))
}
