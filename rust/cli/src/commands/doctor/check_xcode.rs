//! `xcode`: the DEVELOPER_DIR and SDKROOT the server would give an Apple action here, resolved
//! by the server's own code (`clonestage_server::apple_probe`, the `AppleEnv` an Execute
//! uses; docs/xcode.md) for the macOS and iOS simulator SDKs of the selected Xcode. Skipped on
//! a host without Xcode tools, where the server passes Apple keys through unchanged as
//! Bazel's local spawns do on Linux. (`CLONESTAGE_APPLE_TOOLS`, tests and diagnostics only,
//! points it at stub tools on any OS.)

use super::report::Outcome;
use super::Context;
use clonestage_server::AppleProbe;

const PLATFORMS: [&str; 2] = ["MacOSX", "iPhoneSimulator"];

pub fn check(_ctx: &mut Context) -> Outcome {
    let mut found = Vec::new();
    for platform in PLATFORMS {
        match clonestage_server::apple_probe(platform, None) {
            AppleProbe::NoXcode => {
                return Outcome::skip(format!(
                    "this host has no Xcode tools ({}): the server passes an action's XCODE_VERSION_OVERRIDE and APPLE_SDK_PLATFORM through unchanged, as Bazel's local spawns do off macOS",
                    super::platform::NAME
                ))
            }
            AppleProbe::Fails(m) => {
                return Outcome::fail(format!("an action on {platform} would fail here: {m}"))
            }
            AppleProbe::Resolved(vars) => {
                let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
                found.push(format!(
                    "{platform}: DEVELOPER_DIR={} SDKROOT={}",
                    get("DEVELOPER_DIR").unwrap_or("(the action's own)"),
                    get("SDKROOT").unwrap_or("(none)")
                ));
            }
        }
    }
    Outcome::pass(format!("resolved as the server does: {}", found.join("; ")))
}
