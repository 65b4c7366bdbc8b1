//! `TMPDIR` for every action, as Bazel gives it to every local spawn on Linux and macOS alike:
//! the Bazel command's `TMPDIR`, else `/tmp`, replacing any value the action carries.
//!
//! Read in Bazel 4.2.3's source (`src/main/java/com/google/devtools/build/lib/exec/local/`):
//! `LocalSpawnRunner.java:343-345` passes every local spawn's environment through
//! `LocalEnvProvider.rewriteLocalEnv`; `LocalEnvProvider.java:34-43` picks
//! `XcodeLocalEnvProvider` on macOS and `PosixLocalEnvProvider` elsewhere; both drop the
//! spawn's `TMPDIR` and put the client's, or `/tmp` when that is unset or empty
//! (`PosixLocalEnvProvider.java:48-58`, `XcodeLocalEnvProvider.java:75-85`). Current Bazel's
//! macOS provider does the same (bazelbuild/bazel commit 01d06be8,
//! `XcodeLocalEnvProvider.java:73-83`). A remote spawn never carries it, so the executor sets
//! it, or an action would see whatever TMPDIR the executor itself has (or none).
//!
//! The server stands in for the Bazel command with its own `TMPDIR`: the launcher starts it in
//! the environment of the Bazel command that needed it.

use std::ffi::OsString;

pub(crate) const NAME: &str = "TMPDIR";

/// `TMPDIR` from an environment value: unset or empty is `/tmp`.
pub(crate) fn from_env(v: Option<OsString>) -> String {
    v.map(|v| v.to_string_lossy().into_owned())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "/tmp".into())
}

/// The server's own: what every action gets.
pub(crate) fn of_this_process() -> String {
    from_env(std::env::var_os(NAME))
}

/// `env` without its `TMPDIR`, then `TMPDIR=tmpdir`.
pub(crate) fn replace<'a>(
    env: impl Iterator<Item = (&'a str, &'a str)>,
    tmpdir: &'a str,
) -> Vec<(&'a str, &'a str)> {
    env.filter(|(k, _)| *k != NAME)
        .chain(std::iter::once((NAME, tmpdir)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_or_empty_is_tmp() {
        assert_eq!(from_env(None), "/tmp");
        assert_eq!(from_env(Some("".into())), "/tmp");
        assert_eq!(from_env(Some("/var/t".into())), "/var/t");
    }

    #[test]
    fn the_actions_own_is_replaced_and_one_is_added_where_none() {
        let env = [("A", "1"), ("TMPDIR", "/mine"), ("B", "2")];
        assert_eq!(
            replace(env.into_iter(), "/srv"),
            [("A", "1"), ("B", "2"), ("TMPDIR", "/srv")]
        );
        assert_eq!(
            replace([("A", "1")].into_iter(), "/srv"),
            [("A", "1"), ("TMPDIR", "/srv")]
        );
    }
}
