//! What the server would add to an Apple action's environment on this host, asked once for
//! `clonestage doctor`'s xcode check, through the same `AppleEnv` an Execute uses
//! (`execution::apple_env`, docs/xcode.md): an action that carries only
//! `APPLE_SDK_PLATFORM` (and `XCODE_VERSION_OVERRIDE`, when given) gets DEVELOPER_DIR and
//! SDKROOT resolved exactly as it would in a run.

use crate::execution::apple_env::{AppleEnv, SDK_PLATFORM, XCODE_VERSION};
use bazel_remote_apis::build::bazel::remote::execution::v2::command::EnvironmentVariable;

/// The answer for one platform.
#[derive(Debug, Clone, PartialEq)]
pub enum AppleProbe {
    /// This host has no Xcode tools (Linux): the server passes Apple keys through unchanged.
    NoXcode,
    /// The variables the server adds, in the order it adds them.
    Resolved(Vec<(String, String)>),
    /// The action would fail with FAILED_PRECONDITION; the message it would carry.
    Fails(String),
}

/// Resolve the environment of an action on `platform` (`MacOSX`, `iPhoneSimulator`, ...),
/// asking for Xcode `version` when given, as the server would.
pub fn apple_probe(platform: &str, version: Option<&str>) -> AppleProbe {
    let env = AppleEnv::for_this_host();
    if !env.resolves() {
        return AppleProbe::NoXcode;
    }
    let var = |name: &str, value: &str| EnvironmentVariable {
        name: name.to_string(),
        value: value.to_string(),
    };
    let mut asked = vec![var(SDK_PLATFORM, platform)];
    if let Some(v) = version {
        asked.push(var(XCODE_VERSION, v));
    }
    match env.additions(&asked) {
        Ok(add) => AppleProbe::Resolved(add.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
        Err(f) => AppleProbe::Fails(f.message()),
    }
}
