//! Linux has no Xcode: no tools, so nothing is resolved and an action's Apple keys pass
//! through unchanged, as with Bazel's local spawns on Linux (`PosixLocalEnvProvider`).

use super::Tools;

pub(super) fn tools() -> Option<Tools> {
    None
}
